"""``repogym serve``: repogym environments over HTTP/WebSocket with Meta's OpenEnv contract (reset, step, state).

Thin over :mod:`repogym.integrations.openenv`; needs ``pip install "repogym[integrations]"`` (openenv-core).
"""

from __future__ import annotations

import sys


def add_parser(sub) -> None:
    parser = sub.add_parser("serve", help="serve repogym environments over OpenEnv's protocol (reset/step/state)",
                            description="Serve repogym environments with Meta's OpenEnv contract: each WebSocket "
                                        "session at /ws (openenv's EnvClient; repogym.integrations.openenv."
                                        "RepoGymClient) gets its own environment and sandbox. Sessions past "
                                        "--max-sessions are refused with HTTP 503; idle ones are closed; all are "
                                        "closed on Ctrl-C. Needs pip install \"repogym[integrations]\".")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default: 127.0.0.1; the server has no authentication, so "
                             "expose it beyond this machine only behind your own)")
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
    parser.add_argument("--log-level", default="info", choices=("critical", "error", "warning", "info", "debug"),
                        help="server log level (default: info)")
    parser.set_defaults(func=run)


def run(args) -> int:
    from repogym.envs.repo_env import EnvConfig
    from repogym.integrations.openenv import OpenEnvServerConfig, build_app, serve_app

    config = OpenEnvServerConfig(suite=args.suite, sandbox=args.sandbox, max_sessions=args.max_sessions,
                                 idle_timeout_s=args.idle_timeout_s or None,
                                 env=EnvConfig(max_turns=args.max_turns, reward=args.reward))
    app = build_app(config)  # reads the suite and checks the sandbox backend: a bad option fails here
    print(f"repogym serve: suite {config.suite}, at most {config.max_sessions} session(s), idle timeout "
          f"{config.idle_timeout_s or 'none'}; sessions are WebSockets at ws://{args.host}:{args.port}/ws",
          file=sys.stderr, flush=True)
    serve_app(app, host=args.host, port=args.port, log_level=args.log_level)
    return 0
