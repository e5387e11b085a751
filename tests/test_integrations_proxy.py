"""The OpenAI-compatible proxy over a repogym engine: recorded ids and logprobs, prefix reuse, context overflow."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from repogym.agents.errors import ContextOverflow
from repogym.agents.hf import HFEngine
from repogym.agents.llm import LLMAgent
from repogym.agents.policy import Completion
from repogym.envs.core import bugs
from repogym.envs.core.errors import ConfigError, InfraError, InternalError
from repogym.integrations.proxy import CONTEXT_OVERFLOW, EPISODE_HEADER, ChatProxy, ProxyConfig, parse_tool_calls
from repogym.trainer.tiny import TinyModelConfig, build_tiny_model, build_tokenizer

pytestmark = pytest.mark.integrations

TINY = TinyModelConfig(vocab_size=400, hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2,
                       num_kv_heads=1, max_position_embeddings=1024)
BASH = {"type": "function", "function": {"name": "bash", "description": "Run a command",
                                         "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}


@pytest.fixture(scope="module")
def tiny_lm():
    corpus = ['<tool_call>{"name": "bash", "arguments": {"command": "ls -la"}}</tool_call>',
              "You are fixing an issue in the repository. Run the tests and submit.", "hello world"] * 5
    tokenizer = build_tokenizer(corpus, TINY.vocab_size)
    return tokenizer, build_tiny_model(tokenizer, TINY)


def post(url: str, body: dict, headers: dict | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def forward_logprobs(model, prompt: list[int], completion: list[int]) -> list[float]:
    import torch

    with torch.no_grad():
        logits = model(torch.tensor([prompt + completion])).logits[0].float()
    logp = torch.log_softmax(logits, -1)
    return [logp[len(prompt) - 1 + i, t].item() for i, t in enumerate(completion)]


def test_chat_completions_record_the_engines_ids_and_logprobs_and_reuse_them_as_the_next_prefix(tiny_lm):
    tokenizer, model = tiny_lm
    with ChatProxy(HFEngine(model, "cpu"), tokenizer, ProxyConfig(model_name="tiny", max_tokens=12)) as proxy:
        models = json.loads(urllib.request.urlopen(proxy.url + "/v1/models").read())
        assert models["data"][0]["id"] == "tiny" and models["data"][0]["max_model_len"] == TINY.max_position_embeddings
        messages = [{"role": "system", "content": "Fix it."}, {"role": "user", "content": "hello world"}]
        body = {"model": "tiny", "messages": messages, "tools": [BASH], "logprobs": True, "seed": 1,
                "return_token_ids": True}
        code, first = post(proxy.base_url("ep-1") + "/chat/completions", body)
        assert code == 200, first
        call = proxy.episode("ep-1").calls[0]
        # The prompt is the chat template's rendering, tools included; the answer is exactly what the engine made.
        text = tokenizer.apply_chat_template(messages, tools=[BASH], tokenize=False, add_generation_prompt=True)
        assert call.prompt_ids == tokenizer.encode(text, add_special_tokens=False) == first["prompt_token_ids"]
        assert call.completion_ids == first["choices"][0]["token_ids"] and 0 < len(call.completion_ids) <= 12
        assert [c["logprob"] for c in first["choices"][0]["logprobs"]["content"]] == call.logprobs
        assert call.logprobs == pytest.approx(forward_logprobs(model, call.prompt_ids, call.completion_ids), abs=1e-4)
        assert call.version == 0 and first["usage"]["completion_tokens"] == len(call.completion_ids)

        # The harness appends the answer and a tool result: the next prompt keeps the sampled ids verbatim.
        messages += [first["choices"][0]["message"], {"role": "user", "content": "[exit code 0]"}]
        code, second = post(proxy.url + "/v1/chat/completions", {**body, "messages": messages},
                            headers={EPISODE_HEADER: "ep-1"})
        assert code == 200, second
        episode = proxy.episode("ep-1")
        later = episode.calls[1]
        assert later.extends and later.prompt_ids[:len(call.prompt_ids) + len(call.completion_ids)] == \
            call.prompt_ids + call.completion_ids
        assert later.logprobs == pytest.approx(forward_logprobs(model, later.prompt_ids, later.completion_ids), abs=1e-4)
        seq = episode.tokens()
        assert seq.ids == later.prompt_ids + later.completion_ids and seq.starts == [0]
        assert [i for i, m in zip(seq.ids, seq.mask) if m] == call.completion_ids + later.completion_ids
        assert [lp for lp, m in zip(seq.logprobs, seq.mask) if m] == call.logprobs + later.logprobs

        # A harness that rewrites the history: a new segment, the whole prompt recorded, a new context.
        code, _ = post(proxy.base_url("ep-1") + "/chat/completions",
                       {**body, "messages": [{"role": "user", "content": "start over"}]})
        assert code == 200
        records = proxy.episode("ep-1").token_records()
        assert records[2].get("new_context") and records[2]["prompt"] == proxy.episode("ep-1").calls[2].prompt_ids
        assert len(proxy.episode("ep-1").tokens().contexts()) == 2
        # The record is served too, and taken out with pop.
        assert json.loads(urllib.request.urlopen(proxy.url + "/episodes/ep-1").read())["calls"][1]["extends"]
        assert len(proxy.pop("ep-1").calls) == 3 and proxy.pop("ep-1").calls == []


def test_a_prompt_over_the_context_is_a_vllm_style_400_and_the_episode_is_recorded_as_overflow(tiny_lm):
    tokenizer, model = tiny_lm
    with ChatProxy(HFEngine(model, "cpu"), tokenizer, ProxyConfig(max_context_tokens=64, max_tokens=8)) as proxy:
        long = {"model": "m", "messages": [{"role": "user", "content": "hello world " * 60}]}
        code, body = post(proxy.base_url("over") + "/chat/completions", long)
        assert code == 400 and "maximum context length is 64 tokens" in body["error"]["message"]
        episode = proxy.episode("over")
        assert episode.status == CONTEXT_OVERFLOW and episode.calls == []
        assert episode.overflow["limit"] == 64 and episode.overflow["prompt_tokens"] > 64
        # repogym's own HTTP agent reads that answer as the policy's limit, not an infrastructure failure.
        agent = LLMAgent(base_url=proxy.base_url("over2"), max_retries=0, max_tokens=8)
        agent.reset("hello world " * 60, {})
        with pytest.raises(ContextOverflow):
            agent.act("hello world " * 60, {})
        assert proxy.episode("over2").status == CONTEXT_OVERFLOW
        # A prompt that fits but leaves less room than max_tokens is answered with what fits.
        code, body = post(proxy.base_url("fits") + "/chat/completions",
                          {"messages": [{"role": "user", "content": "hello world " * 8}], "max_tokens": 500})
        assert code == 200 and body["usage"]["total_tokens"] <= 64 and proxy.episode("fits").status is None


class FixedEngine:
    """Returns fixed texts as a model would (the tokenizer's ids, an end-of-turn token), with made-up logprobs."""

    max_model_len = None

    def __init__(self, tokenizer, texts: list[str]):
        self.tokenizer, self.texts, self.version = tokenizer, list(texts), 7

    def generate(self, prompts, params):
        ids = self.tokenizer.encode(self.texts.pop(0), add_special_tokens=False) + params.stop_token_ids
        return [Completion(ids, [-0.5] * len(ids), "stop", self.version)]

    def update_weights(self, state_dict, version):
        self.version = version


def test_tool_calls_are_parsed_with_repogyms_action_parser_and_the_raw_text_is_re_rendered(tiny_lm):
    tokenizer, _ = tiny_lm
    texts = ['Let me look.\n<tool_call>{"name": "bash", "arguments": {"command": "ls -la"}}</tool_call>',
             '{"name": "bash", "arguments": "{\\"command\\": \\"pwd\\"}"}', "I am done."]
    proxy = ChatProxy(FixedEngine(tokenizer, texts), tokenizer)
    messages = [{"role": "user", "content": "hello world"}]
    code, body = proxy.complete({"messages": messages, "tools": [BASH]}, "e")
    message = body["choices"][0]["message"]
    assert code == 200 and body["choices"][0]["finish_reason"] == "tool_calls" and message["content"] == "Let me look."
    assert json.loads(message["tool_calls"][0]["function"]["arguments"]) == {"command": "ls -la"}
    # The harness sends back its parsed copy (content None, say): the raw generated text is what gets rendered.
    messages += [{**message, "content": None}, {"role": "tool", "tool_call_id": message["tool_calls"][0]["id"],
                                                 "content": "README.md"}]
    code, body = proxy.complete({"messages": messages, "tools": [BASH]}, "e")
    assert code == 200 and proxy.episode("e").calls[1].extends and proxy.episode("e").calls[1].version == 7
    assert body["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "bash"
    code, body = proxy.complete({"messages": messages}, "e")  # no tools in the request: plain text
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "I am done."}
    assert body["choices"][0]["finish_reason"] == "stop"
    assert parse_tool_calls("<tool_call>{not json}</tool_call>") == ("<tool_call>{not json}</tool_call>", [])


def test_bad_requests_are_400s_naming_the_field_and_engine_failures_are_500s(tiny_lm):
    tokenizer, _ = tiny_lm
    proxy = ChatProxy(DownEngine(), tokenizer)
    assert proxy.complete({"messages": []})[0] == 400
    assert proxy.complete({"messages": [{"role": "user", "content": "x"}], "n": 2})[1]["error"]["param"] == "n"
    assert proxy.complete({"messages": [{"role": "user", "content": "x"}], "stream": True})[0] == 400
    assert proxy.complete({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0})[0] == 400
    assert proxy.complete({"messages": [{"role": "user", "content": "x"}]}, "bad id/")[0] == 400
    code, body = proxy.complete({"messages": [{"role": "user", "content": "x"}]}, "e")  # the engine server is down
    assert code == 500 and "engine failed" in body["error"]["message"] and proxy.episode("e").errors
    assert proxy.episode("e").internal_error is None  # an outage outside repogym, not a bug of ours
    odd = [{"role": "user", "content": [{"text": 5}, "x"]}, {"role": "assistant", "content": None, "tool_calls": 5},
           {"role": "assistant", "content": "", "tool_calls": [{"id": ["unhashable"]}]}]
    code, body = proxy.complete({"messages": odd}, "odd")  # odd shapes a client may send are not bugs of ours
    assert code in (400, 500) and proxy.episode("odd").internal_error is None, body
    assert proxy.handle("GET", "/nowhere", {}, b"")[0] == 404
    assert proxy.handle("POST", "/v1/chat/completions", {}, b"{oops")[0] == 400
    with pytest.raises(ConfigError, match="max_tokens"):
        ProxyConfig(max_tokens=0)


class DownEngine:
    """An engine whose model server is gone: what a dead engine actor raises."""

    version, max_model_len = 0, None

    def generate(self, prompts, params):
        raise InfraError("vllm engine actor", "generate: the engine actor died")

    def update_weights(self, state_dict, version):
        raise InfraError("vllm engine actor", "update_weights: the engine actor died")


def test_a_bug_of_ours_in_the_engine_is_a_500_that_says_so_and_marks_the_episode(tiny_lm, monkeypatch):
    tokenizer, _ = tiny_lm
    proxy = ChatProxy(FixedEngine(tokenizer, []), tokenizer)  # no text left: generate raises IndexError, a bug
    request = {"messages": [{"role": "user", "content": "x"}]}
    with pytest.raises(InternalError, match="integrations.proxy.complete"):  # strict (the suite): raised
        proxy.complete(request, "strict")
    assert proxy.episode("strict").internal_error["message"].startswith("IndexError")
    monkeypatch.setenv(bugs.STRICT_ENV, "0")  # as in production: answered, counted, the server goes on
    before = bugs.bug_counts().get("integrations.proxy.complete: IndexError", 0)
    code, body = proxy.complete(request, "lenient")
    assert code == 500 and "a bug of repogym's" in body["error"]["message"] and "IndexError" in body["error"]["message"]
    assert proxy.episode("lenient").internal_error["where"] == "integrations.proxy.complete"
    assert not proxy.episode("lenient").errors  # not recorded as an engine outage
    assert bugs.bug_counts()["integrations.proxy.complete: IndexError"] == before + 1
    monkeypatch.setenv(bugs.STRICT_ENV, "1")
    with proxy:  # over HTTP, strict mode still answers the client (a 500), it does not drop the connection
        code, body = post(proxy.url + "/episodes/http/v1/chat/completions", request)
    assert code == 500 and "IndexError" in body["error"]["message"] and proxy.episode("http").internal_error


def test_the_cli_serves_a_model_folder(tmp_path):
    import re
    import subprocess
    import sys

    from repogym.trainer.tiny import build_tiny

    folder = build_tiny(tmp_path / "tiny", ["hello world", "<tool_call>{}</tool_call>"] * 5,
                        TinyModelConfig(vocab_size=300, hidden_size=16, intermediate_size=32, num_layers=1,
                                        num_heads=2, num_kv_heads=1, max_position_embeddings=256))
    server = subprocess.Popen([sys.executable, "-m", "repogym.cli", "proxy", "--model", str(folder), "--port", "0",
                               "--engine-option", "device=cpu", "--max-tokens", "4"],
                              stderr=subprocess.PIPE, text=True)
    try:
        url = None
        for line in server.stderr:  # after transformers' progress bars
            if (url := re.search(r"base URL (\S+)", line)) is not None:
                break
        assert url, "the proxy printed no base URL"
        code, body = post(url[1] + "/chat/completions", {"messages": [{"role": "user", "content": "hello"}]},
                          headers={EPISODE_HEADER: "cli"})
        assert code == 200 and 0 < body["usage"]["completion_tokens"] <= 4
        record = json.loads(urllib.request.urlopen(url[1].removesuffix("/v1") + "/episodes/cli").read())
        assert record["calls"][0]["completion_ids"] and record["status"] is None
        code, body = post(url[1] + "/chat/completions", {"messages": [{"role": "user", "content": "hello " * 300}]})
        assert code == 400 and "maximum context length is 256" in body["error"]["message"]
    finally:
        server.terminate()
        server.wait(timeout=30)
