"""The verifiers adapter, through verifiers' own rollout loop (its interception server and eval client, against a
scripted OpenAI-compatible server) and its own task validation, on the local sandbox and the builtin suite."""

from __future__ import annotations

import asyncio
import json
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from repogym.envs.core.errors import ConfigError
from repogym.envs.repo_env import RepoTaskEnv
from repogym.envs.tasks.suites import find_task
from tests.conftest import require_backend

pytestmark = pytest.mark.integrations
vf = pytest.importorskip("verifiers.v1")

from repogym.integrations import verifiers_env as adapter  # noqa: E402

DOC = Path(__file__).resolve().parents[1] / "docs" / "integrations" / "verifiers.md"
TASK = "repogym__tablekit-center-odd-padding"


def call(name, **arguments):
    return json.dumps({"name": name, "arguments": arguments})


def doc_example(index: int) -> str:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)[index]


class Scripted:
    """An OpenAI-compatible server answering each chat completion with the next scripted assistant message."""

    def __init__(self, messages: list[dict]):
        self.messages, self.requests = list(messages), []
        scripted = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                scripted.requests.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                message = scripted.messages.pop(0) if scripted.messages else {"content": call("submit")}
                body = json.dumps({"id": "s", "object": "chat.completion", "created": 0, "model": "scripted",
                                   "choices": [{"index": 0, "message": {"role": "assistant", **message},
                                                "finish_reason": "tool_calls" if "tool_calls" in message else "stop"}],
                                   "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.model = vf.ModelContext(model="scripted", client=vf.EvalClientConfig(
            base_url=f"http://127.0.0.1:{self.server.server_address[1]}/v1", api_key_var="SCRIPTED_API_KEY"))

    def episode(self, **env_config):
        env = adapter.load_environment(task_ids=[TASK], **{"sandbox": "local", "max_turns": 10, **env_config})

        async def run():
            async with env.serving():
                return await env.run_episode(next(iter(env.taskset)), self.model)
        try:
            return asyncio.run(run())
        finally:
            self.server.shutdown()
            self.server.server_close()


@pytest.fixture(autouse=True)
def local():
    require_backend("local")


def test_the_documented_rollout_runs_and_the_gold_patch_earns_one(capsys):
    namespace: dict = {}
    exec(compile(doc_example(0), str(DOC), "exec"), namespace)
    episode, trace = namespace["episode"], namespace["trace"]
    assert episode.ok and episode.errors == []
    assert trace.reward == 1.0 and trace.rewards["repogym"].score == 1.0
    assert trace.info["repogym"]["status"] == "resolved" and trace.info["repogym"]["reward_components"] == {"tests": 1.0}
    roles = [m.role for m in trace.messages]
    assert roles == ["user", "assistant", "user", "assistant", "user", "assistant"]
    first, applied, bad = (trace.messages[i].content for i in (0, 2, 4))
    assert find_task(TASK, "builtin").problem_statement.strip() in first and "submit" in first
    assert applied.startswith("patch applied")
    assert bad.startswith("error (parse_error)")  # the malformed reply was an observation; submit came after
    assert namespace["replies"] == []  # all three scripted replies were consumed
    assert "True 1.0 resolved" in capsys.readouterr().out


def test_verifiers_own_validation_passes_gold_and_noop(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(doc_example(1).replace("/tmp/repogym-vf-validate", str(tmp_path)), str(DOC), "exec"), namespace)
    (row,) = namespace["rows"]
    assert (row["valid"], row["reason"]) == (True, "valid")
    assert row["gold"]["valid"] is True  # RepogymTask.validate: the gold patch earned 1.0
    assert row["noop"]["valid"] is True and row["noop"]["reward"] == 0.0  # the untouched repository earns 0


def test_an_empty_submit_earns_zero():
    scripted = Scripted([{"content": call("submit")}])
    episode = scripted.episode()
    trace = episode.traces[0]
    assert episode.ok and trace.reward == 0.0 and trace.info["repogym"]["status"] == "unresolved"
    assert len(scripted.requests) == 1 and scripted.requests[0]["messages"][0]["role"] == "user"


def test_native_tool_calls_are_stepped_like_text():
    patch = find_task(TASK, "builtin").patch

    def tool_call(name, **arguments):
        return {"content": None, "tool_calls": [{"id": f"c-{name}", "type": "function", "function": {
            "name": name, "arguments": json.dumps(arguments)}}]}

    episode = Scripted([tool_call("view", path="no/such/file.py"), tool_call("apply_patch", patch=patch),
                        tool_call("submit")]).episode()
    trace = episode.traces[0]
    assert episode.ok and trace.reward == 1.0
    observations = [m.content for m in trace.messages if m.role == "user"][1:]
    assert observations[0].startswith("error (") and observations[1].startswith("patch applied")


def test_the_turn_limit_ends_the_episode_and_grades_the_diff():
    patch = find_task(TASK, "builtin").patch
    episode = Scripted([{"content": call("apply_patch", patch=patch)}, {"content": call("bash", command="ls")}]
                       ).episode(max_turns=2)
    result = episode.traces[0].info["repogym"]
    assert episode.traces[0].reward == 1.0 and result["truncation"]["reason"] == "turn_limit"


def test_an_infrastructure_failure_is_an_error_on_the_trace_not_a_zero(monkeypatch):
    def broken(self, action):
        self._done = True
        return ("[infrastructure error in sandbox.run: gone; the episode ends]", float("nan"), False, True,
                {"eval": {"status": "infra_error"}, "exclude": True,
                 "infra_error": {"where": "sandbox.run", "message": "gone"}})

    monkeypatch.setattr(RepoTaskEnv, "step", broken)
    episode = Scripted([{"content": call("bash", command="ls")}]).episode()
    trace = episode.traces[0]
    assert not episode.ok
    assert trace.rewards.get("repogym") is None
    assert any("repogym infrastructure error in sandbox.run" in e.message for e in trace.errors)


def test_a_bug_the_env_caught_ends_the_episode_as_an_internal_error_on_the_trace(monkeypatch):
    def buggy(self, action):
        return ("error (internal_error): the tool failed unexpectedly (KeyError: 'x')", 0.0, False, False,
                {"error": "internal_error", "internal_error": {"where": "env.step", "message": "KeyError: 'x'"}})

    monkeypatch.setattr(RepoTaskEnv, "step", buggy)
    episode = Scripted([{"content": call("bash", command="ls")}, {"content": call("bash", command="ls")}]).episode()
    trace = episode.traces[0]
    assert not episode.ok and trace.rewards.get("repogym") is None
    assert trace.info["repogym"]["status"] == "internal_error"
    assert any("repogym internal error" in e.message and "KeyError" in e.message for e in trace.errors)
    assert sum(m.role == "user" for m in trace.messages) == 1  # the first observation only: the step ended it


def test_action_of_prefers_the_last_assistant_tool_call():
    assistant = vf.AssistantMessage(content="", tool_calls=[vf.ToolCall(id="1", name="diff", arguments="{}")])
    assert json.loads(adapter.action_of("", [assistant])) == {"name": "diff", "arguments": "{}"}
    assert adapter.action_of("text", [vf.AssistantMessage(content="text")]) == "text"


def test_bad_arguments_are_clear_errors():
    with pytest.raises(ConfigError, match="unknown arguments \\['max_turn'\\]"):
        adapter.load_environment(max_turn=3)
    with pytest.raises(ConfigError, match="max_turns must be >= 1"):
        adapter.load_environment(max_turns=0)
    env = adapter.load_environment(task_ids=["nope"])
    with pytest.raises(ConfigError, match="not in suite"):
        list(env.taskset)


def test_without_verifiers_the_error_names_the_extra(monkeypatch):
    monkeypatch.setattr(adapter, "_CLASSES", None)
    for name in [m for m in sys.modules if m == "verifiers" or m.startswith("verifiers.")]:
        monkeypatch.setitem(sys.modules, name, None)  # import of a None entry raises ImportError
    with pytest.raises(ImportError, match=re.escape('pip install "repogym[integrations]"')):
        adapter.load_environment()
