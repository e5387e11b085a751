"""The docs' commands run as written: every ``repogym`` command in a fenced ```bash block of README.md and
docs/**/*.md is marked, and the ones marked runnable run here.

The marking is an HTML comment on the line just above the fence (GitHub does not show it):

    <!-- docs-check: runs -->
    ```bash
    repogym tasks list
    ```

- ``runs``: every ``repogym`` command of the block runs on the CI machine as written and exits 0.
- ``needs WHAT[, WHAT...]``: it needs what CI lacks, one or more of ``NEEDS`` below: ``gpu`` (a CUDA GPU),
  ``server`` (a model server or a Ray cluster, or the command is a server that runs until stopped),
  ``long-run`` (minutes or more: training, a whole suite, a dataset), ``network`` (downloads), ``your-files``
  (a dataset, a model, a repository or a config the reader brings).

A command is a line of the block (``\\`` continuations joined) whose first word, after any ``VAR=value``
assignments, is ``repogym``. A block with such a command and no marker fails
``test_every_docs_command_is_marked`` (fast tier): new docs must choose. A marker that is not right above a
```bash block, or that names something not listed, fails it too.

``test_runnable_commands_run`` (slow) runs a file's runnable commands in order, each with bash (a timeout of
``COMMAND_TIMEOUT_S``), in a fresh folder for that file, with this environment's ``repogym`` first on PATH, so a
later command finds what an earlier one wrote (a results database, trajectories). The folder starts as a fresh
clone is after ``bash scripts/demo.sh`` in what the commands name of it: each ``runs/demo/AGENT/TASK.jsonl``
they name is made first, by ``repogym demo --task TASK --agents AGENT``. Keep runnable examples short
(``--limit 1``, ``--task ID``); mark longer ones ``needs long-run``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NEEDS = ("gpu", "server", "long-run", "network", "your-files")
COMMAND_TIMEOUT_S = 240

_MARKER = re.compile(r"^\s*<!--\s*docs-check:\s*(?P<what>.*?)\s*-->\s*$")
_FENCE_OPEN = re.compile(r"^\s*```\s*(?P<lang>[\w+-]*)")
_FENCE_CLOSE = re.compile(r"^\s*```\s*$")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=\S*\s+")
_DEMO_TRAJECTORY = re.compile(r"runs/demo/(?P<agent>[\w.-]+)/(?P<task>[\w.-]+)\.jsonl")


@dataclass(frozen=True)
class Command:
    """One ``repogym`` command of a docs file: where it is, its text, and its block's marker."""

    file: str
    line: int
    text: str
    marker: str | None  # "runs", "needs ...", or None: unmarked

    @property
    def runnable(self) -> bool:
        return self.marker == "runs"

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.text}"


def is_repogym_command(line: str) -> bool:
    """Whether a shell line runs ``repogym`` first (``VAR=value`` assignments before it allowed)."""
    rest = line.strip()
    while (assignment := _ASSIGNMENT.match(rest)) is not None:
        rest = rest[assignment.end():]
    return rest == "repogym" or rest.startswith("repogym ")


def marker_problem(what: str) -> str | None:
    """Why a marker's text is not ``runs`` or ``needs`` with known words, or None when it is fine."""
    if what == "runs":
        return None
    kind, _, rest = what.partition(" ")
    needs = [word.strip() for word in rest.split(",")]
    if kind != "needs" or not all(needs):
        return f"expected 'runs' or 'needs {' | '.join(NEEDS)}' (comma-separated), got {what!r}"
    unknown = [word for word in needs if word not in NEEDS]
    return f"unknown need(s) {unknown} in {what!r}: expected some of {', '.join(NEEDS)}" if unknown else None


def scan(text: str, file: str) -> tuple[list[Command], list[str]]:
    """The ``repogym`` commands of a Markdown text's ```bash blocks, and the problems with its markers."""
    commands: list[Command] = []
    problems: list[str] = []
    lines = text.splitlines()
    marker: tuple[int, str] | None = None  # the marker just above the current line: (line number, text)
    index = 0
    while index < len(lines):
        number, line = index + 1, lines[index]
        index += 1
        if found := _MARKER.match(line):
            if marker is not None:
                problems.append(f"{file}:{marker[0]}: docs-check marker not right above a ```bash block")
            marker = (number, found["what"])
            if problem := marker_problem(found["what"]):
                problems.append(f"{file}:{number}: {problem}")
            continue
        opening = _FENCE_OPEN.match(line)
        if opening is None:
            if marker is not None:
                problems.append(f"{file}:{marker[0]}: docs-check marker not right above a ```bash block")
                marker = None
            continue
        block_marker, marker = marker, None
        if block_marker is not None and opening["lang"] != "bash":
            problems.append(f"{file}:{block_marker[0]}: docs-check marker above a ```{opening['lang']} block")
        block: list[Command] = []
        while index < len(lines) and not _FENCE_CLOSE.match(lines[index]):
            start, joined = index + 1, lines[index].rstrip()
            index += 1
            while joined.endswith("\\") and index < len(lines) and not _FENCE_CLOSE.match(lines[index]):
                joined = joined[:-1].rstrip() + " " + lines[index].strip()
                index += 1
            if opening["lang"] == "bash" and is_repogym_command(joined):
                block.append(Command(file, start, joined.strip(), block_marker[1] if block_marker else None))
        index += 1  # the closing fence
        if block_marker is not None and opening["lang"] == "bash" and not block:
            problems.append(f"{file}:{block_marker[0]}: docs-check marker above a block with no repogym command")
        problems.extend(f"{command}\n    (no docs-check marker above its ```bash block)"
                        for command in block if not command.marker)
        commands.extend(block)
    if marker is not None:
        problems.append(f"{file}:{marker[0]}: docs-check marker not right above a ```bash block")
    return commands, problems


def docs_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def scan_file(path: Path) -> tuple[list[Command], list[str]]:
    return scan(path.read_text(encoding="utf-8"), path.relative_to(ROOT).as_posix())


# --- the marking, checked on every docs file (fast) ----------------------------------------------------------


def test_every_docs_command_is_marked():
    commands, problems = [], []
    for path in docs_files():
        found, wrong = scan_file(path)
        commands += found
        problems += wrong
    assert not problems, (f"mark each ```bash block with a repogym command: <!-- docs-check: runs --> or <!-- "
                          f"docs-check: needs {'|'.join(NEEDS)} --> just above it (tests/test_docs_commands.py)\n"
                          + "\n".join(problems))
    readme = [command for command in commands if command.file == "README.md"]
    assert any(command.runnable for command in readme), "README.md has no runnable repogym command left"


def test_the_scan_finds_marks_and_complains():
    text = "\n".join([
        "<!-- docs-check: runs -->",
        "```bash",
        "source .venv/bin/activate",
        "repogym tasks list   # a comment",
        "REPOGYM_MIRRORS=~/m repogym validate \\",
        "    --suite builtin",
        "```",
        "<!-- docs-check: needs gpu, long-run -->",
        "```bash",
        "repogym train --config x.yaml",
        "```",
        "```python",
        "repogym = 1",
        "```",
        "```bash",
        "repogym show run.jsonl",
        "echo repogym",
        "```",
        "<!-- docs-check: needs wifi -->",
        "```bash",
        "repogym serve",
        "```",
        "<!-- docs-check: runs -->",
        "",
        "text",
    ])
    commands, problems = scan(text, "x.md")
    assert [(c.line, c.text, c.marker) for c in commands] == [
        (4, "repogym tasks list   # a comment", "runs"),
        (5, "REPOGYM_MIRRORS=~/m repogym validate --suite builtin", "runs"),
        (10, "repogym train --config x.yaml", "needs gpu, long-run"),
        (16, "repogym show run.jsonl", None),
        (21, "repogym serve", "needs wifi"),
    ]
    assert len(problems) == 3, problems
    assert problems[0] == "x.md:16: repogym show run.jsonl\n    (no docs-check marker above its ```bash block)"
    assert problems[1].startswith("x.md:19: unknown need(s) ['wifi']")
    assert problems[2] == "x.md:23: docs-check marker not right above a ```bash block"


def test_a_marker_must_sit_on_a_bash_block_with_a_repogym_command():
    _, problems = scan("<!-- docs-check: runs -->\n```python\nprint(1)\n```\n", "x.md")
    assert problems == ["x.md:1: docs-check marker above a ```python block"]
    _, problems = scan("<!-- docs-check: needs gpu -->\n```bash\nnvidia-smi\n```\n", "x.md")
    assert problems == ["x.md:1: docs-check marker above a block with no repogym command"]
    _, problems = scan("<!-- docs-check: run -->\n```bash\nrepogym gc\n```\n", "x.md")
    assert problems == ["x.md:1: expected 'runs' or 'needs gpu | server | long-run | network | your-files' "
                        "(comma-separated), got 'run'"]


# --- the runnable commands, run (slow) ------------------------------------------------------------------------


def _runnable_by_file() -> dict[str, list[Command]]:
    by_file: dict[str, list[Command]] = {}
    for path in docs_files():
        for command in scan_file(path)[0]:
            if command.runnable:
                by_file.setdefault(command.file, []).append(command)
    return by_file


def _run(command: str, folder: Path, env: dict[str, str], where: str) -> subprocess.CompletedProcess:
    try:
        done = subprocess.run(["bash", "-c", command], cwd=folder, env=env, capture_output=True, text=True,
                              timeout=COMMAND_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{where}: still running after {COMMAND_TIMEOUT_S} s: shorten it (--limit 1, --task ID) or mark "
                    f"its block <!-- docs-check: needs long-run -->")
    if done.returncode != 0:
        pytest.fail(f"{where}: exited {done.returncode} in {folder}\n--- stdout (end)\n{done.stdout[-3000:]}\n"
                    f"--- stderr (end)\n{done.stderr[-3000:]}")
    return done


def _make_demo_trajectories(commands: list[Command], folder: Path, env: dict[str, str]) -> None:
    """What ``bash scripts/demo.sh`` leaves in a clone that the commands name: ``runs/demo/AGENT/TASK.jsonl``."""
    wanted = {(found["agent"], found["task"]) for command in commands
              for found in _DEMO_TRAJECTORY.finditer(command.text)}
    for agent, task in sorted(wanted):
        _run(f"repogym demo --suite builtin --task {task} --agents {agent} --out runs/demo", folder, env,
             f"making runs/demo/{agent}/{task}.jsonl, as bash scripts/demo.sh does")
        assert (folder / "runs" / "demo" / agent / f"{task}.jsonl").is_file()


@pytest.mark.slow
@pytest.mark.parametrize("file", sorted(_runnable_by_file()))
def test_runnable_commands_run(file, tmp_path):
    commands = _runnable_by_file()[file]
    bin_dir = Path(sys.executable).parent
    assert (bin_dir / "repogym").is_file(), f"no repogym beside {sys.executable}: install repogym in this environment"
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", "NO_COLOR": "1"}
    folder = tmp_path / "clone"
    folder.mkdir()
    _make_demo_trajectories(commands, folder, env)
    for command in commands:
        _run(command.text, folder, env, str(command))


def test_a_failing_command_fails_with_where_and_why(tmp_path):
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    with pytest.raises(pytest.fail.Exception) as failed:
        _run("repogym tasks list --suite no-such-suite", tmp_path, env, "x.md:3: repogym tasks list --suite no-such-suite")
    assert "x.md:3: repogym tasks list --suite no-such-suite: exited 2" in str(failed.value)
    assert "unknown suite 'no-such-suite'" in str(failed.value)
