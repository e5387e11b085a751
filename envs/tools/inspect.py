"""``inspect_diff``: the blast radius of the agent's change, before it submits.

The change is analysed with the tree-sitter index (:mod:`repogym.envs.analysis`): changed symbols, their
dependents (with distance), the tests that cover them (``measured`` where the task's coverage map saw them run the
changed code at the base commit, ``static`` from the code for what the map has not seen: new code, changed
signatures), syntax errors the change introduced, and references the index could not resolve. Then: which of those tests the agent has run since its last edit, and how
they came out. Both are the facts the reward reads (:mod:`repogym.envs.rewards.facts`), shown to the agent.
"""

from __future__ import annotations

from repogym.envs.rewards.facts import analyze_sandbox, tests_since_last_edit
from repogym.envs.tools.base import Tool, ToolContext, ToolResult


def run_inspect_diff(ctx: ToolContext, args: dict) -> ToolResult:
    diff = ctx.sandbox.diff()
    if not diff.strip():
        return ToolResult("[no changes against the base commit: nothing to inspect]", exit_code=0)
    analysis = analyze_sandbox(ctx.sandbox, ctx.task, diff)
    ran = tests_since_last_edit(ctx.episode)
    source = {t["test_id"]: t.get("source", "static") for t in analysis.tests if t.get("test_id")}
    covering = list(source)
    outcome = {}  # covering id -> its outcome; a parametrized test's worst parameter
    for test_id, result in ran.items():
        key = _unparametrized(test_id)
        if key in source and outcome.get(key) in (None, "passed"):
            outcome[key] = result
    lines = [analysis.render().rstrip(), "", "Covering tests since your last edit (measured: seen running the "
             "changed code at the base commit; static: found from the code, for code not measured):"]
    if not covering:
        lines.append("  (no visible test reaches the changed code)")
    for test_id in covering:
        lines.append(f"  {outcome.get(test_id, 'not run'):<8} {test_id}  ({source[test_id]})")
    not_run = [t for t in covering if t not in outcome]
    if not_run:
        lines.append(f"[{len(not_run)} covering test(s) not run since your last edit: run_tests can run them]")
    return ToolResult("\n".join(lines), exit_code=0,
                      data={"analysis": analysis.to_dict(), "covering_run": len(covering) - len(not_run),
                            "covering_total": len(covering)})


def _unparametrized(test_id: str) -> str:
    if test_id.endswith("]"):
        head, sep, last = test_id.rpartition("::")
        return head + sep + last.partition("[")[0]
    return test_id


INSPECT_DIFF = Tool("inspect_diff", "Analyse your current diff: changed symbols, what depends on them (with distance), "
                                    "the tests that reach them and whether you ran them since your last edit, and "
                                    "syntax errors you introduced.",
                    {"type": "object", "properties": {}}, run_inspect_diff)
