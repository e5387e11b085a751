"""Which reported tests a task's test id names, and the outcome it gets (per test runner).

A task lists its graded tests by id; the harness reports ids in its runner's form (``envs/sandbox/testrun.py``).
An id equal to a reported id always names that test. Beyond that, each runner accepts only the forms its
datasets list, and nothing else (never a prefix match):

- **pytest**: SWE-bench's published FAIL_TO_PASS/PASS_TO_PASS lists were read from pytest's log by splitting
  each line at whitespace, so an id holding whitespace (``test_x[a b]``) is listed cut at its first
  whitespace (``test_x[a``). Such a cut id names exactly the reported ids whose text before their first
  whitespace is the cut id: never an id without whitespace. The parser of pylint, requests and pydicom also
  shortens a parameter that is an absolute path to its last component (``test_stdin[/mymodule.py]`` for a
  temporary folder's ``[/tmp/t1/mymodule.py]``); such an id names the reported ids that shorten to it
  (:func:`swebench_form`).
- **django**: reported ids are ``name (module.Class)``. Python 3.11's unittest prints (and SWE-bench lists,
  for Django >= 4.1) ``name (module.Class.name)``: the same test. A line that is no such id is taken as a
  docstring's first line (unittest's verbose output prints it instead of the id, and SWE-bench's parser
  kept it): it names the reported tests whose docstring's first line it is.
- **sympy**: reported ids are ``path::name``; a bare name (``test_foo``, as SWE-bench lists sympy's tests)
  names every reported ``path::name`` whose name part equals it.

Fails closed: an id that names several reported tests (a cut id, a docstring line, a bare name found in
several files) cannot say which one it meant, so it passes only when every one of them passed; one that
names none is ``missing``.
"""

from __future__ import annotations

import re

PASSED = "passed"
MISSING = "missing"
_DJANGO_ID = re.compile(r"^(\w+) \(([\w.]+)\)$")
_OPTION = re.compile(r"(.*?)\[(.*)\]")  # SWE-bench's own pattern (swebench/harness/log_parsers)


def cut_at_whitespace(node_id: str) -> str:
    """The id as SWE-bench's log parser lists it: the text before the first whitespace."""
    return node_id.split(None, 1)[0] if node_id.strip() else node_id


def swebench_form(node_id: str) -> str:
    """A pytest node id as SWE-bench's log parsers list it: cut at the first whitespace, then (the parser of
    pylint, requests and pydicom) a parameter that is an absolute path shortened to its last component,
    ``test_stdin[/tmp/x/mymodule.py]`` -> ``test_stdin[/mymodule.py]`` (not ``//...`` nor one with ``*``)."""
    cut = cut_at_whitespace(node_id)
    match = _OPTION.search(cut)
    if match:
        main, option = match.groups()
        if option.startswith("/") and not option.startswith("//") and "*" not in option:
            return f"{main}[/{option.split('/')[-1]}]"
    return cut


def django_id(test_id: str) -> str | None:
    """``name (module.Class)`` for either Django form of a test id; None for anything else (a docstring line)."""
    match = _DJANGO_ID.match(test_id)
    if not match:
        return None
    name, dotted = match.groups()
    owner, _, last = dotted.rpartition(".")
    if last == name and "." in owner:  # Python 3.11's form: name (module.Class.name)
        return f"{name} ({owner})"
    return test_id


def named_by(test_id: str, reported: dict[str, str], *, runner: str = "pytest",
             docs: dict[str, str] | None = None) -> list[str]:
    """The reported ids ``test_id`` names under ``runner``'s conventions (``docs``: django's docstring lines)."""
    if test_id in reported:
        return [test_id]
    if runner == "django":
        canonical = django_id(test_id)
        if canonical is not None:
            return [canonical] if canonical in reported else []
        return [node for node in reported if (docs or {}).get(node) == test_id] if test_id.strip() else []
    if runner == "sympy":
        if "::" in test_id or not test_id.strip():
            return []
        return [node for node in reported if node.rpartition("::")[2] == test_id and "::" in node]
    return [node for node in reported if node != test_id and swebench_form(node) == test_id]


def outcome_of(test_id: str, reported: dict[str, str], *, runner: str = "pytest",
               docs: dict[str, str] | None = None) -> str:
    """``test_id``'s outcome: ``passed`` only when every test it names passed; ``missing`` when it names none."""
    nodes = named_by(test_id, reported, runner=runner, docs=docs)
    if not nodes:
        return MISSING
    return next((reported[n] for n in nodes if reported[n] != PASSED), PASSED)


def outcomes_of(test_ids: list[str], reported: dict[str, str], *, runner: str = "pytest",
                docs: dict[str, str] | None = None) -> dict[str, str]:
    """The outcome of each of ``test_ids`` (in order, duplicates once) from the harness's report."""
    return {tid: outcome_of(tid, reported, runner=runner, docs=docs) for tid in dict.fromkeys(test_ids)}
