"""``repogym bench``: K episodes per task of a suite for one agent, into a results database (resumable)."""

from __future__ import annotations

import sys

from repogym.agents import AGENTS
from repogym.agents.llm import DEFAULT_BASE_URL as LLM_DEFAULT_URL  # a light module (urllib, no client package)
from repogym.envs.sandbox import BACKENDS


def add_parser(sub) -> None:
    parser = sub.add_parser(
        "bench", help="benchmark an agent over a suite into a results database (re-run to resume)",
        description="Runs K episodes per task, C environments at once, storing each finished episode in the "
                    "SQLite database at once. Re-running the same command runs only what is missing "
                    "(--retry-errors: and what ended in an infra or internal error). The summary names the cause "
                    "of every infra or internal error, grouped. The llm agent's server is asked first "
                    f"(GET BASE_URL/models): with none answering at {LLM_DEFAULT_URL} (or the agent's base_url) "
                    "the command stops before anything runs, saying how to start one.")
    parser.add_argument("--agent", required=True, help=f"agent name: one of {', '.join(AGENTS.names())}")
    parser.add_argument("--agent-config", default=None, metavar="FILE",
                        help="YAML or JSON file of agent options, checked before anything starts (llm: base_url, "
                             f"default {LLM_DEFAULT_URL} or $REPOGYM_LLM_BASE_URL, and model, default 'default' or "
                             "$REPOGYM_LLM_MODEL; hf: path)")
    parser.add_argument("--suite", required=True, help="suite name or JSONL path")
    parser.add_argument("--k", type=int, default=1, help="episodes per task (default 1)")
    parser.add_argument("--concurrency", type=int, default=1, help="environments at once (default 1)")
    parser.add_argument("--db", required=True, metavar="FILE", help="results database (created if missing)")
    parser.add_argument("--sandbox", choices=BACKENDS.names(), default=None,
                        help="backend (default: docker when a daemon answers, else local)")
    parser.add_argument("--max-turns", type=int, default=30, help="turn limit per episode (default 30)")
    parser.add_argument("--limit", type=int, default=None, help="only the first N tasks")
    parser.add_argument("--task", action="append", default=None, metavar="ID", dest="task_ids",
                        help="only this task (instance id; repeatable; not with --limit): an unknown id stops the "
                             "run, naming the closest ones")
    parser.add_argument("--retry-errors", action="store_true",
                        help="also run again the episodes stored as infra_error or internal_error, each new row "
                             "replacing the old one (which stays until its replacement is stored)")
    parser.add_argument("--skip-no-f2p", action="store_true",
                        help="leave out the suite's tasks with no FAIL_TO_PASS test, saying how many (default: such "
                             "a task stops the run, since no patch can fail it and every agent would resolve it)")
    parser.add_argument("--label", default=None, help="the agent's name in the database (default: --agent)")
    parser.add_argument("--out", default=None, metavar="DIR",
                        help="trajectory folder (default: <db stem>-trajectories next to the database)")
    parser.add_argument("--best-of", type=int, default=1, metavar="N",
                        help="best-of-N at test time: fork each episode after reset into N branches (one agent each), "
                             "score submitted branches by the visible tests (run_tests), grade only the best; stored "
                             "and reported apart from pass@1 (default 1: plain episodes)")
    parser.add_argument("--run-id", default=None, metavar="ID",
                        help="label of this run's sandboxes (`repogym gc --run ID` keeps to them; default: default)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--json", action="store_true",
                        help="print the summary as one JSON object on stdout and nothing else there (progress and "
                             "notes go to stderr): {db, suite, agent, planned, skipped, written, retried, interrupted, "
                             "internal_errors, summaries: [{agent, suite, checkpoint, episodes, tasks, resolved, "
                             "resolved_rate, ci_low, ci_high, pass_at_k, infra_errors, infra_error_rate, "
                             "internal_errors, errors: [{status, where, message, count}], ...}], best_of_n: [...]}; "
                             "a rate with nothing to be over is null")
    parser.set_defaults(func=run)


def run(args) -> int:
    from repogym.bench.metrics import best_of_n_table, error_causes_text, summaries_json, summary_table
    from repogym.bench.runner import BenchConfig, load_agent_options, run_bench

    from repogym.envs.taskgen.recipes import ensure_suites

    ensure_suites([args.suite])  # procedural suites (flips) are built on first use
    config = BenchConfig(agent=args.agent, suite=args.suite, db=args.db,
                         agent_options=load_agent_options(args.agent_config), k=args.k,
                         concurrency=args.concurrency, sandbox=args.sandbox, max_turns=args.max_turns,
                         limit=args.limit, task_ids=args.task_ids, retry_errors=args.retry_errors, label=args.label,
                         out=args.out, progress=not args.no_progress, best_of=args.best_of, run_id=args.run_id,
                         skip_no_f2p=args.skip_no_f2p)
    report = run_bench(config)
    notes = sys.stderr if args.json else sys.stdout  # with --json, stdout holds the JSON object alone
    kind = f"best-of-{config.best_of} trials" if config.best_of > 1 else "episodes"
    retried = f" ({report.retried} of them replacing stored errors)" if report.retried else ""
    print(f"{report.written} {kind} stored this run{retried}, {report.skipped} were already there", file=notes)
    if args.json:
        print(summaries_json(report.summaries, report.best_of_n, db=str(config.db), suite=config.suite,
                             agent=config.name, planned=report.planned, skipped=report.skipped,
                             written=report.written, retried=report.retried, interrupted=report.interrupted,
                             internal_errors=report.internal_errors))
    else:
        if report.summaries:
            print(summary_table(report.summaries))
        if report.best_of_n:  # verifier-selected: a table of its own, pass@1 beside it for comparison
            print("\nbest-of-n (a verifier picks the branch; not pass@1):")
            print(best_of_n_table(report.best_of_n, report.summaries))
        causes = error_causes_text([*report.summaries, *report.best_of_n])
        if causes:
            print("\n" + causes + "\n(re-run with --retry-errors to run them again)")
    print(f"results in {config.db}, trajectories in {config.trajectory_dir}/", file=notes)
    return 130 if report.interrupted else 0
