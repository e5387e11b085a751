"""The OpenEnv server: openenv-core's own client against a real server (uvicorn, local sandbox, builtin suite)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from repogym.cli import build_parser
from repogym.envs.core.errors import ConfigError
from repogym.envs.tasks.suites import find_task
from tests.conftest import require_backend

pytestmark = pytest.mark.integrations
pytest.importorskip("openenv.core.env_server")
uvicorn = pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

from websockets.exceptions import InvalidStatus  # noqa: E402
from websockets.sync.client import connect as ws_connect  # noqa: E402

from repogym.integrations import openenv as adapter  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TASK = "repogym__tablekit-center-odd-padding"
TOKEN = "s3cret-serve-token"
HANDSHAKE = {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
             "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}


class Server:
    """``build_app`` (what ``repogym serve`` runs) under uvicorn in a thread, on a free port."""

    def __init__(self, **config):
        require_backend("local")
        self.app = adapter.build_app(adapter.OpenEnvServerConfig(sandbox="local", **config))
        self.server = uvicorn.Server(uvicorn.Config(self.app, host="127.0.0.1", port=0, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline, "the server did not start"
            time.sleep(0.05)
        self.url = f"http://127.0.0.1:{self.server.servers[0].sockets[0].getsockname()[1]}"

    @property
    def sessions(self) -> list:
        return self.app.state.repogym_sessions.live()

    @property
    def ws_url(self) -> str:
        return self.url.replace("http://", "ws://") + "/ws"

    def client(self, **kwargs):
        return adapter.RepoGymClient(base_url=self.url, **kwargs).sync()

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=60)
        assert not self.thread.is_alive()


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


@pytest.fixture(scope="module")
def server():
    running = Server(max_sessions=2)
    yield running
    running.stop()


def rpc(method: str, params: dict | None = None) -> dict:
    return {"jsonrpc": "2.0", "method": method, "params": params or {}, "id": 1}


def refused(url: str, **kwargs) -> tuple[int, str]:
    """The status and body a WebSocket handshake is refused with (fails if it is admitted)."""
    with pytest.raises(InvalidStatus) as refusal:
        ws_connect(url, open_timeout=30, **kwargs).close()
    return refusal.value.response.status_code, refusal.value.response.body.decode()


def a_session_answers(url: str, **kwargs) -> None:
    with ws_connect(url, open_timeout=30, **kwargs) as socket:
        socket.send(json.dumps({"type": "state"}))
        assert json.loads(socket.recv(timeout=60))["type"] == "state"


def oracle_calls(task_id: str) -> list[dict]:
    from repogym.agents.oracle import OracleAgent
    return [json.loads(a) for a in OracleAgent().plan(find_task(task_id))]


def test_the_gold_patch_through_the_tools_scores_1(server):
    with server.client() as env:
        result = env.reset(task_id=TASK, episode_id="ep-1")
        obs = result.observation
        assert not result.done and result.reward is None
        assert "<issue>" in obs.text and obs.task_id == TASK
        assert {"bash", "apply_patch", "submit"} <= {t["function"]["name"] for t in obs.tools}
        state = env.state()
        assert (state.episode_id, state.step_count, state.task_id, state.done) == ("ep-1", 0, TASK, False)

        calls = oracle_calls(TASK)
        assert calls[0]["name"] == "apply_patch" and calls[-1]["name"] == "submit"
        for call in calls:
            result = env.step(adapter.RepoAction(**call))
        obs = result.observation
        assert result.done and result.reward == 1.0 and obs.reward == 1.0
        assert obs.eval_status == "resolved" and obs.info["eval"]["status"] == "resolved"
        assert obs.reward_components == {"tests": 1.0} and not obs.truncated
        state = env.state()
        assert (state.step_count, state.done) == (len(calls), True)
        after = env.step({"name": "bash", "arguments": {"command": "ls"}}).observation
        assert after.error == "episode_over" and after.done


def test_the_empty_patch_scores_0_and_a_session_resets_again(server):
    with server.client() as env:
        env.reset(task_id=TASK)
        result = env.step('<tool_call>{"name": "submit", "arguments": {}}</tool_call>')  # model text works too
        assert result.done and result.reward == 0.0 and result.observation.eval_status == "unresolved"
        first = env.state().episode_id
        assert not env.reset(task_id=TASK).done and env.state().episode_id != first


def test_a_bad_action_is_the_envs_error_observation_and_the_session_goes_on(server):
    with server.client() as env:
        env.reset(task_id=TASK)
        bad = [("not json at all", "parse_error"), ({"name": "rm_rf", "arguments": {}}, "unknown_tool"),
               ({"name": "view", "arguments": {"path": "../../etc/passwd"}}, None),
               (adapter.RepoAction(), "parse_error")]
        for action, kind in bad:
            obs = env.step(action).observation
            assert obs.text.startswith("error (") and not obs.done and obs.error
            assert kind is None or obs.error == kind, (action, obs.error)
        obs = env.step({"name": "bash", "arguments": {"command": "echo still-here"}}).observation
        assert obs.error is None and obs.exit_code == 0 and "still-here" in obs.text
        assert env.state().step_count == len(bad) + 1


def test_two_concurrent_sessions_do_not_see_each_others_files(server):
    # A slot frees when the server has closed the last test's session, just after its client left.
    wait_for(lambda: not server.sessions, 30, "the earlier sessions to close")
    with server.client() as one, server.client() as two:
        ready = []
        resets = [threading.Thread(target=lambda e=e: ready.append(e.reset(task_id=TASK))) for e in (one, two)]
        for thread in resets:
            thread.start()
        for thread in resets:
            thread.join(timeout=120)
        assert len(ready) == 2 and len(server.sessions) == 2
        made = one.step({"name": "create", "arguments": {"path": "only_in_one.txt", "content": "secret-one\n"}})
        assert made.observation.error is None, made.observation.text
        assert "secret-one" in one.step({"name": "view", "arguments": {"path": "only_in_one.txt"}}).observation.text
        assert "only_in_one.txt" in one.step({"name": "bash", "arguments": {"command": "ls -A"}}).observation.text
        listed = two.step({"name": "bash", "arguments": {"command": "ls -A"}}).observation
        assert listed.exit_code == 0 and "README" in listed.text.upper() and "only_in_one" not in listed.text
        read = two.step({"name": "bash", "arguments": {"command": "cat only_in_one.txt"}}).observation
        assert read.exit_code != 0 and "secret-one" not in read.text
        assert two.step({"name": "view", "arguments": {"path": "only_in_one.txt"}}).observation.error
        assert one.state().episode_id != two.state().episode_id


def test_malformed_requests_get_4xx_or_an_error_reply_and_the_server_goes_on(server):
    for method, path, body in (("POST", "/reset", b"{not json"), ("POST", "/step", b'{"action": 5}'),
                               ("GET", "/state", None)):
        response = httpx.request(method, server.url + path, content=body)
        assert response.status_code == 400 and "/ws" in response.json()["detail"], (path, response.text)
    assert httpx.post(server.url + "/mcp", content=b"\x00\xff").status_code < 500
    assert httpx.get(server.url + "/nowhere").status_code == 404
    assert httpx.get(server.url + "/metadata").json()["name"] == "repogym"
    schema = httpx.get(server.url + "/schema").json()
    assert {"name", "arguments", "text"} <= set(schema["action"]["properties"])

    ws_url = server.url.replace("http://", "ws://") + "/ws"
    with ws_connect(ws_url) as socket:
        def send(message) -> dict:
            socket.send(message if isinstance(message, str) else json.dumps(message))
            return json.loads(socket.recv(timeout=60))

        for message, code in (("{oops", "INVALID_JSON"), ({"type": "dance"}, "UNKNOWN_TYPE"),
                              ({"type": "step", "data": {"name": 5}}, "VALIDATION_ERROR"),
                              ({"type": "reset", "data": {"task_id": "no-such-task"}}, "EXECUTION_ERROR"),
                              ({"type": "reset", "data": {"colour": "red"}}, "EXECUTION_ERROR")):
            reply = send(message)
            assert reply["type"] == "error" and reply["data"]["code"] == code, (message, reply)
            assert reply["data"]["message"]
        reply = send({"type": "step", "data": {"name": "bash", "arguments": {"command": "ls"}}})
        assert reply["data"]["observation"]["error"] == "episode_over"  # no episode yet: an observation
        reply = send({"type": "reset", "data": {"task_id": TASK}})
        assert reply["type"] == "observation" and reply["data"]["observation"]["task_id"] == TASK
        reply = send({"type": "step", "data": {"text": "{}", "name": "bash"}})  # ambiguous: an observation
        assert reply["data"]["observation"]["error"] == "parse_error" and not reply["data"]["done"]
        reply = send({"type": "state"})
        assert reply["type"] == "state" and reply["data"]["task_id"] == TASK
    assert httpx.get(server.url + "/health").json()["status"] == "healthy"


def test_a_bug_of_ours_is_an_error_reply_that_says_so_and_a_caught_one_ends_the_episode(server, monkeypatch):
    from repogym.envs.core import bugs
    from repogym.envs.repo_env import RepoTaskEnv

    real_step = RepoTaskEnv.step

    def buggy(self, action):
        command = json.dumps(action)
        if "raise-a-bug" in command:  # a bug of ours escaping the env
            raise KeyError("raise-a-bug")
        if "caught-bug" in command:  # a bug the env caught in a tool and reported in info
            return ("error (internal_error): the tool failed unexpectedly (KeyError: 'x')", 0.0, False, False,
                    {"task_id": TASK, "turn": 1, "error": "internal_error",
                     "internal_error": {"where": "env.step", "message": "KeyError: 'x'"}})
        return real_step(self, action)

    monkeypatch.setattr(RepoTaskEnv, "step", buggy)
    monkeypatch.setenv(bugs.STRICT_ENV, "0")  # as in production: reported and answered (strict mode raises)
    wait_for(lambda: len(server.sessions) < 2, 30, "a free session slot")
    with ws_connect(server.ws_url) as socket:
        def send(message) -> dict:
            socket.send(json.dumps(message))
            return json.loads(socket.recv(timeout=120))

        def bash(command: str) -> dict:
            return send({"type": "step", "data": {"name": "bash", "arguments": {"command": command}}})

        assert send({"type": "reset", "data": {"task_id": TASK}})["type"] == "observation"
        reply = bash("echo raise-a-bug")
        assert reply["type"] == "error" and reply["data"]["code"] == "EXECUTION_ERROR"
        assert "internal error (a bug of repogym's" in reply["data"]["message"]
        assert "integrations.openenv.step" in reply["data"]["message"] and "raise-a-bug" in reply["data"]["message"]
        reply = bash("echo still-here")  # the session goes on
        assert reply["type"] == "observation" and "still-here" in reply["data"]["observation"]["text"]
        reply = bash("echo caught-bug")
        observation = reply["data"]["observation"]
        assert reply["data"]["done"] and reply["data"]["reward"] is None
        assert observation["eval_status"] == "internal_error" and observation["info"]["exclude"] is True
        assert bash("ls")["data"]["observation"]["error"] == "episode_over"
    assert bugs.bug_counts().get("integrations.openenv.step: KeyError")


def test_http_mcp_cannot_take_the_sessions_of_websocket_clients(server):
    # The attack: POST /mcp openenv/session/create opened sessions outside the /ws gate that only the idle reaper
    # (600 s) closed, so two calls left every WebSocket client with a 503.
    wait_for(lambda: not server.sessions, 30, "the earlier sessions to close")
    answers = [httpx.post(server.url + "/mcp", json=rpc("openenv/session/create")) for _ in range(3)]
    answers += [httpx.post(server.url + "/mcp", json=rpc(method)) for method in ("tools/list", "tools/call")]
    mcp_socket = refused(server.url.replace("http://", "ws://") + "/mcp")
    assert not server.sessions
    with server.client() as one, server.client() as two:  # every slot is the WebSocket clients'
        wait_for(lambda: len(server.sessions) == 2, 30, "two sessions")
        with pytest.raises(ConnectionError, match="503"):  # one past the cap: refused, honestly
            server.client().connect()
        response = httpx.get(server.url + "/ws", headers=HANDSHAKE)
        assert response.status_code == 503 and "2 of 2 sessions" in response.json()["detail"]
        assert one.state().done and two.state().done  # the admitted sessions work
    for answer in answers:
        assert answer.status_code == 400 and "/ws" in answer.json()["detail"], answer.text
    assert mcp_socket[0] == 400 and "/ws" in mcp_socket[1]


def test_a_foreign_origin_is_refused_and_the_servers_own_admitted(server):
    port = urlsplit(server.url).port
    wait_for(lambda: not server.sessions, 30, "the earlier sessions to close")
    # A web page elsewhere; one whose name was rebound to 127.0.0.1 (same port, foreign host); another local port;
    # a sandboxed frame or file page ("null").
    for origin in ("https://evil.example", f"http://evil.example:{port}", f"http://localhost:{port + 1}", "null"):
        status, body = refused(server.ws_url, origin=origin)
        assert status == 403 and "origin" in body.lower(), (origin, status, body)
        for method, path in (("POST", "/mcp"), ("POST", "/reset"), ("GET", "/schema"), ("GET", "/health")):
            response = httpx.request(method, server.url + path, headers={"Origin": origin}, json=rpc("tools/list"))
            assert response.status_code == 403 and origin in response.json()["detail"], (origin, path, response.text)
    assert not server.sessions
    for origin in (None, f"http://localhost:{port}", f"http://127.0.0.1:{port}"):  # no Origin: not a browser
        a_session_answers(server.ws_url, origin=origin)
        assert httpx.get(server.url + "/schema", headers={"Origin": origin} if origin else {}).status_code == 200


def test_a_token_is_required_when_set_and_accepted_when_given(monkeypatch):
    monkeypatch.delenv(adapter.TOKEN_ENV, raising=False)
    running = Server(max_sessions=4, token=TOKEN, allow_origins=["https://trainer.example"])
    try:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN},
                        {"Authorization": f"Basic {TOKEN}"}):
            response = httpx.get(running.url + "/schema", headers=headers)
            assert response.status_code == 401 and "token" in response.json()["detail"], (headers, response.text)
            assert response.headers["WWW-Authenticate"].startswith("Bearer")
            status, body = refused(running.ws_url, additional_headers=headers)
            assert status == 401 and adapter.TOKEN_ENV in body
        assert refused(running.ws_url + "?token=wrong")[0] == 401
        assert httpx.post(running.url + "/mcp", json=rpc("openenv/session/create")).status_code == 401
        with pytest.raises(ConnectionError, match="401"):  # OpenEnv's client without the token
            running.client().connect()
        assert httpx.get(running.url + "/health").json()["status"] == "healthy"  # probes carry no token
        assert not running.sessions

        bearer = {"Authorization": f"Bearer {TOKEN}"}
        assert httpx.get(running.url + "/schema", headers=bearer).status_code == 200
        assert httpx.get(running.url + "/schema", params={"token": TOKEN}).status_code == 200
        a_session_answers(running.ws_url, additional_headers=bearer)
        a_session_answers(running.ws_url + f"?token={TOKEN}")  # for clients that cannot set headers
        a_session_answers(running.ws_url + f"?token={TOKEN}", origin="https://trainer.example")  # --allow-origin
        assert refused(running.ws_url + f"?token={TOKEN}", origin="https://evil.example")[0] == 403
        with running.client(token=TOKEN) as env:
            env.reset(task_id=TASK)
            obs = env.step({"name": "bash", "arguments": {"command": "echo admitted"}}).observation
            assert obs.exit_code == 0 and "admitted" in obs.text
        monkeypatch.setenv(adapter.TOKEN_ENV, TOKEN)  # the client reads the same variable as the server
        with running.client() as env:
            assert env.state().done
    finally:
        running.stop()


def test_capacity_idle_reaping_and_shutdown():
    running = Server(max_sessions=1, idle_timeout_s=1.0)
    try:
        first = running.client()
        first.connect()
        first.reset(task_id=TASK)
        (env,) = running.sessions
        sandbox = env.env._sandbox._proc
        with pytest.raises(ConnectionError, match="503"):  # refused at the handshake, not a hang
            running.client().connect()
        response = httpx.get(running.url + "/ws", headers=HANDSHAKE)
        assert response.status_code == 503 and "capacity" in response.json()["detail"]

        wait_for(lambda: not running.sessions, 20, "the idle session to be reaped")  # reaper wakes every 5 s
        assert sandbox.poll() is not None and env.env._sandbox is None  # the sandbox is gone
        obs = first.step({"name": "bash", "arguments": {"command": "ls"}}).observation
        assert obs.error == "session_closed" and obs.done
        first.close()

        second = running.client()
        second.connect()  # the slot is free again
        second.reset(task_id=TASK)
        (env,) = running.sessions
        sandbox = env.env._sandbox._proc
        running.stop()  # with the session still open
        assert sandbox.poll() is not None and not running.sessions
        second.close()
    finally:
        if running.thread.is_alive():
            running.stop()


def test_build_app_checks_its_arguments():
    for bad in ({"max_sessions": 0}, {"idle_timeout_s": -1}, {"sandbox": "vm"}, {"token": ""},
                {"allow_origins": ["evil.example"]}, {"allow_origins": ["https://ui.example/app"]},
                {"allow_origins": "https://ui.example"}):
        with pytest.raises(ConfigError):
            adapter.OpenEnvServerConfig(**bad)
    with pytest.raises(ConfigError, match="suite"):
        adapter.build_app(adapter.OpenEnvServerConfig(suite="no-such-suite", sandbox="local"))


def test_the_serve_command_line(capsys):
    parser = build_parser()
    args = parser.parse_args(["serve"])
    assert (args.host, args.port, args.suite, args.sandbox, args.max_sessions, args.idle_timeout_s, args.token,
            args.allow_origin) == ("127.0.0.1", 8000, "builtin", None, 4, 600.0, None, [])
    args = parser.parse_args(["serve", "--host", "0.0.0.0", "--port", "9001", "--suite", "s", "--sandbox", "local",
                              "--max-sessions", "3", "--idle-timeout-s", "30", "--max-turns", "5",
                              "--reward", "process", "--token", "t", "--allow-origin", "https://a.example",
                              "--allow-origin", "http://b.example:81"])
    assert (args.host, args.port, args.suite, args.sandbox, args.max_sessions, args.idle_timeout_s,
            args.max_turns, args.reward, args.token, args.allow_origin) == (
        "0.0.0.0", 9001, "s", "local", 3, 30.0, 5, "process", "t", ["https://a.example", "http://b.example:81"])
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args(["serve", "--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    for option in ("--host", "--port", "--suite", "--sandbox", "--max-sessions", "--idle-timeout-s", "--token",
                   "--allow-origin", "REPOGYM_SERVE_TOKEN", "Origin"):
        assert option in text
    with pytest.raises(SystemExit):
        parser.parse_args(["serve", "--sandbox", "vm"])


def test_repogym_serve_runs_an_episode_and_stops_on_ctrl_c():
    require_backend("local")
    proc = subprocess.Popen([sys.executable, "-m", "repogym.cli", "serve", "--port", "0", "--sandbox", "local",
                             "--max-sessions", "1", "--reward", "process"], cwd=ROOT, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1", adapter.TOKEN_ENV: TOKEN})
    try:
        lines = []
        while not (match := re.search(r"running on (http://\S+)", lines[-1] if lines else "")):
            line = proc.stderr.readline()
            assert line, "repogym serve exited early:\n" + "".join(lines)
            lines.append(line)
        url = match.group(1)
        banner = "".join(lines)
        assert "token" in banner and "Authorization: Bearer" in banner and TOKEN not in banner  # how, not what
        assert httpx.get(url + "/schema").status_code == 401
        with adapter.RepoGymClient(base_url=url, token=TOKEN).sync() as env:
            env.reset(task_id=TASK)
            result = env.step({"name": "submit", "arguments": {}})
            components = result.observation.reward_components
            assert result.done and set(components) == {"tests", "dependents_checked", "format"} and components["tests"] == 0.0
        a_session_answers(url.replace("http://", "ws://") + f"/ws?token={TOKEN}")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
        log = proc.stderr.read()
        assert "Traceback" not in log and "WebSocket /ws" in log and TOKEN not in log  # cut from the access log
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
