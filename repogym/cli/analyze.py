"""``repogym analyze``: which symbols a change touches, who depends on them, which tests cover them (measured with
``--coverage``, else static)."""

from __future__ import annotations

import json
from pathlib import Path

from repogym.envs.core.errors import ConfigError


def add_parser(sub) -> None:
    parser = sub.add_parser("analyze", help="static impact analysis of a diff (changed symbols, dependents, tests)",
                            description="Static impact analysis of a change: the symbols it touches, what depends "
                                        "on them (up to --depth), and which tests reach them. The change is a diff "
                                        "file (--diff) or two revisions (--rev; default: HEAD against the working "
                                        "tree).")
    parser.add_argument("--repo", default=".", help="repository root (default: .)")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--diff", metavar="FILE",
                        help="a unified diff not yet applied, against the working tree ('-' reads stdin)")
    source.add_argument("--rev", metavar="A..B", help="compare two revisions ('A..' = A against the working tree)")
    parser.add_argument("--coverage", metavar="FILE",
                        help="a coverage map of the base: coverage.py's data file measured with per-test contexts "
                             "(pytest --cov=PKG --cov-context=test), or a repogym map; covering tests of code it "
                             "measured are the measured ones, the rest static")
    parser.add_argument("--json", action="store_true", help="print the analysis as JSON")
    parser.add_argument("--depth", type=int, default=3, help="how far to follow dependents (default: 3)")
    parser.add_argument("--source-root", action="append", metavar="DIR", dest="source_roots",
                        help="a folder import names start from, relative to --repo (repeatable; default: read from "
                             "pyproject.toml / setup.cfg / setup.py, else src/ when it holds a package)")
    parser.set_defaults(func=run)


def run(args) -> int:
    from repogym.envs.analysis import RepoIndex, analyze_diff, diff_between_revs
    from repogym.envs.analysis.diffs import apply_patch, parse_diff

    repo = Path(args.repo)
    if not repo.is_dir():
        raise ConfigError(f"expected --repo to be a folder, got {args.repo!r}")
    if args.depth < 1:  # checked before the repository is indexed (seconds on a large one)
        raise ConfigError(f"expected --depth >= 1, got {args.depth}")
    if args.coverage is not None and not Path(args.coverage).is_file():
        raise ConfigError(f"expected --coverage to be a coverage file, got {args.coverage!r}: no such file")
    if args.diff not in (None, "-") and not Path(args.diff).is_file():
        raise ConfigError(f"expected --diff to be a diff file (or - for stdin), got {args.diff!r}: no such file")
    if args.diff is not None:
        import sys
        diff = sys.stdin.read() if args.diff == "-" else Path(args.diff).read_text(encoding="utf-8")
        before = RepoIndex.from_folder(repo, args.source_roots)
        after_files: dict[str, bytes | None] = {}
        for fd in parse_diff(diff):
            current = Path(repo, fd.old_path).read_bytes() if fd.old_path and Path(repo, fd.old_path).is_file() else None
            if fd.old_path and fd.old_path != fd.new_path:
                after_files[fd.old_path] = None
            if fd.new_path:
                after_files[fd.new_path] = apply_patch(current, fd)
    else:
        before, diff, after_files = diff_between_revs(repo, args.rev or "HEAD..", args.source_roots)
    coverage = None
    if args.coverage is not None:
        from repogym.envs.analysis.coverage import read_map
        coverage = read_map(args.coverage, before, repo)
    analysis = analyze_diff(before, diff, after_files, max_depth=args.depth, coverage=coverage)
    print(json.dumps(analysis.to_dict(), indent=1) if args.json else analysis.render())
    return 0
