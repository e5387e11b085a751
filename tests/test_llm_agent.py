"""The LLM agent against a real local HTTP server that plays back scripted chat completions."""

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from repogym.agents import make_agent
from repogym.agents.errors import LLMServerUnreachable
from repogym.agents.llm import LLMAgent, LLMConfig, LLMHTTPError
from repogym.envs.actions import parse_action
from repogym.envs.core.errors import ConfigError, InfraError

TOOLS = [{"type": "function", "function": {"name": "view", "description": "Show a file.",
                                           "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}},
         {"type": "function", "function": {"name": "submit", "description": "Submit.",
                                           "parameters": {"type": "object", "properties": {}}}}]


def tool_call_reply(name, arguments, call_id="call_1", usage=(10, 5)):
    """A chat completion whose message holds one tool call (``arguments`` as the JSON string OpenAI sends)."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return 200, {"id": "x", "object": "chat.completion",
                 "choices": [{"index": 0, "finish_reason": "tool_calls",
                              "message": {"role": "assistant", "content": None,
                                          "tool_calls": [{"id": call_id, "type": "function",
                                                          "function": {"name": name, "arguments": args}}]}}],
                 "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1],
                           "total_tokens": usage[0] + usage[1]}}


def text_reply(text, usage=(7, 3)):
    return 200, {"choices": [{"index": 0, "finish_reason": "stop",
                              "message": {"role": "assistant", "content": text}}],
                 "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1],
                           "total_tokens": usage[0] + usage[1]}}


class FakeServer:
    """``/v1/chat/completions`` answering from ``script`` in order: ``(status, body)`` or ``(status, body,
    delay_s)``; records every request body. ``GET /v1/models`` answers ``models``."""

    def __init__(self):
        self.script: list[tuple] = []
        self.requests: list[dict] = []
        self.gets: list[str] = []
        self.models: tuple[int, dict] = (200, {"object": "list", "data": [{"id": "test-model", "object": "model"}]})
        """The ``GET /v1/models`` answer: (status, body)."""
        self.headers: list[dict] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append(body)
                fake.headers.append(dict(self.headers))
                if self.path != "/v1/chat/completions":
                    status, reply, delay = 404, {"error": f"no route {self.path}"}, 0
                elif not fake.script:
                    status, reply, delay = 500, {"error": "script exhausted"}, 0
                else:
                    status, reply, *rest = fake.script.pop(0)
                    delay = rest[0] if rest else 0
                time.sleep(delay)
                data = json.dumps(reply).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:  # the client gave up waiting (the timeout test)
                    pass

            def do_GET(self):
                fake.gets.append(self.path)
                status, reply = fake.models if self.path == "/v1/models" else (404, {"error": "no route"})
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02},
                                       daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    fake = FakeServer()
    yield fake
    fake.close()


class Sleeps(list):
    """A stand-in for ``time.sleep`` that records the delays instead of waiting."""

    def __call__(self, seconds):
        self.append(seconds)


def agent_for(server, sleeps=None, **overrides):
    config = LLMConfig(base_url=server.base_url, model="test-model", api_key="k", max_tokens=64)
    return LLMAgent(config, sleep=sleeps if sleeps is not None else Sleeps(), **overrides)


def test_two_turns_send_the_conversation_and_return_the_tool_calls(server):
    server.script = [tool_call_reply("view", {"path": "calc/ops.py"}, "call_a", (100, 20)),
                     tool_call_reply("submit", {}, "call_b", (150, 10))]
    agent = agent_for(server, extra_body={"top_k": 20})
    agent.reset("fix clamp", {"tools": TOOLS, "task_id": "t"})

    action = agent.act("fix clamp", {})
    call = parse_action(action)
    assert (call.name, call.arguments) == ("view", {"path": "calc/ops.py"})
    first = server.requests[0]
    assert first["model"] == "test-model" and first["tools"] == TOOLS and first["tool_choice"] == "auto"
    assert (first["temperature"], first["max_tokens"], first["top_k"]) == (0.0, 64, 20)
    assert [m["role"] for m in first["messages"]] == ["system", "user"]
    assert first["messages"][1]["content"] == "fix clamp"
    assert server.headers[0]["Authorization"] == "Bearer k"

    call = parse_action(agent.act("1\tdef add(a, b):", {"turn": 1}))
    assert (call.name, call.arguments) == ("submit", {})
    second = server.requests[1]["messages"]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "tool"]
    assert second[2]["tool_calls"][0]["id"] == "call_a"
    assert second[2]["tool_calls"][0]["function"] == {"name": "view", "arguments": '{"path": "calc/ops.py"}'}
    assert second[3] == {"role": "tool", "tool_call_id": "call_a", "content": "1\tdef add(a, b):"}

    assert agent.usage == {"prompt_tokens": 250, "completion_tokens": 30, "total_tokens": 280, "requests": 2,
                           "retries": 0}
    record = agent.turn_record()
    assert record["usage"] == {"prompt_tokens": 150, "completion_tokens": 10, "total_tokens": 160}
    assert record["latency_s"] >= 0 and record["retries"] == 0

    agent.reset("another task", {"tools": TOOLS})
    assert agent.tools == TOOLS
    assert agent.usage == {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0, "requests": 0,
                           "retries": 0}
    assert [m["role"] for m in agent.messages] == ["system", "user"]


def test_only_the_first_of_several_tool_calls_runs_and_stays_in_the_history(server):
    status, body = tool_call_reply("view", {"path": "a"}, "call_1")
    body["choices"][0]["message"]["tool_calls"].append(
        {"id": "call_2", "type": "function", "function": {"name": "submit", "arguments": "{}"}})
    server.script = [(status, body), tool_call_reply("submit", {})]
    agent = agent_for(server)
    agent.reset("task", {"tools": TOOLS})
    assert parse_action(agent.act("task", {})).arguments == {"path": "a"}
    agent.act("file a", {})
    history = server.requests[1]["messages"]
    # Every tool call in the history needs a tool answer, so the unexecuted second one is left out.
    assert [c["id"] for c in history[2]["tool_calls"]] == ["call_1"]
    assert history[3]["tool_call_id"] == "call_1"


def test_arguments_that_are_not_json_reach_the_env_as_a_parse_error(server):
    from repogym.envs.tools import ToolError
    server.script = [tool_call_reply("view", '{"path": "a"')]
    agent = agent_for(server)
    agent.reset("task", {"tools": TOOLS})
    action = agent.act("task", {})
    assert json.loads(action) == {"name": "view", "arguments": '{"path": "a"'}
    with pytest.raises(ToolError) as caught:
        parse_action(action)
    assert caught.value.kind == "parse_error" and "not valid JSON" in caught.value.message


def test_plain_text_answer_is_returned_as_is_and_answered_by_a_user_message(server):
    text = 'Let me look.\n<tool_call>{"name": "view", "arguments": {"path": "a"}}</tool_call>'
    server.script = [text_reply(text), tool_call_reply("submit", {})]
    agent = agent_for(server)
    agent.reset("task", {"tools": TOOLS})
    action = agent.act("task", {})
    assert action == text
    assert parse_action(action).arguments == {"path": "a"}
    agent.act("contents of a", {})
    history = server.requests[1]["messages"]
    assert [m["role"] for m in history] == ["system", "user", "assistant", "user"]
    assert history[2] == {"role": "assistant", "content": text}
    assert history[3] == {"role": "user", "content": "contents of a"}
    assert agent.usage["requests"] == 2 and agent.usage["total_tokens"] == 10 + 15


def test_503_is_retried_with_growing_backoff_then_succeeds(server):
    server.script = [(503, {"error": "loading"}), (429, {"error": "slow down"}), (502, {"error": "gateway"}),
                     tool_call_reply("submit", {})]
    sleeps = Sleeps()
    agent = agent_for(server, sleeps, backoff_s=0.5)
    agent.reset("task", {"tools": TOOLS})
    assert parse_action(agent.act("task", {})).name == "submit"
    assert sleeps == [0.5, 1.0, 2.0]
    assert len(server.requests) == 4
    assert agent.usage["retries"] == 3 and agent.usage["requests"] == 1
    assert agent.turn_record()["retries"] == 3


def test_backoff_is_capped_at_30_seconds(server):
    server.script = [(500, {})] * 3 + [tool_call_reply("submit", {})]
    sleeps = Sleeps()
    agent = agent_for(server, sleeps, backoff_s=10.0)
    agent.reset("task", {"tools": TOOLS})
    agent.act("task", {})
    assert sleeps == [10.0, 20.0, 30.0]


def test_400_raises_at_once_without_retrying(server):
    server.script = [(400, {"error": "tools[0].function.name is required"}), tool_call_reply("submit", {})]
    sleeps = Sleeps()
    agent = agent_for(server, sleeps)
    agent.reset("task", {"tools": TOOLS})
    with pytest.raises(LLMHTTPError) as caught:
        agent.act("task", {})
    assert caught.value.status == 400 and caught.value.where == "llm"
    assert "function.name is required" in str(caught.value)
    assert len(server.requests) == 1 and sleeps == []


# vLLM's OpenAI server's words (checked against a real CPU vLLM server, see ../shared/REFERENCE.md).
VLLM_OVER_CONTEXT = {"object": "error", "type": "BadRequestError", "code": 400,
                     "message": "This model's maximum context length is 512 tokens. However, your request has "
                                "700 input tokens. Please reduce the length of the input messages."}
VLLM_ANSWER_TOO_LONG = {"object": "error", "type": "BadRequestError", "code": 400,
                        "message": "'max_tokens' or 'max_completion_tokens' is too large: 1024. This model's maximum "
                                   "context length is 512 tokens and your request has 400 input tokens "
                                   "(1024 > 512 - 400)."}


def test_a_prompt_over_the_context_is_a_context_overflow_not_an_infra_error(server):
    from repogym.agents.errors import ContextOverflow
    server.script = [(400, VLLM_OVER_CONTEXT)]
    agent = agent_for(server, Sleeps())
    agent.reset("task", {"tools": TOOLS})
    with pytest.raises(ContextOverflow) as caught:
        agent.act("task", {})
    assert not isinstance(caught.value, InfraError)
    assert (caught.value.tokens, caught.value.limit) == (700, 512)
    assert len(server.requests) == 1


def test_an_answer_that_would_not_fit_is_asked_for_again_with_what_is_left(server):
    server.script = [(400, VLLM_ANSWER_TOO_LONG), tool_call_reply("submit", {})]
    agent = agent_for(server, Sleeps())
    agent.reset("task", {"tools": TOOLS})
    assert parse_action(agent.act("task", {})).name == "submit"
    assert [r["max_tokens"] for r in server.requests] == [agent.config.max_tokens, 512 - 400]


def test_openai_style_overflow_codes_and_a_second_refusal_are_overflows(server):
    from repogym.agents.errors import ContextOverflow
    from repogym.agents.llm import context_overflow
    openai_style = {"error": {"message": "This model's maximum context length is 8192 tokens. However, you "
                                         "requested 9000 tokens (8000 in the messages, 1000 in the completion).",
                              "code": "context_length_exceeded"}}
    error = LLMHTTPError("u", 400, json.dumps(openai_style))
    assert context_overflow(error) == (8000, 8192)
    assert context_overflow(LLMHTTPError("u", 401, json.dumps(openai_style))) is None
    assert context_overflow(LLMHTTPError("u", 400, "bad tool schema")) is None
    server.script = [(400, VLLM_ANSWER_TOO_LONG), (400, VLLM_ANSWER_TOO_LONG)]
    agent = agent_for(server, Sleeps())
    agent.reset("task", {"tools": TOOLS})
    with pytest.raises(ContextOverflow):
        agent.act("task", {})
    assert len(server.requests) == 2


def test_exhausted_retries_raise_infra_error_naming_the_url(server):
    server.script = [(503, {"error": "overloaded"})] * 3
    sleeps = Sleeps()
    agent = agent_for(server, sleeps, max_retries=2)
    agent.reset("task", {"tools": TOOLS})
    with pytest.raises(InfraError) as caught:
        agent.act("task", {})
    assert caught.value.where == "llm"
    assert server.base_url + "/chat/completions" in caught.value.message
    assert "503" in caught.value.message and "overloaded" in caught.value.message
    assert len(server.requests) == 3 and sleeps == [1.0, 2.0]


def test_the_agents_errors_live_in_one_module_and_stay_typed():
    from repogym.agents import context, errors, hf, llm
    from repogym.envs.core.errors import RepogymError
    assert llm.LLMHTTPError is errors.LLMHTTPError and context.ContextOverflow is errors.ContextOverflow
    assert hf.ContextOverflow is errors.ContextOverflow
    for cls in (errors.LLMHTTPError, errors.TransientLLMError):
        assert issubclass(cls, InfraError)  # the rollout ends the episode as infra_error, never a reward of 0
    assert issubclass(errors.ContextOverflow, RepogymError) and not issubclass(errors.ContextOverflow, InfraError)
    assert issubclass(errors.TrajectoryFileError, RepogymError) and issubclass(errors.TrajectoryFileError, ValueError)
    assert errors.TransientLLMError("HTTP 503").where == "llm"


def test_an_unknown_context_record_policy_lists_the_known_ones():
    from repogym.agents.context import REBUILDERS, rebuild
    with pytest.raises(ConfigError, match="unknown context record policy 'nope': expected one of full, window, summary"):
        rebuild([], {"policy": "nope"})
    assert REBUILDERS.names() == ["full", "window", "summary"]


def test_retried_failures_name_the_last_one_without_nesting(server):
    server.script = [(502, {"error": "bad gateway"})] * 2
    agent = agent_for(server, Sleeps(), max_retries=1)
    agent.reset("task", {"tools": TOOLS})
    with pytest.raises(InfraError) as caught:
        agent.act("task", {})
    assert "last error: HTTP 502" in caught.value.message and "[llm]" not in caught.value.message


def test_connection_refused_is_retried_then_raises_infra_error():
    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens there
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    sleeps = Sleeps()
    agent = LLMAgent(LLMConfig(base_url=f"http://127.0.0.1:{port}/v1", max_retries=1), sleep=sleeps)
    agent.reset("task", {"tools": TOOLS})
    with pytest.raises(InfraError) as caught:
        agent.act("task", {})
    assert caught.value.where == "llm" and f"127.0.0.1:{port}" in caught.value.message
    assert sleeps == [1.0] and agent.usage["retries"] == 1


def test_a_timeout_is_retried(server):
    server.script = [(*tool_call_reply("view", {"path": "slow"}), 1.0), tool_call_reply("submit", {})]
    agent = agent_for(server, timeout_s=0.2)
    agent.reset("task", {"tools": TOOLS})
    assert parse_action(agent.act("task", {})).name == "submit"
    assert agent.usage["retries"] == 1


def test_config_reads_the_environment_and_checks_values(monkeypatch):
    monkeypatch.setenv("REPOGYM_LLM_BASE_URL", "http://example.test:9/v1")
    monkeypatch.setenv("REPOGYM_LLM_MODEL", "qwen")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    config = LLMConfig()
    assert (config.base_url, config.model, config.api_key) == ("http://example.test:9/v1", "qwen", "EMPTY")
    assert config.url == "http://example.test:9/v1/chat/completions"
    assert LLMConfig(base_url="http://h/v1/").url == "http://h/v1/chat/completions"
    with pytest.raises(ConfigError, match="max_retries"):
        LLMConfig(max_retries=-1)
    with pytest.raises(ConfigError, match="LLMAgent has no option"):
        LLMAgent(temprature=0.5)
    agent = make_agent("llm", model="m", temperature=0.7)
    assert isinstance(agent, LLMAgent) and (agent.config.model, agent.config.temperature) == ("m", 0.7)


def test_end_to_end_episode_on_the_local_backend(server, tiny_task):
    from repogym.agents.rollout import run_episode
    from repogym.envs.repo_env import RepoTaskEnv
    from tests.conftest import require_backend
    require_backend("local")
    server.script = [tool_call_reply("apply_patch", {"patch": tiny_task.patch}, "call_p"),
                     tool_call_reply("submit", {}, "call_s")]
    env = RepoTaskEnv(task=tiny_task, sandbox="local", max_turns=5)
    try:
        agent = agent_for(server)
        result = run_episode(env, agent, agent_name="llm")
    finally:
        env.close()
    assert result.status == result.eval["status"] == "resolved" and result.reward == 1.0 and result.turns == 2
    history = server.requests[1]["messages"]
    assert server.requests[0]["tools"] == env.tools_schema()
    assert history[-1]["role"] == "tool" and history[-1]["tool_call_id"] == "call_p"
    assert "applied" in history[-1]["content"]
    assert agent.usage["requests"] == 2


def test_an_episode_whose_first_prompt_overflows_ends_as_context_overflow_with_reward_0(server, tiny_task):
    from repogym.agents.rollout import run_episode
    from repogym.envs.repo_env import RepoTaskEnv
    from tests.conftest import require_backend
    require_backend("local")
    server.script = [(400, VLLM_OVER_CONTEXT)]
    env = RepoTaskEnv(task=tiny_task, sandbox="local", max_turns=5)
    try:
        result = run_episode(env, agent_for(server), agent_name="llm")
    finally:
        env.close()
    assert result.status == "context_overflow" and result.reward == 0.0 and result.turns == 0
    assert "512" in result.eval["error"]["message"]


def test_the_tools_option_sends_only_the_named_tools(server):
    server.script = [tool_call_reply("submit", {}, "call_a", (10, 2))]
    agent = agent_for(server, tools=["submit"])
    agent.reset("task", {"tools": TOOLS})
    agent.act("task", {})
    assert [t["function"]["name"] for t in server.requests[0]["tools"]] == ["submit"]


# -- the server check before the first episode -----------------------------------------------------------------
def closed_port() -> int:
    """A port that was free a moment ago: nothing listens there."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_check_server_lists_the_models_of_a_server_that_answers(server):
    agent = agent_for(server)
    assert agent.check_server() == ["test-model"]
    assert server.gets == ["/v1/models"] and server.requests == []  # a GET only: no completion is paid for
    server.models = (404, {"error": "no such route"})  # a server without the route is still a server
    assert agent.check_server() == []


def test_check_server_on_a_closed_port_names_the_url_and_how_to_start_a_server():
    port = closed_port()
    agent = LLMAgent(LLMConfig(base_url=f"http://127.0.0.1:{port}/v1", max_retries=3), sleep=Sleeps())
    start = time.monotonic()
    with pytest.raises(LLMServerUnreachable) as caught:
        agent.check_server()
    assert time.monotonic() - start < 3  # one try, no backoff
    error = caught.value
    assert isinstance(error, InfraError) and error.where == "llm"
    assert f"no model server answers at http://127.0.0.1:{port}/v1" in error.message
    assert "Connection refused" in error.message or "refused" in error.message.lower()
    assert "repogym proxy --model smollm2-135m-instruct" in error.message and "--agent-config" in error.message
    assert "REPOGYM_LLM_BASE_URL" in error.message


def test_check_server_tells_a_refused_key_and_a_gateway_without_a_server(server):
    agent = agent_for(server)
    server.models = (401, {"error": "bad key"})
    with pytest.raises(LLMHTTPError, match="HTTP 401"):
        agent.check_server()
    server.models = (503, {"error": "upstream down"})
    with pytest.raises(LLMServerUnreachable, match="returned HTTP 503"):
        agent.check_server()


def test_check_server_waits_a_few_seconds_at_most():
    from repogym.agents.llm import SERVER_CHECK_TIMEOUT_S

    with socket.socket() as listener:  # accepts connections (the backlog) but never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        agent = LLMAgent(LLMConfig(base_url=f"http://127.0.0.1:{port}/v1", timeout_s=0.3))
        start = time.monotonic()
        with pytest.raises(LLMServerUnreachable, match="timed out"):
            agent.check_server()
        assert time.monotonic() - start < 2
    assert SERVER_CHECK_TIMEOUT_S <= 10
