"""``inspect_diff``: the blast radius of the agent's change, before it submits.

The change is analysed with the tree-sitter index (:mod:`repogym.envs.analysis`): changed symbols, their
dependents (with distance), the tests that reach them, syntax errors the change introduced, and references
the index could not resolve. Then: which of those tests the agent has run since its last edit, and how
they came out. The base commit's index is built once per snapshot, on the host, from the snapshot's files.
"""

from __future__ import annotations

import io
import tarfile
import threading

from repogym.envs.tasks.repos import snapshot
from repogym.envs.tools.base import Tool, ToolContext, ToolResult

_BASE_INDEXES: dict[str, object] = {}
_LOCK = threading.Lock()


def base_index(task):
    """The index of the task's base commit (cached per snapshot)."""
    from repogym.envs.analysis import RepoIndex
    snap = snapshot(task)
    with _LOCK:
        if snap.key not in _BASE_INDEXES:
            files = {}
            with tarfile.open(fileobj=io.BytesIO(snap.tar)) as tar:
                for member in tar.getmembers():
                    if member.isfile() and member.name.endswith(".py"):
                        files[member.name] = tar.extractfile(member).read()
            if len(_BASE_INDEXES) > 32:
                _BASE_INDEXES.clear()
            _BASE_INDEXES[snap.key] = RepoIndex.from_files(files)
        return _BASE_INDEXES[snap.key]


def analyze_sandbox(ctx: ToolContext, diff: str | None = None):
    """The :class:`repogym.envs.analysis.DiffAnalysis` of the sandbox's current diff."""
    from repogym.envs.analysis import analyze_diff
    from repogym.envs.analysis.diffs import parse_diff
    diff = ctx.sandbox.diff() if diff is None else diff
    after: dict[str, bytes | None] = {}
    for path in (fd.new_path for fd in parse_diff(diff)):  # the paths as analyze_diff reads them
        if path and path.endswith(".py"):
            try:
                after[path] = ctx.sandbox.read_file(path, limit=8 << 20)
            except (FileNotFoundError, IsADirectoryError):
                after[path] = None
    return analyze_diff(base_index(ctx.task), diff, after)


def tests_since_last_edit(ctx: ToolContext) -> dict[str, str]:
    """Outcome of each test the agent ran (with ``run_tests``) after its last change; later runs win."""
    last_edit = ctx.notes.get("last_edit_turn", 0)
    outcomes: dict[str, str] = {}
    for run in ctx.notes.get("test_runs", []):
        if run["turn"] > last_edit:
            outcomes.update(run["outcomes"])
    return outcomes


def run_inspect_diff(ctx: ToolContext, args: dict) -> ToolResult:
    diff = ctx.sandbox.diff()
    if not diff.strip():
        return ToolResult("[no changes against the base commit: nothing to inspect]", exit_code=0)
    analysis = analyze_sandbox(ctx, diff)
    ran = tests_since_last_edit(ctx)
    covering = [t["test_id"] for t in analysis.tests if t.get("test_id")]
    lines = [analysis.render().rstrip(), "", "Covering tests since your last edit:"]
    if not covering:
        lines.append("  (no visible test reaches the changed code)")
    for test_id in covering:
        lines.append(f"  {ran.get(test_id, 'not run'):<8} {test_id}")
    not_run = [t for t in covering if t not in ran]
    if not_run:
        lines.append(f"[{len(not_run)} covering test(s) not run since your last edit: run_tests can run them]")
    return ToolResult("\n".join(lines), exit_code=0,
                      data={"analysis": analysis.to_dict(), "covering_run": len(covering) - len(not_run),
                            "covering_total": len(covering)})


INSPECT_DIFF = Tool("inspect_diff", "Analyse your current diff: changed symbols, what depends on them (with distance), "
                                    "the tests that reach them and whether you ran them since your last edit, and "
                                    "syntax errors you introduced.",
                    {"type": "object", "properties": {}}, run_inspect_diff)
