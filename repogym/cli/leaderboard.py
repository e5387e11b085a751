"""``repogym leaderboard``: the ranked results of a results database, as Markdown and a static HTML page."""

from __future__ import annotations

import sys
from pathlib import Path

from repogym.envs.core.errors import ConfigError


def add_parser(sub) -> None:
    parser = sub.add_parser("leaderboard", help="ranked results table (Markdown, static HTML with plots)",
                            description="Rank the agents of a results database (written by repogym bench) and print "
                                        "the table as Markdown; optionally write it to a file and a static HTML page "
                                        "with plots, learning curves and one page per episode. Rates exclude "
                                        "infrastructure errors, which are counted apart.")
    parser.add_argument("--db", required=True, metavar="FILE", help="the results database (SQLite)")
    parser.add_argument("--md", metavar="OUT.md", help="also write the Markdown table to this file")
    parser.add_argument("--html", metavar="OUT.html",
                        help="write the page (table, plots, episode pages in OUT_episodes/) here")
    parser.add_argument("--suite", default=None, help="only this suite's episodes")
    parser.add_argument("--import-run", metavar="RUN_DIR",
                        help="first store a training run's RUN_DIR/metrics.jsonl (its learning curves)")
    parser.add_argument("--run-name", default=None, help="name of the imported run (default: the folder name)")
    parser.add_argument("--json", action="store_true",
                        help="print the ranking as one JSON object on stdout instead of the Markdown table, and "
                             "nothing else there (notes go to stderr; --md and --html still write their files): "
                             "{db, suite, summaries: [{agent, suite, checkpoint, episodes, tasks, resolved, "
                             "resolved_rate, ci_low, ci_high, pass_at_k, infra_errors, infra_error_rate, "
                             "internal_errors, errors: [{status, where, message, count}], ...}] best first, "
                             "best_of_n: [...]}; a rate with nothing to be over is null")
    parser.set_defaults(func=run)


def run(args) -> int:
    from repogym.bench.db import ResultsDB
    from repogym.bench.leaderboard import best_of_n_markdown, import_run, markdown, write_html
    from repogym.bench.metrics import summaries_json, summarize, summarize_best_of_n

    if args.run_name and not args.import_run:
        raise ConfigError("expected --run-name only with --import-run")
    if not args.import_run and not Path(args.db).is_file():
        raise ConfigError(f"expected --db to be a results database, got {args.db!r}: no such file")
    with ResultsDB(args.db) as db:
        if args.import_run:
            name, count = import_run(db, args.import_run, args.run_name)
            print(f"imported training run {name!r}: {count} values", file=sys.stderr)
        summaries = summarize(db.episodes(suite=args.suite))
        if not summaries:
            print(f"no episodes in {args.db}" + (f" for suite {args.suite!r}" if args.suite else ""), file=sys.stderr)
        text = markdown(summaries)
        best_of_n = summarize_best_of_n(db.best_of_n(suite=args.suite))
        best = best_of_n_markdown(best_of_n, summaries)
        if best:  # verifier-selected trials: their own table, never ranked with pass@1
            text += "\n\nBest-of-n at test time (a verifier picks the branch; not pass@1):\n\n" + best
        if args.json:
            print(summaries_json(summaries, best_of_n, db=str(args.db), suite=args.suite))
        else:
            print(text)
        if args.md:
            Path(args.md).parent.mkdir(parents=True, exist_ok=True)
            Path(args.md).write_text(text + "\n", encoding="utf-8")
        if args.html:
            print(f"wrote {write_html(db, args.html, suite=args.suite)}", file=sys.stderr)
    return 0
