"""The no-leak check: a fresh agent sandbox holds no way to the fix.

:func:`find_leaks` starts a sandbox exactly as an episode would, loads the task's base, and looks for what
must not be there:

- in the git store: more than one commit (a parent, other branches, tags of other commits, stash, notes,
  reflog entries, unreachable or packed objects of other commits), or any object holding a line the gold
  patch or the hidden ``test_patch`` adds;
- on the filesystem the agent can read (every top-level folder but ``/proc``, ``/sys``, ``/dev``, ``/usr``,
  symbolic links (``/lib`` is ``/usr/lib`` on merged-usr systems) and the repository's work tree (the sandbox's
  ``repo_dir``), plus the interpreter's ``sys.path`` and ``/usr/local``): a file holding
  such lines, say the original package installed in site-packages, a task file, or a source checkout
  (source, text, task and patch files: :data:`TEXT_FILES`).

The lines searched for are the added lines of both patches that are long enough to mean something
(:data:`MIN_LINE`) and that occur nowhere in the base tree. A file counts as a leak when it holds half of
a patch's lines (:data:`SHARE`, and at least two), or one of at least :data:`LONG_LINE` characters, so a few
short common lines in an unrelated library (the standard library has ``if not values:``) do not.
A leak in a copy that pip vendors (``.../pip/_vendor/requests/models.py`` on a task of requests: a later release,
the fix included) has a remedy, :func:`vendored_copies` names it: the ``setup.hide_vendored`` key, which makes
the environment image delete that copy (:mod:`repogym.envs.sandbox.images`).
Not guaranteed: a fix written down in other words (or compressed) is not found; this is a tripwire for
the ways tasks have actually leaked, not a proof.
"""

from __future__ import annotations

import builtins
import io
import keyword
import math
import re
import shlex
import tarfile
import uuid
from pathlib import PurePosixPath
from typing import Callable

from repogym.envs.sandbox.base import Sandbox
from repogym.envs.tasks.repos import snapshot
from repogym.envs.tasks.schema import Task

TEXT_FILES = ("*.py", "*.pyi", "*.pyx", "*.txt", "*.json", "*.jsonl", "*.patch", "*.diff", "*.cfg", "*.toml",
              "*.ini", "*.md", "*.rst", "*.yaml", "*.yml", "*.csv", "*.html")
"""What the filesystem search reads: source, task and patch files (binaries cannot hold a readable fix)."""
MIN_LINE = 12
"""Characters (stripped) an added line needs to be searched for."""
LONG_LINE = 28
"""A file holding one searched line this long is a leak; shorter ones (``if not values:``) count only together."""
SHARE = 0.5
"""Shorter lines make a leak when a file holds at least this share of a patch's searched lines (and two): a big
library holds a few of a patch's short lines by chance (pandas has ``return self.copy()``), a copy of the fix
holds most of them."""
KEEP_REFS = {"refs/heads/main", "refs/tags/repogym-base"}


# An import names a module that is installed anyway (``from babel.messages.catalog import Catalog`` is in babel).
_IMPORT = re.compile(r"(from\s+[\w.]+\s+)?import\s")
_COMMON = set(keyword.kwlist) | set(dir(builtins)) | {"self", "cls", "args", "kwargs"}


_VENDORED = re.compile(r"/pip/_vendor/([A-Za-z_]\w*)(?:/|\.py )")


def vendored_copies(problems: list[str]) -> list[str]:
    """The packages whose copies in pip's ``_vendor`` the leak ``problems`` (of :func:`find_leaks`) name, sorted."""
    return sorted({m.group(1) for problem in problems for m in [_VENDORED.search(problem)] if m})


def added_lines(patch: str, base_text: str) -> list[str]:
    """Distinctive lines ``patch`` adds: stripped, at least :data:`MIN_LINE` long, naming something beyond
    keywords and builtins (``return False`` is in every library), not an import, and found nowhere in ``base_text``."""
    found = []
    for line in patch.splitlines():
        if not line.startswith("+") or line.startswith("+++"):
            continue
        text = line[1:].strip()
        names = set(re.findall(r"[A-Za-z_]\w*", text)) - _COMMON
        if len(text) >= MIN_LINE and names and text not in base_text and not _IMPORT.match(text):
            found.append(text)
    return sorted(set(found))


def _base_text(task: Task) -> str:
    with tarfile.open(fileobj=io.BytesIO(snapshot(task).tar)) as tar:
        return "\n".join(tar.extractfile(m).read().decode("utf-8", errors="replace")
                         for m in tar.getmembers() if m.isfile())


def find_leaks(task: Task, make_sandbox: Callable[[], Sandbox], *, roots: list[str] | None = None,
               timeout: float = 600.0) -> list[str]:
    """Problems found in a fresh sandbox from ``make_sandbox`` with the task loaded; ``[]`` when none.

    ``roots``: folders to search instead of the default (everything readable, see the module docstring)."""
    sandbox = make_sandbox()
    try:
        sandbox.load(snapshot(task))
        return inspect_sandbox(sandbox, task, roots=roots, timeout=timeout)
    finally:
        sandbox.close()


def inspect_sandbox(sandbox: Sandbox, task: Task, *, roots: list[str] | None = None,
                    timeout: float = 600.0) -> list[str]:
    """The no-leak check of a sandbox that holds ``task``'s base (fresh, or just reset)."""
    base = _base_text(task)
    kinds = {"gold patch": added_lines(task.patch, base), "hidden tests": added_lines(task.test_patch, base)}
    patterns = sorted({p for lines in kinds.values() for p in lines})
    problems = _git_structure(sandbox)
    if not patterns:
        return problems
    folder = f"/tmp/.repogym-leaks-{uuid.uuid4().hex}"
    # A quoted here-document: no pattern needs shell quoting.
    staged = sandbox.run(f"mkdir -p {folder} && cat > {folder}/patterns <<'REPOGYM_EOF'\n"
                         + "\n".join(patterns) + "\nREPOGYM_EOF", timeout=60)
    if not staged.ok:
        return problems + [f"leak check could not stage its patterns: {staged.stderr.strip()[-300:]}"]
    try:
        in_git = sandbox.run(f"git cat-file --batch-all-objects --batch | grep -aoF -f {folder}/patterns | sort -u",
                             timeout=timeout, output_limit=1 << 20)
        hits = set(in_git.stdout.splitlines())
        for kind, lines in kinds.items():
            if hits & set(lines):
                problems.append(f"git store holds {len(hits & set(lines))} line(s) of the {kind}: "
                                f"{sorted(hits & set(lines))[:3]}")
        return problems + _filesystem(sandbox, folder, kinds, roots, timeout)
    finally:
        sandbox.run(f"rm -rf {folder}", timeout=60)


def _git_structure(sandbox: Sandbox) -> list[str]:
    problems = []
    commits = sandbox.run("git cat-file --batch-all-objects --batch-check='%(objecttype)' | grep -c '^commit$'")
    if commits.stdout.strip() != "1":
        problems.append(f"git store holds {commits.stdout.strip() or '?'} commits (expected 1)")
    refs = set(sandbox.run("git for-each-ref --format='%(refname)'").stdout.split())
    if refs - KEEP_REFS:
        problems.append(f"git store has extra refs: {sorted(refs - KEEP_REFS)[:5]}")
    reachable = sandbox.run("git rev-list --all --reflog | sort -u | wc -l").stdout.strip()
    if reachable != "1":
        problems.append(f"refs and reflog reach {reachable} commits (expected 1)")
    parents = sandbox.run("git rev-list --parents -n 1 HEAD").stdout.split()
    if len(parents) != 1:
        problems.append(f"the base commit has a parent: {parents[1:]}")
    return problems


def _filesystem(sandbox: Sandbox, folder: str, kinds: dict[str, list[str]], roots: list[str] | None,
                timeout: float) -> list[str]:
    if roots is None:
        # The work tree (/repo, or a dataset image's workdir) holds the base, where no searched line is.
        work_tree = shlex.quote(sandbox.repo_dir)
        listed = sandbox.run(f"for d in /*; do case $d in /proc|/sys|/dev|/usr|/repo|{work_tree}) ;; *) [ -d \"$d\" ] && [ ! -L \"$d\" ] && echo \"$d\";; "
                             "esac; done; [ -d /usr/local ] && echo /usr/local; "
                             "python -c 'import sys; print(chr(10).join(p for p in sys.path if p))' 2>/dev/null")
        roots = listed.stdout.splitlines()
    # Each folder once: a root inside another root is searched with it.
    paths = sorted({PurePosixPath(r) for r in roots if r.startswith("/")})
    roots = [str(r) for r in paths if not any(r != o and r.is_relative_to(o) for o in paths)]
    includes = " ".join(f"--include='{glob}'" for glob in TEXT_FILES)
    # grep -o prints "file:match" for every hit; the distinct matches per file decide.
    found = sandbox.run(f"grep -rIoFs --exclude-dir='.repogym-leaks-*' {includes} -f {folder}/patterns -- "
                        + " ".join(shlex.quote(r) for r in roots) + " | sort -u | head -20000",
                        timeout=timeout, output_limit=8 << 20)
    per_file: dict[str, set[str]] = {}
    patterns = sorted({p for lines in kinds.values() for p in lines}, key=len, reverse=True)
    for line in found.stdout.splitlines():
        for pattern in patterns:
            if line.endswith(":" + pattern):
                per_file.setdefault(line[:-len(pattern) - 1], set()).add(pattern)
                break
    problems = []
    for path, hits in sorted(per_file.items()):
        for kind, lines in kinds.items():
            matched = hits & set(lines)
            if len(matched) >= max(2, math.ceil(len(set(lines)) * SHARE)) or any(len(m) >= LONG_LINE for m in matched):
                problems.append(f"{path} holds {len(matched)} line(s) of the {kind}: {sorted(matched)[:3]}")
    return problems
