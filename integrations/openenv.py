"""repogym over Meta's OpenEnv (``openenv-core`` 0.3.0): an ``Environment`` adapter, its client, and the app.

OpenEnv 0.3.0 keeps an episode in a WebSocket session: its ``HTTPEnvServer`` gives each connection to ``/ws``
its own environment from a factory, runs that environment's calls on a thread of its own, caps the number of
sessions (``ConcurrencyConfig``), reaps idle ones and closes a session's environment when the connection ends.
This module supplies what is repogym's: :class:`RepoGymEnvironment` (one
:class:`repogym.envs.repo_env.RepoTaskEnv`, hence one sandbox, per session), its types :class:`RepoAction`,
:class:`RepoObservation`, :class:`RepoState`, and :class:`RepoGymClient`, an OpenEnv ``EnvClient`` for them.
:func:`build_app` registers OpenEnv's routes on a FastAPI app (as ``create_fastapi_app`` does, keeping the
``HTTPEnvServer`` to read its session count) and adds one ASGI middleware and one shutdown hook. The middleware
decides who comes in, in this order, each refusal an HTTP status with a JSON ``detail`` message:

- a request or handshake with a foreign ``Origin`` header gets 403: a web page in the operator's browser must
  not drive sandboxes. Admitted: no ``Origin`` (not a browser), the server's own origin (its host, or
  ``localhost`` / ``127.0.0.1`` / ``[::1]``, on its port), and the ``allow_origins`` of the config;
- with a ``token`` set, a request or handshake without it gets 401 (``/health`` excepted, for probes). The token
  comes as ``Authorization: Bearer <token>`` or, for clients that cannot set headers, ``?token=<token>``, which
  is cut from the query string before the log or OpenEnv sees it;
- ``/mcp`` (HTTP and WebSocket) gets 400 with a message pointing at ``/ws``: a repogym environment has no MCP
  tools, and OpenEnv's ``openenv/session/create`` there would open sessions nobody closes before the reaper;
- the stateless HTTP ``/reset``, ``/step`` and ``/state`` get 400 with a message pointing at ``/ws``: OpenEnv
  serves each with a fresh environment closed after the request, so nothing carries from one to the next, and
  each reset would build a sandbox outside the session cap;
- past ``max_sessions`` (OpenEnv's own count of sessions, the one its ``_create_session`` checks), a new
  ``/ws`` handshake gets 503 (OpenEnv itself would accept the socket and answer its first message with a
  ``CAPACITY_REACHED`` error; that in-band check stays, for two handshakes that race).

On shutdown every environment still open is closed (uvicorn first closes the sockets, which closes their
sessions; the hook catches what a cut-short shutdown leaves).

Guaranteed: ``/ws`` is the only route that opens a session, so ``max_sessions`` bounds the sandboxes; sessions
never share a sandbox; an action is the tool call a ``RepoTaskEnv`` takes (text or ``{"name", "arguments"}``)
and a bad one is the env's ``error (<kind>): ...`` observation; a message the server cannot read is an error
reply on the same socket (``INVALID_JSON``, ``VALIDATION_ERROR``), and the session goes on; a refusal leaves
the server serving. A reset or step that fails is OpenEnv's ``EXECUTION_ERROR`` reply with a message, and the
session goes on: a bad reset option or task id names what was expected, an infrastructure failure where it
happened, and a bug of repogym's says it is one (``[integrations.openenv.step] internal error ...``; reported
through :func:`repogym.envs.core.bugs.report_bug`). An episode that ends on an infrastructure failure, or on a
bug of ours the env caught (:mod:`repogym.integrations.outcomes`), is ``done`` with ``eval_status``
``infra_error`` or ``internal_error``, ``reward`` null (NaN) and ``info.exclude`` set. Not guaranteed: the token is a shared secret sent in clear over ``http://`` (put TLS in
front of a server others can reach); the ``Host`` header is not checked (the routes a browser can reach without
an ``Origin`` header, same-origin GETs, only read the schema and metadata); reaping is OpenEnv's: a session
idle past ``idle_timeout_s`` is closed at the reaper's next pass (it wakes every ``max(idle_timeout_s / 4, 5)``
s), and a step still running counts as idle, so keep the timeout above the longest step (``run_tests``,
grading). A reaped session's socket stays open and answers ``error (session_closed)``; ``timeout_s`` of a step
request is ignored (the env's own command timeouts apply). openenv-core is imported lazily: without it,
importing this module works and using it raises a :class:`repogym.envs.core.errors.ConfigError` naming
``pip install "repogym[integrations]"``.
"""

from __future__ import annotations

import functools
import hmac
import json
import logging
import math
import os
import threading
import uuid
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from repogym.envs.core.bugs import report_bug
from repogym.envs.core.errors import ConfigError, InfraError, InternalError, RepogymError
from repogym.envs.repo_env import EnvConfig
from repogym.integrations.outcomes import ended_by_bug, internal_error_of

INSTALL_HINT = 'pip install "repogym[integrations]"'
SESSION_PATH = "/ws"
STATELESS_PATHS = ("/reset", "/step", "/state")
MCP_PATH = "/mcp"
OPEN_PATHS = ("/health",)  # served without the token: liveness probes cannot carry one, and it tells nothing
TOKEN_ENV = "REPOGYM_SERVE_TOKEN"  # read by `repogym serve` and by RepoGymClient
TOKEN_QUERY = "token"  # the query parameter for clients that cannot set an Authorization header
LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
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
    token: str | None = None
    """A shared secret every request and handshake must carry (``Authorization: Bearer <token>`` or
    ``?token=<token>``), ``/health`` excepted; ``None``: none is asked for."""
    allow_origins: tuple[str, ...] = ()
    """Browser origins (``scheme://host[:port]``) admitted besides the server's own; any other ``Origin`` is
    refused with HTTP 403."""

    def __post_init__(self):
        if not isinstance(self.max_sessions, int) or self.max_sessions < 1:
            raise ConfigError(f"max_sessions must be an integer >= 1, got {self.max_sessions!r}")
        if self.idle_timeout_s is not None and not self.idle_timeout_s > 0:
            raise ConfigError(f"idle_timeout_s must be > 0 or None, got {self.idle_timeout_s!r}")
        if self.sandbox not in (None, "local", "docker"):
            raise ConfigError(f"sandbox must be 'local', 'docker' or None, got {self.sandbox!r}")
        if self.token is not None and (not isinstance(self.token, str) or not self.token.strip()):
            raise ConfigError(f"token must be a non-empty string or None, got {self.token!r}")
        if isinstance(self.allow_origins, str):  # a lone string would be read as its characters
            raise ConfigError(f"allow_origins must be a list of origins, got the string {self.allow_origins!r}")
        self.allow_origins = tuple(self.allow_origins)
        for origin in self.allow_origins:
            if _origin_key(origin) is None:
                raise ConfigError(f"allow_origins: expected an origin like https://host or http://host:port, "
                                  f"got {origin!r}")


def _origin_key(origin: str) -> tuple[str, str, int] | None:
    """``(scheme, host, port)`` of an http(s) origin ``scheme://host[:port]``; None when ``origin`` is not one."""
    try:
        parts = urlsplit(origin.strip())
        port = parts.port
    except (ValueError, AttributeError):
        return None
    if (parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/") or parts.query
            or parts.fragment or parts.username is not None):
        return None
    return parts.scheme, parts.hostname, port or (443 if parts.scheme == "https" else 80)


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
        return vars(_types())[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _reported(where: str, exc: Exception) -> InternalError:
    """``exc``, a bug of ours at ``where``, reported (:func:`report_bug`: raised as is in strict mode) and turned
    into the error OpenEnv answers the client with, saying it is repogym's bug, not the client's mistake."""
    error = report_bug(where, exc)
    return InternalError(where, f"internal error (a bug of repogym's, logged on the server): {error.message}")


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
    """The environments a server has open (thread-safe): what shutdown closes. Not the session count: OpenEnv
    also builds a short-lived environment per ``/metadata`` request, and the gate counts OpenEnv's sessions."""

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
            try:
                text, info = self.env.reset(seed=seed, options=None if task_id is None else {"task_id": task_id})
            except RepogymError:
                raise  # the client's bad task id, or the infrastructure: OpenEnv answers it as an error reply
            except Exception as exc:  # a bug of ours: reported, answered as one; the server and the session go on
                raise _reported("integrations.openenv.reset", exc) from exc
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
            try:
                text, reward, terminated, truncated, info = self.env.step(action.to_env_action())
            except RepogymError:
                raise  # a failure repogym raises on purpose (the infrastructure's): OpenEnv's error reply
            except Exception as exc:  # a bug of ours: reported, answered as one; the server and the session go on
                raise _reported("integrations.openenv.step", exc) from exc
            bug = internal_error_of(info)
            if bug is not None:  # a bug of ours the env caught ends the episode, excluded (as run_episode does)
                info, reward, truncated = ended_by_bug(info, bug), float("nan"), not terminated
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
        a blocking client; raise ``message_timeout_s`` (60 s) for steps that run longer. ``token`` (default:
        ``$REPOGYM_SERVE_TOKEN``) is sent as ``Authorization: Bearer`` to a server that asks for one."""

        def __init__(self, base_url: str, *args: Any, token: str | None = None, **kwargs: Any):
            super().__init__(base_url, *args, **kwargs)
            self._token = token if token is not None else (os.environ.get(TOKEN_ENV) or None)

        async def connect(self) -> RepoGymClient:
            """Open the session's WebSocket, with the token when there is one."""
            if self._ws is not None or not self._token:
                return await super().connect()
            # OpenEnv's connect cannot send a header, and a token in the URL would show in its error messages.
            # This is its connect plus the header; a local server is reached without a proxy, as there.
            from websockets.asyncio.client import connect as ws_connect
            local = urlsplit(self._ws_url).hostname in LOOPBACK_HOSTS
            from websockets.exceptions import WebSocketException
            try:
                self._ws = await ws_connect(self._ws_url, open_timeout=self._connect_timeout,
                                            max_size=self._max_message_size, proxy=None if local else True,
                                            additional_headers={"Authorization": f"Bearer {self._token}"})
            except (OSError, WebSocketException) as exc:  # the network, or the server refusing the handshake
                raise ConnectionError(f"Failed to connect to {self._ws_url}: {exc}") from exc
            return self

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
    """ASGI middleware in front of OpenEnv's app: refuse a foreign ``Origin`` (403), a missing token (401),
    ``/mcp`` and the stateless episode routes (400), and a ``/ws`` handshake past capacity (503), each with a
    message; everything else goes to OpenEnv's app."""

    def __init__(self, app: Any, server: Any, token: str | None, allow_origins: tuple[str, ...]):
        self.app, self.server, self.token = app, server, token
        self.allowed = {_origin_key(origin) for origin in allow_origins}

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        from starlette.websockets import WebSocketDisconnect

        if scope["type"] not in ("http", "websocket"):  # lifespan: startup and shutdown
            await self.app(scope, receive, send)
            return
        refusal = self._refusal(scope)
        if refusal is not None:
            await _refuse(scope, receive, send, *refusal)
            return
        if scope["type"] != "websocket":
            await self.app(scope, receive, send)
            return
        try:
            await self.app(scope, receive, send)
        except WebSocketDisconnect as exc:
            # OpenEnv 0.3.0 closes the socket after the session is gone and expects a RuntimeError when the client
            # has already left; Starlette 1.x raises WebSocketDisconnect there instead. The session was cleaned
            # up before that close, so this is the client's goodbye, not a server error worth a traceback.
            log.debug("session socket %s: the client had left before the server closed it (code %s)",
                      scope.get("path", ""), exc.code)

    def _refusal(self, scope: dict) -> tuple[int, str, dict[str, str]] | None:
        """``(status, message, headers)`` to refuse ``scope`` with, or None to let it through."""
        from starlette.datastructures import Headers

        headers = Headers(scope=scope)
        given = _take_query_token(scope)  # first, so that even a refused request's token is cut from the log
        path = scope.get("path", "")
        origin = headers.get("origin")
        if origin is not None and not self._origin_allowed(origin, scope):
            return 403, (f"Origin {origin!r} is not allowed: this server admits requests without an Origin header "
                         "(non-browser clients) and from its own origin (http://localhost:PORT, "
                         "http://127.0.0.1:PORT); start it with --allow-origin to admit another"), {}
        if self.token is not None and path not in OPEN_PATHS:
            scheme, _, credentials = headers.get("authorization", "").partition(" ")
            if scheme.lower() == "bearer" and credentials.strip():
                given = credentials.strip()
            if given is None or not hmac.compare_digest(given.encode(), self.token.encode()):
                return 401, (f"{'a wrong' if given else 'no'} token: this server needs its token, sent as "
                             f"'Authorization: Bearer <token>' or as ?{TOKEN_QUERY}=<token> (RepoGymClient sends "
                             f"token=... or ${TOKEN_ENV})"), {"WWW-Authenticate": 'Bearer realm="repogym serve"'}
        if path == MCP_PATH:
            return 400, ("repogym serves no MCP: its tools are the actions of a WebSocket session at "
                         f"{SESSION_PATH} (openenv's EnvClient: repogym.integrations.openenv.RepoGymClient)"), {}
        if scope["type"] == "http" and path in STATELESS_PATHS:
            return 400, (f"HTTP {path} is stateless in OpenEnv (a fresh environment per request, nothing kept for "
                         f"the next); a repogym episode lives in a sandbox, so open a WebSocket session at "
                         f"{SESSION_PATH} (openenv's EnvClient: repogym.integrations.openenv.RepoGymClient)"), {}
        if scope["type"] == "websocket" and path == SESSION_PATH:
            open_now, cap = self.server.active_sessions, self.server.max_concurrent_envs
            if open_now >= cap:
                return 503, (f"the server is at capacity: {open_now} of {cap} sessions are open; retry when one "
                             "closes (a session closes when its client disconnects or it idles out)"), {
                    "Retry-After": "5"}
        return None

    def _origin_allowed(self, origin: str, scope: dict) -> bool:
        key = _origin_key(origin)
        if key is None:  # "null" (a sandboxed frame, a file), or not an origin at all
            return False
        if key in self.allowed:
            return True
        # The server's own origin: a page it served (its /docs). Its host as the client reached it, or a loopback
        # name, on its port; another port on this machine is another site, and a foreign name on this port is
        # DNS rebinding.
        server = scope.get("server")
        if not server or key[2] != server[1]:
            return False
        return key[1] in LOOPBACK_HOSTS or key[1] == str(server[0]).lower()


def _take_query_token(scope: dict) -> str | None:
    """The ``?token=`` of ``scope``, cut from its query string (in place: uvicorn logs from this scope)."""
    raw = scope.get("query_string") or b""
    if TOKEN_QUERY.encode() not in raw:
        return None
    pairs = parse_qsl(raw.decode("latin-1"), keep_blank_values=True)
    tokens = [value for name, value in pairs if name == TOKEN_QUERY]
    if not tokens:
        return None
    scope["query_string"] = urlencode([(name, value) for name, value in pairs if name != TOKEN_QUERY]).encode()
    return tokens[-1] or None


async def _refuse(scope: dict, receive: Any, send: Any, status: int, message: str, headers: dict[str, str]) -> None:
    """Answer ``scope`` with HTTP ``status`` and ``{"detail": message}`` (a WebSocket handshake too)."""
    from starlette.responses import JSONResponse
    from starlette.websockets import WebSocket

    response = JSONResponse({"detail": message}, status_code=status, headers=headers)
    if scope["type"] == "http":
        await response(scope, receive, send)
        return
    socket = WebSocket(scope, receive, send)
    if "websocket.http.response" in (scope.get("extensions") or {}):
        await socket.send_denial_response(response)
    else:  # a server without the denial extension: close before accepting (the client sees HTTP 403)
        await socket.close(code=1013 if status == 503 else 1008, reason=message[:120])


def build_app(config: OpenEnvServerConfig | None = None) -> Any:
    """The FastAPI app of ``repogym serve``: OpenEnv's routes over :class:`RepoGymEnvironment`, plus the gate
    (origin, token, routes, capacity) and the shutdown hook. The suite is read and the sandbox backend checked
    here, so a bad ``--suite`` or a missing backend fails at start, not at the first session."""
    config = config or OpenEnvServerConfig()
    types = _types()
    from fastapi import FastAPI
    from openenv.core.env_server import ConcurrencyConfig, HTTPEnvServer

    from repogym.envs.sandbox import backend_unavailable
    from repogym.envs.tasks.suites import load_suite

    tasks = load_suite(config.suite)
    if not tasks:
        raise ConfigError(f"suite {config.suite!r} has no tasks")
    if config.sandbox is not None and (why := backend_unavailable(config.sandbox)) is not None:
        raise ConfigError(f"the {config.sandbox} sandbox cannot run here: {why}")
    book = _SessionBook()
    factory = functools.partial(types.RepoGymEnvironment, config=config, tasks=tasks, book=book)
    # What create_fastapi_app does, keeping the HTTPEnvServer: the gate reads its session count.
    server = HTTPEnvServer(factory, types.RepoAction, types.RepoObservation, concurrency_config=ConcurrencyConfig(
        max_concurrent_envs=config.max_sessions, session_timeout=config.idle_timeout_s))
    app = FastAPI(title="repogym (OpenEnv server)", description="repogym environments over OpenEnv's protocol: one "
                  f"WebSocket session at {SESSION_PATH} per episode stream; see docs/integrations/openenv.md.")
    server.register_routes(app)
    app.add_middleware(_Gate, server=server, token=config.token, allow_origins=config.allow_origins)

    async def close_open_sessions() -> None:
        left = book.live()
        bugs: list[Exception] = []
        for env in left:
            try:
                env.close()
            except (InfraError, OSError) as exc:  # the sandbox backend (a Docker daemon, a process) would not let go
                log.warning("closing a session at shutdown failed: %s: %s", type(exc).__name__, exc)
            except Exception as exc:  # a bug of ours: reported once every other session is closed
                bugs.append(exc)
        if left:
            log.info("closed %d session(s) still open at shutdown", len(left))
        for exc in bugs:
            report_bug("integrations.openenv.shutdown", exc)

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
