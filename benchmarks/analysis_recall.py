"""Recall of repogym's dependency analysis on real PyPI projects, against the peer (jedi's references).

For every function and method of each project's package, both tools list its direct users: **dependents** (the
package's functions whose body refers to it) and **covering tests** (test functions whose body refers to it). The
truth is their union; each tool's recall is the share of the union it finds. Also printed: the same on the pairs
where the use goes through another name than the function's own (an import alias, ``from m import f as g``), and
what each tool alone found. The projects are downloaded as sdists (they ship their tests) into a cache folder.

Needs jedi (``pip install jedi``) and the package index. Run: ``python -m benchmarks.analysis_recall``
(``--project NAME==VERSION`` to pick others; ``--limit N`` functions per project for a quick look).
Goal (issue 22): repogym >= 95% on both, and above jedi alone.

**Coverage truth** (``--truth coverage``, issue 45): each project's suite runs once under coverage.py with one
context per test (switched when pytest starts and finishes each test, set-up and teardown included, in a virtualenv
this benchmark makes under the cache folder);
a test covers a function when a line of its body ran in its context. Then every covered function of the package is
changed (a statement appended to its body) and ``analyze_diff`` asked for its covering tests: static alone, and
with the coverage map measured by repogym's own probe (``envs/analysis/coverage_probe.py``, a separate run of the
suite), and ``unseen``: with a map that never measured the changed function's file (as if its code were new, so
its tests come from the static walk up to the first callers the map measured). Printed: recall and precision over
(function, test) pairs, and the suite's time plain, under the probe and under coverage.py. Goal: with the map
>= 95% recall at >= 90% precision. The runs' data are cached.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from repogym.envs.analysis import RepoIndex
from repogym.envs.analysis.extract import is_test_file
from repogym.envs.taskgen.sources import extract_tar

# Different layouts: src with classes (pluggy), src (packaging), flat and function-heavy (more-itertools).
PROJECTS = ("pluggy==1.5.0", "packaging==24.1", "more-itertools==10.5.0")
CACHE = Path.home() / ".cache" / "repogym" / "recall"


def fetch(spec: str) -> Path:
    """The unpacked sdist of ``spec`` (downloaded once)."""
    name, _, version = spec.partition("==")
    CACHE.mkdir(parents=True, exist_ok=True)
    found = [p for p in CACHE.glob("*.tar.gz") if p.name.lower().replace("_", "-").startswith(f"{name.lower()}-{version}")]
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:", spec, "-d",
                        str(CACHE)], check=True)
        found = [p for p in CACHE.glob("*.tar.gz")
                 if p.name.lower().replace("_", "-").startswith(f"{name.lower()}-{version}")]
    archive = found[0]
    root = CACHE / archive.name[:-len(".tar.gz")]
    if not root.exists():
        with tarfile.open(archive) as tar:
            extract_tar(tar, CACHE)
    return root


def _enclosing(index: RepoIndex, path: str, line: int):
    """The innermost function, method or test of ``path`` around ``line``."""
    best = None
    for symbol in index.symbols_in(path):
        if symbol.kind in ("function", "method") and symbol.line <= line <= symbol.end_line:
            if best is None or symbol.line >= best.line:
                best = symbol
    return best


def _jedi_users(project, root: Path, index: RepoIndex, symbol) -> set[str]:
    """The functions and tests around jedi's references to ``symbol`` (its definition left out)."""
    import jedi

    source = (root / symbol.file).read_text(encoding="utf-8", errors="replace")
    line_text = source.splitlines()[symbol.line - 1]
    column = line_text.index(symbol.name.rpartition(".")[2], line_text.index("def ") + 4)
    script = jedi.Script(source, path=str(root / symbol.file), project=project)
    users = set()
    for ref in script.get_references(symbol.line, column, include_builtins=False):
        if ref.module_path is None or ref.line == symbol.line and Path(ref.module_path) == root / symbol.file:
            continue
        try:
            path = Path(ref.module_path).resolve().relative_to(root.resolve()).as_posix()
        except ValueError:
            continue
        user = _enclosing(index, path, ref.line)
        if user is not None and user.name != symbol.name:
            users.add(user.name)
    return users


def _is_alias(root: Path, index: RepoIndex, user: str, target: str) -> bool:
    """The user's body never spells the target's own name: it reaches it through another (an import alias)."""
    symbol = index.symbols[user]
    body = (root / symbol.file).read_text(encoding="utf-8", errors="replace").splitlines()[symbol.line:symbol.end_line]
    return target.rpartition(".")[2] not in "\n".join(body)


def measure(spec: str, limit: int | None) -> dict:
    """Per kind (dependents, tests): pairs found by repogym, by jedi, their union, and the alias subset."""
    import jedi

    root = fetch(spec)
    start = time.perf_counter()
    index = RepoIndex.from_folder(root)
    index_s = time.perf_counter() - start
    roots = [str(root / r) for r in index.source_roots if r]
    project = jedi.Project(str(root), added_sys_path=roots, smart_sys_path=True)
    targets = [s for s in index.symbols.values() if s.kind in ("function", "method") and not is_test_file(s.file)
               and not s.file.startswith(("docs/", "doc/", "scripts/")) and s.name.rpartition(".")[2] != "__init__"]
    targets = sorted(targets, key=lambda s: s.name)[:limit]
    out = {kind: {"repogym": set(), "jedi": set()} for kind in ("dependents", "tests")}
    for symbol in targets:
        ours = {s.name for s, _ in index.dependents([symbol.name], max_depth=1) if s.kind in ("function", "method")}
        theirs = _jedi_users(project, root, index, symbol)
        for tool, users in (("repogym", ours), ("jedi", theirs)):
            for user in users:
                kind = "tests" if index.symbols[user].test_id else "dependents"
                out[kind][tool].add((user, symbol.name))
    for kind, found in out.items():
        union = found["repogym"] | found["jedi"]
        found["union"] = union
        found["alias"] = {pair for pair in union if _is_alias(root, index, *pair)}
    return {"spec": spec, "layout": ",".join(index.source_roots[:-1]) or "flat", "functions": len(targets),
            "index_s": index_s, "pairs": out}


def _pct(part: set, whole: set) -> str:
    return f"{100 * len(part & whole) / len(whole):5.1f}%" if whole else "   - "


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", action="append", help="NAME==VERSION of a PyPI sdist with tests (repeatable)")
    parser.add_argument("--limit", type=int, default=None, help="at most this many functions per project")
    parser.add_argument("--truth", choices=("jedi", "coverage"), default="jedi",
                        help="what the analysis is held against: jedi's references (default) or a coverage run")
    args = parser.parse_args(argv)
    if args.truth == "coverage":
        return coverage_main(args.project or PROJECTS, args.limit)
    try:
        import jedi  # noqa: F401
    except ImportError:
        print("this benchmark compares with jedi: pip install jedi", file=sys.stderr)
        return 2
    print(f"{'project':<24} {'layout':<7} {'funcs':>5}  {'kind':<10} {'union':>6}  {'repogym':>7}  {'jedi':>6}  "
          f"{'alias':>5} {'repogym':>7} {'jedi':>6}  only-repogym only-jedi")
    totals = {kind: {"repogym": set(), "jedi": set(), "union": set(), "alias": set()} for kind in ("dependents", "tests")}
    for spec in args.project or PROJECTS:
        result = measure(spec, args.limit)
        for kind, found in result["pairs"].items():
            union, alias = found["union"], found["alias"]
            print(f"{spec:<24} {result['layout']:<7} {result['functions']:>5}  {kind:<10} {len(union):>6}  "
                  f"{_pct(found['repogym'], union):>7}  {_pct(found['jedi'], union):>6}  {len(alias):>5} "
                  f"{_pct(found['repogym'], alias):>7} {_pct(found['jedi'], alias):>6}  "
                  f"{len(found['repogym'] - found['jedi']):>12} {len(found['jedi'] - found['repogym']):>9}")
            for key in totals[kind]:
                totals[kind][key] |= {(spec, *pair) for pair in found[key]}
    for kind, found in totals.items():
        print(f"{'all':<24} {'':<7} {'':>5}  {kind:<10} {len(found['union']):>6}  {_pct(found['repogym'], found['union']):>7}  "
              f"{_pct(found['jedi'], found['union']):>6}  {len(found['alias']):>5} "
              f"{_pct(found['repogym'], found['alias']):>7} {_pct(found['jedi'], found['alias']):>6}")
    return 0


# -- coverage truth ---------------------------------------------------------------------------------------------
TEST_PACKAGES = ("pytest", "coverage", "pretend")  # pretend: packaging's tests


def _test_venv() -> Path:
    """A virtualenv with pytest and coverage.py, made once under the cache folder."""
    venv = CACHE / "venv-coverage"
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *TEST_PACKAGES], check=True)
    return python


def _suite(root: Path) -> str:
    return next(name for name in ("tests", "testing", "test") if (root / name).is_dir())


_CONTEXTS_PLUGIN = """import coverage


def pytest_runtest_logstart(nodeid, location):
    coverage.Coverage.current().switch_context(nodeid)


def pytest_runtest_logfinish(nodeid, location):
    coverage.Coverage.current().switch_context("")
"""


def _run_suite(python: Path, root: Path, index: RepoIndex, extra: list[str], env: dict,
               runner: list[str] | None = None) -> float:
    """Seconds the project's suite takes with pytest options ``extra`` (under ``runner``, e.g. coverage.py's, else
    plain), its package importable from its roots."""
    import os
    paths = [str(root / r) for r in index.source_roots if r] + [str(root)]
    full_env = {**os.environ, **env, "PYTHONPATH": os.pathsep.join(paths + [env.get("PYTHONPATH", "")]).rstrip(":")}
    start = time.perf_counter()
    done = subprocess.run([str(python), *(runner or []), "-m", "pytest", "-q", "-p", "no:cacheprovider", *extra,
                           _suite(root)],
                          cwd=root, env=full_env, capture_output=True, text=True)
    if done.returncode not in (0, 1):
        raise SystemExit(f"{root.name}: the suite did not run (exit {done.returncode}): {done.stdout[-2000:]}")
    return time.perf_counter() - start


def _packages(index: RepoIndex) -> list[str]:
    """The top-level packages of the project (what coverage.py measures)."""
    return sorted({s.name.split(".")[0] for s in index.symbols.values() if s.kind == "module"
                   and not is_test_file(s.file) and "/" in s.file.removeprefix(index.source_roots[0] + "/")})


def _body_edit(index: RepoIndex, symbol) -> bytes | None:
    """``symbol``'s file with a statement appended to its body, or None when its body shares the def's line."""
    facts, i = index._defs[symbol.name]
    line_start = facts.source.rfind(b"\n", 0, facts.defs[i].body_start) + 1
    indent = facts.source[line_start:facts.defs[i].body_start]
    if not indent or indent.strip():
        return None
    lines = facts.source.split(b"\n")
    lines.insert(symbol.end_line, indent + b"_recall_probe = None")
    return b"\n".join(lines)


def measure_coverage(spec: str, limit: int | None) -> dict:
    """Truth from coverage.py, the probe's map, and the covering tests of each covered function (static, with map)."""
    import difflib
    import json
    import os

    from repogym.envs.analysis import analyze_diff
    from repogym.envs.analysis.coverage import PROBE, CoverageMap, from_coverage_db, from_probe

    root = fetch(spec)
    python = _test_venv()
    index = RepoIndex.from_folder(root)
    work = CACHE / "coverage-runs" / root.name
    work.mkdir(parents=True, exist_ok=True)
    timings_file = work / "timings.json"
    timings = json.loads(timings_file.read_text()) if timings_file.exists() else {}
    if "plain_s" not in timings:
        timings["plain_s"] = _run_suite(python, root, index, [], {})
    data = work / "coverage.sqlite"
    if not data.exists():
        # Not pytest-cov: its old-style hookwrappers run pluggy's ``Result`` in every test, which on pluggy's own
        # suite would count as the tests' coverage. Contexts switched by a new-style plugin, as the probe does.
        (work / "coveragerc").write_text(f"[run]\nbranch = False\nsource = {','.join(_packages(index))}\n")
        (work / "repogym_truth_contexts.py").write_text(_CONTEXTS_PLUGIN)
        timings["coverage_s"] = _run_suite(python, root, index, ["-p", "repogym_truth_contexts"],
                                           {"COVERAGE_FILE": str(data), "PYTHONPATH": str(work)},
                                           runner=["-m", "coverage", "run", f"--rcfile={work / 'coveragerc'}"])
    report = work / "probe.json"
    if not report.exists():
        (work / "repogym_probe.py").write_bytes(PROBE.read_bytes())
        timings["probe_s"] = _run_suite(python, root, index, ["-p", "repogym_probe"],
                                        {"PYTHONPATH": str(work), "REPOGYM_COVERAGE_OUT": str(report),
                                         "REPOGYM_COVERAGE_ROOT": str(root)})
    timings_file.write_text(json.dumps(timings))
    truth = from_coverage_db(data, index, root)
    cmap = from_probe(json.loads(report.read_text()), index)
    targets = sorted(q for q in truth.functions if not is_test_file(index.symbols[q].file))[:limit]
    pairs = {"truth": set(), "static": set(), "map": set(), "unseen": set()}
    skipped = 0
    every_file = frozenset(index.files)
    without: dict[str, CoverageMap] = {}  # file -> the map with that file unmeasured (as if its code were new)
    start = time.perf_counter()
    for name in targets:
        symbol = index.symbols[name]
        new = _body_edit(index, symbol)
        if new is None:
            skipped += 1
            continue
        old = index._files[symbol.file].source
        diff = "".join(difflib.unified_diff(old.decode().splitlines(True), new.decode().splitlines(True),
                                            f"a/{symbol.file}", f"b/{symbol.file}"))
        pairs["truth"] |= {(name, t) for t in truth.tests_of(name)}
        if symbol.file not in without:
            without[symbol.file] = CoverageMap({q: t for q, t in cmap.functions.items()
                                                if index.symbols[q].file != symbol.file}, cmap.tests,
                                               every_file - {symbol.file})
        for label, cov in (("static", None), ("map", cmap), ("unseen", without[symbol.file])):
            analysis = analyze_diff(index, diff, {symbol.file: new}, coverage=cov)
            pairs[label] |= {(name, t["test_id"]) for t in analysis.tests}
    per_function_ms = 1000 * (time.perf_counter() - start) / max(1, 3 * (len(targets) - skipped))
    return {"spec": spec, "layout": ",".join(index.source_roots[:-1]) or "flat", "functions": len(targets) - skipped,
            "tests": len(truth.tests), "pairs": pairs, "timings": timings, "per_function_ms": per_function_ms,
            "map_python": cmap.info.get("python", ""), "env": os.environ.get("VIRTUAL_ENV", "")}


def _recall_precision(found: set, truth: set) -> tuple[str, str]:
    hit = len(found & truth)
    recall = f"{100 * hit / len(truth):5.1f}%" if truth else "   - "
    precision = f"{100 * hit / len(found):5.1f}%" if found else "   - "
    return recall, precision


def coverage_main(specs, limit: int | None) -> int:
    """Print the coverage-truth table; exit 0 when the map's totals reach the goal."""
    print(f"{'project':<24} {'layout':<7} {'funcs':>5} {'tests':>6} {'pairs':>6}  {'static R':>8} {'P':>6}  "
          f"{'map R':>6} {'P':>6}  {'unseen R':>8} {'P':>6}   {'plain':>6} {'probe':>6} {'cov.py':>6}  {'analyze':>7}")
    totals = {"truth": set(), "static": set(), "map": set(), "unseen": set()}
    for spec in specs:
        result = measure_coverage(spec, limit)
        pairs, t = result["pairs"], result["timings"]
        static_r, static_p = _recall_precision(pairs["static"], pairs["truth"])
        map_r, map_p = _recall_precision(pairs["map"], pairs["truth"])
        unseen_r, unseen_p = _recall_precision(pairs["unseen"], pairs["truth"])
        print(f"{spec:<24} {result['layout']:<7} {result['functions']:>5} {result['tests']:>6} "
              f"{len(pairs['truth']):>6}  {static_r:>8} {static_p:>6}  {map_r:>6} {map_p:>6}  {unseen_r:>8} "
              f"{unseen_p:>6}   "
              f"{t['plain_s']:>5.1f}s {t.get('probe_s', float('nan')):>5.1f}s {t.get('coverage_s', float('nan')):>5.1f}s"
              f"  {result['per_function_ms']:>5.1f}ms")
        for key in totals:
            totals[key] |= {(spec, *pair) for pair in pairs[key]}
    static_r, static_p = _recall_precision(totals["static"], totals["truth"])
    map_r, map_p = _recall_precision(totals["map"], totals["truth"])
    unseen_r, unseen_p = _recall_precision(totals["unseen"], totals["truth"])
    print(f"{'all':<24} {'':<7} {'':>5} {'':>6} {len(totals['truth']):>6}  {static_r:>8} {static_p:>6}  "
          f"{map_r:>6} {map_p:>6}  {unseen_r:>8} {unseen_p:>6}")
    hit = len(totals["map"] & totals["truth"])
    ok = totals["truth"] and hit >= 0.95 * len(totals["truth"]) and hit >= 0.90 * len(totals["map"])
    print(f"with the map >= 95% recall at >= 90% precision: {'OK' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
