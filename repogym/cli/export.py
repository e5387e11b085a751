"""``repogym export``: trajectory files as one Hugging Face ``datasets``-loadable file (JSONL or Parquet)."""

from __future__ import annotations


def add_parser(sub) -> None:
    parser = sub.add_parser("export", help="write trajectories as a datasets-loadable JSONL or Parquet file",
                            description="Write trajectory files (bench, training or TRL rollouts) as one row per "
                                        "episode: chat messages with tool calls and results, reward, status, task "
                                        "id, and token ids with their loss mask where the agent recorded them. "
                                        "Load the result with datasets.load_dataset('json' or 'parquet', "
                                        "data_files=FILE).")
    parser.add_argument("trajectories", nargs="+", metavar="TRAJECTORIES",
                        help="trajectory JSONL files, or folders searched for *.jsonl (files there that are not "
                             "trajectories, such as metrics.jsonl, are skipped)")
    parser.add_argument("--out", required=True, metavar="FILE",
                        help="the file to write; its suffix picks the format: .jsonl or .parquet")
    parser.add_argument("--no-tokens", action="store_true",
                        help="leave out token ids, loss mask and logprobs (smaller files for chat-form data)")
    parser.set_defaults(func=run)


def run(args) -> int:
    import importlib.util
    from pathlib import Path

    from repogym.agents.export import export_trajectories
    from repogym.envs.core.errors import ConfigError

    # Checked before every trajectory is read, not when the file is written.
    if Path(args.out).is_dir():
        raise ConfigError(f"expected --out to be a file (.jsonl or .parquet), got {args.out!r}: a folder")
    if Path(args.out).suffix.lower() == ".parquet" and importlib.util.find_spec("pyarrow") is None:
        raise ConfigError(f"writing {args.out} as Parquet needs pyarrow: pip install 'repogym[datasets]' (or write "
                          f".jsonl)")
    summary = export_trajectories(args.trajectories, args.out, tokens=not args.no_tokens)
    note = f" (skipped {len(summary.skipped)} files that are not trajectories)" if summary.skipped else ""
    print(f"wrote {summary.rows} episodes to {summary.out}{note}")
    return 0
