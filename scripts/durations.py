"""Write tests/durations.json from the output of a test run with ``--durations=0``.

    PYTEST_ADDOPTS=--durations=0 bash .ci/run > ci.log 2>&1
    python scripts/durations.py ci.log

Each test's set-up, call and tear-down seconds are summed; tests of at least ``--min`` seconds (default 8) are kept.
xdist's ``@group`` suffix is dropped from the ids. tests/conftest.py reads the file to queue the longest xdist groups
first; any test it does not name counts one second.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

LINE = re.compile(r"^(\d+(?:\.\d+)?)s (?:setup|call|teardown) +(tests/\S.*?)\s*$")


def durations(log: str) -> dict[str, float]:
    """Seconds per test id in a ``--durations=0`` report (set-up, call and tear-down summed)."""
    seconds: dict[str, float] = {}
    for line in log.splitlines():
        match = LINE.match(line)
        if match:
            test = re.sub(r"@(tests/\S*|[\w.-]+)$", "", match.group(2))  # `id@group` under --dist loadgroup
            seconds[test] = seconds.get(test, 0.0) + float(match.group(1))
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", type=Path, help="the output of a run with --durations=0")
    parser.add_argument("--min", type=float, default=8.0, help="keep the tests of at least this many seconds")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "tests" / "durations.json")
    args = parser.parse_args(argv)
    found = durations(args.log.read_text(errors="replace"))
    if not found:
        print(f"durations: no --durations=0 lines in {args.log}", file=sys.stderr)
        return 1
    kept = {test: round(s) for test, s in sorted(found.items(), key=lambda kv: -kv[1]) if s >= args.min}
    args.out.write_text(json.dumps(kept, indent=1) + "\n")
    print(f"durations: {len(kept)} tests of {args.min:g} s or more ({len(found)} timed) -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
