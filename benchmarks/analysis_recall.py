"""Recall of repogym's dependency analysis on real PyPI projects, against the peer (jedi's references).

For every function and method of each project's package, both tools list its direct users: **dependents** (the
package's functions whose body refers to it) and **covering tests** (test functions whose body refers to it). The
truth is their union; each tool's recall is the share of the union it finds. Also printed: the same on the pairs
where the use goes through another name than the function's own (an import alias, ``from m import f as g``), and
what each tool alone found. The projects are downloaded as sdists (they ship their tests) into a cache folder.

Needs jedi (``pip install jedi``) and the package index. Run: ``python -m benchmarks.analysis_recall``
(``--project NAME==VERSION`` to pick others; ``--limit N`` functions per project for a quick look).
Goal (issue 22): repogym >= 95% on both, and above jedi alone.
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
    args = parser.parse_args(argv)
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


if __name__ == "__main__":
    raise SystemExit(main())
