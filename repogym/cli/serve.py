"""``repogym serve``: repogym environments over HTTP/WebSocket with Meta's OpenEnv contract (reset, step, state).

Thin over :mod:`repogym.integrations.openenv`; needs ``pip install "repogym[integrations]"`` (openenv-core).
"""

from __future__ import annotations

import functools
import os
import sys


def add_parser(sub) -> None:
    parser = sub.add_parser("serve", help="serve repogym environments over OpenEnv's protocol (reset/step/state)",
                            description="Serve repogym environments with Meta's OpenEnv contract: each WebSocket "
                                        "session at /ws (openenv's EnvClient; repogym.integrations.openenv."
                                        "RepoGymClient) gets its own environment and sandbox; /ws is the only "
                                        "route that opens one. Sessions past --max-sessions are refused with HTTP "
                                        "503; idle ones are closed; all are closed on Ctrl-C. A browser Origin "
                                        "other than the server's own (http://localhost:PORT, http://127.0.0.1:PORT)"
                                        " is refused with HTTP 403, and with a token set (--token or "
                                        "$REPOGYM_SERVE_TOKEN) a request without it gets HTTP 401. Needs pip "
                                        "install \"repogym[integrations]\".")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default: 127.0.0.1); beyond this machine, set a token and put "
                             "TLS in front (the token travels in clear over http)")
    parser.add_argument("--port", type=int, default=8000, help="port to listen on (default: 8000; 0 picks a free one)")
    parser.add_argument("--suite", default="builtin", help="task suite sessions draw from (default: builtin)")
    parser.add_argument("--sandbox", choices=("local", "docker"), default=None,
                        help="sandbox backend (default: docker when a daemon answers, else local)")
    parser.add_argument("--max-sessions", type=int, default=4,
                        help="sessions open at once, each one sandbox (default: 4); one more gets HTTP 503")
    parser.add_argument("--idle-timeout-s", type=float, default=600.0,
                        help="close a session after this many seconds without a reset or step (default: 600; "
                             "0 never); keep it above the longest step")
    parser.add_argument("--max-turns", type=int, default=30, help="tool calls per episode (default: 30)")
    parser.add_argument("--reward", default="default",
                        help="reward preset of every episode: default (tests only), process or shaped")
    parser.add_argument("--token", default=None,
                        help="shared secret every client must send, as 'Authorization: Bearer <token>' or "
                             "ws://HOST:PORT/ws?token=<token> (RepoGymClient: token=... or $REPOGYM_SERVE_TOKEN); "
                             "/health is exempt (default: $REPOGYM_SERVE_TOKEN, else none; prefer the variable, as "
                             "a command line is visible to other users)")
    parser.add_argument("--allow-origin", action="append", default=[], metavar="ORIGIN",
                        help="a browser Origin to admit besides the server's own, as scheme://host[:port] "
                             "(repeatable); requests with any other Origin header get HTTP 403")
    parser.add_argument("--log-level", default="info", choices=("critical", "error", "warning", "info", "debug"),
                        help="server log level (default: info)")
    parser.set_defaults(func=run)


def run(args) -> int:
    """Build the app from the options, say how to reach it, and serve until interrupted."""
    from repogym.envs.repo_env import EnvConfig
    from repogym.integrations.openenv import TOKEN_ENV, OpenEnvServerConfig, build_app, serve_app

    token = args.token if args.token is not None else (os.environ.get(TOKEN_ENV) or None)
    config = OpenEnvServerConfig(suite=args.suite, sandbox=args.sandbox, max_sessions=args.max_sessions,
                                 idle_timeout_s=args.idle_timeout_s or None, token=token,
                                 allow_origins=tuple(args.allow_origin),
                                 env=EnvConfig(max_turns=args.max_turns, reward=args.reward))
    app = build_app(config)  # reads the suite and checks the sandbox backend: a bad option fails here
    say = functools.partial(print, file=sys.stderr, flush=True)
    say(f"repogym serve: suite {config.suite}, at most {config.max_sessions} session(s), idle timeout "
        f"{config.idle_timeout_s or 'none'}; sessions are WebSockets at ws://{args.host}:{args.port}/ws")
    if token is None:
        say(f"repogym serve: no token: anyone who can reach this address can open sessions; to require one, "
            f"start with {TOKEN_ENV}=<secret> in the environment (or --token)")
    else:  # how to send it, never the token itself (the terminal may be shared or logged)
        say(f"repogym serve: a token is required: clients send 'Authorization: Bearer <token>' or "
            f"ws://{args.host}:{args.port}/ws?token=<token>; RepoGymClient sends token=... or ${TOKEN_ENV}")
    say("repogym serve: browser pages are admitted only from this server's own origin"
        + (f" and {', '.join(config.allow_origins)}" if config.allow_origins else " (add one with --allow-origin)"))
    serve_app(app, host=args.host, port=args.port, log_level=args.log_level)
    return 0
