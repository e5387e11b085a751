"""repogym over Meta's OpenEnv (``openenv-core`` 0.3.0): an ``Environment`` adapter, its client, and the app.

OpenEnv 0.3.0 keeps an episode in a WebSocket session: its ``HTTPEnvServer`` (built by
``create_fastapi_app``) gives each connection to ``/ws`` its own environment from a factory, runs that
environment's calls on a thread of its own, caps the number of sessions (``ConcurrencyConfig``), reaps idle
ones and closes a session's environment when the connection ends. This module supplies what is
repogym's: :class:`RepoGymEnvironment` (one :class:`repogym.envs.repo_env.RepoTaskEnv`, hence one sandbox,
per session), its types :class:`RepoAction`, :class:`RepoObservation`, :class:`RepoState`, and
:class:`RepoGymClient`, an OpenEnv ``EnvClient`` for them. :func:`build_app` adds the least on top of
OpenEnv's app, as one ASGI middleware and one shutdown hook:

- past ``max_sessions``, a new ``/ws`` connection is refused at the handshake with HTTP 503 and a message
  (OpenEnv itself would accept the socket and answer its first message with a ``CAPACITY_REACHED`` error; that
  in-band check stays, for two handshakes that race);
- the stateless HTTP ``/reset``, ``/step`` and ``/state`` get HTTP 400 with a message pointing at ``/ws``:
  OpenEnv serves each with a fresh environment closed after the request, so nothing carries from one to the
  next, and each reset would build a sandbox outside the session cap;
- on shutdown every environment still open is closed (uvicorn first closes the sockets, which closes their
  sessions; the hook catches what a cut-short shutdown leaves).

Guaranteed: sessions never share a sandbox; an action is the tool call a ``RepoTaskEnv`` takes (text or
``{"name", "arguments"}``) and a bad one is the env's ``error (<kind>): ...`` observation; a message the
server cannot read is an error reply on the same socket (``INVALID_JSON``, ``VALIDATION_ERROR``), and the
session goes on. Not guaranteed: reaping is OpenEnv's: a session idle past ``idle_timeout_s`` is closed at
the reaper's next pass (it wakes every ``max(idle_timeout_s / 4, 5)`` s), and a step still running counts
as idle, so keep the timeout above the longest step (``run_tests``, grading). A reaped session's socket
stays open and answers ``error (session_closed)``; ``timeout_s`` of a step request is ignored (the env's own
command timeouts apply). openenv-core is imported lazily: without it, importing this module works and
using it raises a :class:`repogym.envs.errors.ConfigError` naming ``pip install "repogym[integrations]"``.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import threading
import uuid
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from repogym.envs.errors import ConfigError
from repogym.envs.repo_env import EnvConfig

INSTALL_HINT = 'pip install "repogym[integrations]"'
SESSION_PATH = "/ws"
STATELESS_PATHS = ("/reset", "/step", "/state")
SHUTDOWN_GRACE_S = 10.0  # seconds uvicorn waits for open sockets before cutting them (then the hook closes envs)
_TYPES = ("RepoAction", "RepoObservation", "RepoState", "RepoGymEnvironment", "RepoGymClient")
log = logging.getLogger(__name__)


@dataclass
class OpenEnvServerConfig:
    """Settings of the OpenEnv server (``repogym serve``)."""

    suite: str = "builtin"
    """The task suite each session draws from (``reset(task_id=...)`` picks one)."""
    sandbox: str | None = None
    """``local`` or ``docker``; ``None`` picks docker when a daemon answers, else local."""
    max_sessions: int = 4
    """Sessions (each one env and one sandbox) open at once; one more is refused with HTTP 503."""
    idle_timeout_s: float | None = 600.0
    """Seconds without a reset or step after which a session is closed (``None``: never)."""
    env: EnvConfig = field(default_factory=EnvConfig)
    """The settings of every session's :class:`repogym.envs.repo_env.RepoTaskEnv` (turns, reward, limits)."""

    def __post_init__(self):
        if not isinstance(self.max_sessions, int) or self.max_sessions < 1:
            raise ConfigError(f"max_sessions must be an integer >= 1, got {self.max_sessions!r}")
        if self.idle_timeout_s is not None and not self.idle_timeout_s > 0:
            raise ConfigError(f"idle_timeout_s must be > 0 or None, got {self.idle_timeout_s!r}")
        if self.sandbox not in (None, "local", "docker"):
            raise ConfigError(f"sandbox must be 'local', 'docker' or None, got {self.sandbox!r}")


def _require_openenv() -> None:
    try:
        import fastapi  # noqa: F401
        import openenv.core.env_server  # noqa: F401
    except ImportError as exc:
        raise ConfigError(f"the OpenEnv server needs openenv-core, which is not installed ({exc}): "
                          f"{INSTALL_HINT}") from None


def __getattr__(name: str) -> Any:
    # The OpenEnv types subclass openenv's pydantic models, so they exist only once openenv is imported.
    if name in _TYPES:
        return getattr(_types(), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _json_safe(value: Any) -> Any:
    """``value`` as plain JSON: NaN and infinities become None (JSON has neither), unknown objects their str."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (str, int, bool)):
        return value
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_json_safe(v) for v in value]
    return str(value)


class _SessionBook:
    """The environments a server has open (thread-safe): the handshake's capacity check and shutdown's list."""

    def __init__(self):
        self._lock = threading.Lock()
        self._live: set[Any] = set()

    def add(self, env: Any) -> None:
        with self._lock:
            self._live.add(env)

    def discard(self, env: Any) -> None:
        with self._lock:
            self._live.discard(env)

    def live(self) -> list[Any]:
        with self._lock:
            return list(self._live)

    def __len__(self) -> int:
        with self._lock:
            return len(self._live)


@functools.cache
def _types() -> SimpleNamespace:
    """Define the OpenEnv types (once, on first use)."""
    _require_openenv()
    from openenv.core.client_types import StepResult
    from openenv.core.env_client import EnvClient
    from openenv.core.env_server import Action, Environment, Observation, State
    from openenv.core.env_server.types import EnvironmentMetadata
    from pydantic import Field

    from repogym.envs.repo_env import RepoTaskEnv

    class RepoAction(Action):
        """One tool call: ``name`` and ``arguments`` (what a ``RepoTaskEnv`` takes as JSON), or ``text`` (model
        text holding a tool call, ``<tool_call>{...}</tool_call>`` or JSON). An empty action is the env's
        ``parse_error`` observation."""

        name: str | None = Field(default=None, description="the tool's name (bash, view, edit, ..., submit)")
        arguments: dict[str, Any] | str | None = Field(
            default=None, description="the tool's arguments: an object, or a JSON string (OpenAI style)")
        text: str | None = Field(default=None, description="the action as model text, instead of name/arguments")

        # No validator for "text and name both given": OpenEnv 0.3.0 cannot serialize a validator's ValueError
        # into its error reply and drops the whole session instead. The adapter answers it as an observation.
        def both_forms(self) -> bool:
            """Both ``text`` and ``name``/``arguments`` were given (the action is ambiguous)."""
            return self.text is not None and (self.name is not None or self.arguments is not None)

        def to_env_action(self) -> str | dict[str, Any]:
            """The action as ``RepoTaskEnv.step`` takes it."""
            if self.text is not None:
                return self.text
            if self.name is None and self.arguments is None:
                return ""
            return {"name": self.name, "arguments": {} if self.arguments is None else self.arguments}

    class RepoObservation(Observation):
        """What the env returned: its text, the tools, and (when ``done``) the eval status and reward
        components; ``info`` is the env's whole ``info`` as JSON (NaN as null)."""

        text: str = Field(default="", description="the observation text (the issue and tools after reset)")
        tools: list[dict[str, Any]] = Field(default_factory=list, description="the tools, as OpenAI tools JSON")
        task_id: str | None = Field(default=None, description="the task of this episode")
        turn: int = Field(default=0, description="tool calls so far in this episode")
        tool: str | None = Field(default=None, description="the tool this step called")
        error: str | None = Field(default=None, description="the error kind when the call failed (parse_error, ...)")
        exit_code: int | None = Field(default=None, description="the command's exit code, where there is one")
        truncated: bool = Field(default=False, description="the episode ended on a limit rather than a submit")
        eval_status: str | None = Field(default=None, description="how the episode was graded (resolved, ...)")
        reward_components: dict[str, float] | None = Field(
            default=None, description="the named reward components of the final reward")
        info: dict[str, Any] = Field(default_factory=dict, description="the env's info (tools left out)")

    class RepoState(State):
        """The session's episode: OpenEnv's ``episode_id`` and ``step_count``, and repogym's task."""

        task_id: str | None = Field(default=None, description="the task of the current episode")
        done: bool = Field(default=True, description="no episode is running (none started, or it ended)")
        suite: str = Field(default="builtin", description="the suite tasks are drawn from")
        sandbox: str | None = Field(default=None, description="the sandbox backend (local or docker)")

    class RepoGymEnvironment(Environment[RepoAction, RepoObservation, RepoState]):
        """One :class:`RepoTaskEnv` (one sandbox) as an OpenEnv ``Environment``; one per session."""

        SUPPORTS_CONCURRENT_SESSIONS = True  # each instance has its own env and sandbox; nothing is shared

        def __init__(self, config: OpenEnvServerConfig | None = None, tasks: list | None = None,
                     book: _SessionBook | None = None):
            super().__init__()
            self.config = config or OpenEnvServerConfig()
            self.env = RepoTaskEnv(suite=self.config.suite, sandbox=self.config.sandbox, config=self.config.env,
                                   tasks=tasks)
            self._tools = self.env.tools_schema()
            self._state = RepoState(suite=self.config.suite, sandbox=self.env.backend)
            self._close_lock = threading.Lock()
            self._closed = False
            self._book = book
            if book is not None:
                book.add(self)

        def reset(self, seed: int | None = None, episode_id: str | None = None, task_id: str | None = None,
                  **kwargs: Any) -> RepoObservation:
            """Start an episode (``task_id`` picks the task; else one is drawn, reproducibly with ``seed``)."""
            if kwargs:
                raise ConfigError(f"unknown reset option(s) {', '.join(sorted(kwargs))}: expected seed, "
                                  "episode_id, task_id")
            if self._closed:
                return self._closed_observation()
            text, info = self.env.reset(seed=seed, options=None if task_id is None else {"task_id": task_id})
            self._state = RepoState(episode_id=episode_id or uuid.uuid4().hex, step_count=0,
                                    task_id=info["task_id"], done=False, suite=self.config.suite,
                                    sandbox=self.env.backend)
            rest = {k: v for k, v in info.items() if k != "tools"}
            return RepoObservation(text=text, tools=self._tools, task_id=info["task_id"], info=_json_safe(rest),
                                   done=False, reward=None)

        def step(self, action: RepoAction, timeout_s: float | None = None, **kwargs: Any) -> RepoObservation:
            """One tool call; a bad one is the env's error observation (OpenEnv's ``timeout_s`` is ignored)."""
            if self._closed:
                return self._closed_observation()
            if self._state.done:
                return RepoObservation(
                    text="error (episode_over): no episode is running (it ended, or none was started): reset first",
                    tools=self._tools, task_id=self._state.task_id, error="episode_over", done=True)
            if action.both_forms():  # not sent to the env, so no turn is spent on it
                return RepoObservation(
                    text="error (parse_error): the action has both text and name/arguments; give one of them",
                    tools=self._tools, task_id=self._state.task_id, turn=self.env.turn, error="parse_error")
            text, reward, terminated, truncated, info = self.env.step(action.to_env_action())
            done = terminated or truncated
            self._state.step_count += 1
            self._state.done = done
            evaluation = info.get("eval") or {}
            status = evaluation.get("status")
            return RepoObservation(
                text=text, tools=self._tools, task_id=info.get("task_id"), turn=info.get("turn", 0),
                tool=info.get("tool"), error=info.get("error"), exit_code=info.get("exit_code"), truncated=truncated,
                eval_status=None if status is None else str(status),
                reward_components=_json_safe(info.get("reward_components")), info=_json_safe(info),
                done=done, reward=_json_safe(float(reward)))

        @property
        def state(self) -> RepoState:
            return self._state

        def get_metadata(self) -> EnvironmentMetadata:
            return EnvironmentMetadata(
                name="repogym", version=None,
                description=f"Coding tasks over real repositories (suite {self.config.suite!r}): one tool call per "
                            "step, graded by the task's hidden tests on submit.")

        def close(self) -> None:
            """Close the env and its sandboxes (idempotent; OpenEnv, the reaper and shutdown may all call it)."""
            with self._close_lock:
                if self._closed:
                    return
                self._closed = True
            try:
                self.env.close()
            finally:
                if self._book is not None:
                    self._book.discard(self)

        def _closed_observation(self) -> RepoObservation:
            return RepoObservation(
                text="error (session_closed): this session's environment was closed (idle past the server's "
                     "timeout, or the server is stopping); open a new connection for a new session",
                task_id=self._state.task_id, error="session_closed", done=True)

    class RepoGymClient(EnvClient[RepoAction, RepoObservation, RepoState]):
        """OpenEnv's WebSocket client for a ``repogym serve`` server. ``step`` takes a :class:`RepoAction`, a
        dict (a tool call) or text; ``reset`` takes ``task_id``, ``seed``, ``episode_id``. Use ``.sync()`` for
        a blocking client; raise ``message_timeout_s`` (60 s) for steps that run longer."""

        def _step_payload(self, action: RepoAction | dict | str) -> dict[str, Any]:
            if isinstance(action, str):
                action = RepoAction(text=action)
            elif isinstance(action, dict):  # any tool-call shape the env parses (OpenAI's included)
                action = RepoAction(text=json.dumps(action))
            return action.model_dump(exclude_none=True)

        def _parse_result(self, payload: dict[str, Any]) -> StepResult[RepoObservation]:
            observation = RepoObservation(**payload.get("observation", {}), done=payload.get("done", False),
                                          reward=payload.get("reward"))
            return StepResult(observation=observation, reward=observation.reward, done=observation.done)

        def _parse_state(self, payload: dict[str, Any]) -> RepoState:
            return RepoState(**payload)

    return SimpleNamespace(RepoAction=RepoAction, RepoObservation=RepoObservation, RepoState=RepoState,
                           RepoGymEnvironment=RepoGymEnvironment, RepoGymClient=RepoGymClient)


class _Gate:
    """ASGI middleware: refuse a session past capacity at the handshake (HTTP 503), and the stateless
    episode routes (HTTP 400), each with a message; everything else goes to OpenEnv's app."""

    def __init__(self, app: Any, book: _SessionBook, max_sessions: int):
        self.app, self.book, self.max_sessions = app, book, max_sessions

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        from starlette.responses import JSONResponse
        from starlette.websockets import WebSocket, WebSocketDisconnect

        path = scope.get("path", "")
        if scope["type"] == "websocket" and path == SESSION_PATH and len(self.book) >= self.max_sessions:
            message = (f"the server is at capacity: {len(self.book)} of {self.max_sessions} sessions are open; "
                       "retry when one closes (a session closes when its client disconnects or it idles out)")
            socket = WebSocket(scope, receive, send)
            if "websocket.http.response" in (scope.get("extensions") or {}):
                await socket.send_denial_response(JSONResponse({"detail": message}, status_code=503,
                                                               headers={"Retry-After": "5"}))
            else:  # a server without the denial extension: close before accepting (the client sees HTTP 403)
                await socket.close(code=1013, reason=message[:120])
            return
        if scope["type"] == "http" and path in STATELESS_PATHS:
            message = (f"HTTP {path} is stateless in OpenEnv (a fresh environment per request, nothing kept for "
                       f"the next); a repogym episode lives in a sandbox, so open a WebSocket session at "
                       f"{SESSION_PATH} (openenv's EnvClient: repogym.integrations.openenv.RepoGymClient)")
            await JSONResponse({"detail": message}, status_code=400)(scope, receive, send)
            return
        if scope["type"] != "websocket":
            await self.app(scope, receive, send)
            return
        try:
            await self.app(scope, receive, send)
        except WebSocketDisconnect:
            # OpenEnv 0.3.0 closes the socket after the session is gone and expects a RuntimeError when the client
            # has already left; Starlette 1.x raises WebSocketDisconnect there instead. The session was cleaned
            # up before that close, so this is the client's goodbye, not a server error worth a traceback.
            pass


def build_app(config: OpenEnvServerConfig | None = None) -> Any:
    """The FastAPI app of ``repogym serve``: OpenEnv's ``create_fastapi_app`` over :class:`RepoGymEnvironment`,
    plus the capacity gate and the shutdown hook. The suite is read and the sandbox backend checked here,
    so a bad ``--suite`` or a missing backend fails at start, not at the first session."""
    config = config or OpenEnvServerConfig()
    types = _types()
    from openenv.core.env_server import ConcurrencyConfig, create_fastapi_app

    from repogym.envs.sandbox import backend_unavailable
    from repogym.envs.tasks.suites import load_suite

    tasks = load_suite(config.suite)
    if not tasks:
        raise ConfigError(f"suite {config.suite!r} has no tasks")
    if config.sandbox is not None and (why := backend_unavailable(config.sandbox)) is not None:
        raise ConfigError(f"the {config.sandbox} sandbox cannot run here: {why}")
    book = _SessionBook()
    factory = functools.partial(types.RepoGymEnvironment, config=config, tasks=tasks, book=book)
    app = create_fastapi_app(factory, types.RepoAction, types.RepoObservation, concurrency_config=ConcurrencyConfig(
        max_concurrent_envs=config.max_sessions, session_timeout=config.idle_timeout_s))
    app.add_middleware(_Gate, book=book, max_sessions=config.max_sessions)

    async def close_open_sessions() -> None:
        left = book.live()
        for env in left:
            try:
                env.close()
            except Exception as exc:  # one env failing to close must not keep the others' sandboxes alive
                log.warning("closing a session at shutdown failed: %s: %s", type(exc).__name__, exc)
        if left:
            log.info("closed %d session(s) still open at shutdown", len(left))

    app.router.on_shutdown.append(close_open_sessions)
    app.state.repogym_sessions = book  # the open environments (tests and operators look here)
    return app


def serve(config: OpenEnvServerConfig | None = None, host: str = "127.0.0.1", port: int = 8000,
          log_level: str = "info") -> None:
    """Run the server until interrupted (Ctrl-C / SIGTERM close every session, then exit)."""
    serve_app(build_app(config), host=host, port=port, log_level=log_level)


def serve_app(app: Any, host: str = "127.0.0.1", port: int = 8000, log_level: str = "info") -> None:
    """Run an app from :func:`build_app` with uvicorn until interrupted."""
    try:
        import uvicorn
    except ImportError:
        raise ConfigError(f"the OpenEnv server needs uvicorn, which is not installed: {INSTALL_HINT}") from None
    uvicorn.run(app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=SHUTDOWN_GRACE_S)
