"""Which reported tests a task's test id names, and the outcome it gets.

A task lists its graded tests by id; the harness reports pytest node ids. An id equal to a reported node id
names that test. SWE-bench's published FAIL_TO_PASS/PASS_TO_PASS lists were read from pytest's log by
splitting each line at whitespace, so an id holding whitespace (``test_x[a b]``) is listed cut at its
first whitespace (``test_x[a``). Such a cut id names exactly the reported ids whose text before their
first whitespace is the cut id, and nothing more: never a prefix match, never an id without whitespace.

Fails closed: a cut id that names several reported tests (``test_x[a b]`` and ``test_x[a c]``) cannot say
which one it meant, so it passes only when every one of them passed; one that names none is ``missing``.
"""

from __future__ import annotations

PASSED = "passed"
MISSING = "missing"


def cut_at_whitespace(node_id: str) -> str:
    """The id as SWE-bench's log parser lists it: the text before the first whitespace."""
    return node_id.split(None, 1)[0] if node_id.strip() else node_id


def named_by(test_id: str, reported: dict[str, str]) -> list[str]:
    """The reported ids ``test_id`` names: itself when reported, else those it is the cut form of."""
    if test_id in reported:
        return [test_id]
    return [node for node in reported
            if node != cut_at_whitespace(node) and cut_at_whitespace(node) == test_id]


def outcome_of(test_id: str, reported: dict[str, str]) -> str:
    """``test_id``'s outcome: ``passed`` only when every test it names passed; ``missing`` when it names none."""
    nodes = named_by(test_id, reported)
    if not nodes:
        return MISSING
    return next((reported[n] for n in nodes if reported[n] != PASSED), PASSED)


def outcomes_of(test_ids: list[str], reported: dict[str, str]) -> dict[str, str]:
    """The outcome of each of ``test_ids`` (in order, duplicates once) from the harness's report."""
    return {tid: outcome_of(tid, reported) for tid in dict.fromkeys(test_ids)}
