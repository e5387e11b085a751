"""Compile an interpreter's own files (standard library, site-packages) into a bytecode cache prefix.

Test runs read bytecode only from a harness-owned prefix (``PYTHONPYCACHEPREFIX``), never from a ``__pycache__`` of
the agent's tree. A fresh, empty prefix per run makes every run compile pytest and the standard library from
source (most of a small suite's time); this fills a prefix, once per image or environment, that sandboxes then
mount read-only. The repository is never in it: it is compiled by each run itself, as before.

Run by the harness before any agent exists, with the interpreter the tests use (standard library only)::

    python repogym_bytecode.py OUT [--exclude DIR]... [SOURCE=VIEW]...

``SOURCE=VIEW``: compile the ``.py`` files under the folder ``SOURCE`` as the sandbox sees them, at ``VIEW``
(``SOURCE`` is where they are now); with no pair, every folder on this interpreter's ``sys.path``, as it is.
Prints ``compiled N files`` on success; files that do not compile (Python 2 leftovers) are skipped.
"""

import importlib.util
import os
import py_compile
import sys
from concurrent.futures import ProcessPoolExecutor

# Folders of the standard library no test imports, and that take a while to compile.
SKIPPED = {"test", "tests", "idlelib", "tkinter", "turtledemo", "lib2to3", "ensurepip", "pydoc_data", "__pycache__"}


def targets(pairs, excluded):
    """``(source file, its path in the sandbox)`` for every ``.py`` file under the pairs' folders."""
    seen = set()
    for source, view in pairs:
        for folder, dirs, files in os.walk(source):
            dirs[:] = sorted(d for d in dirs if d not in SKIPPED and not d.startswith("."))
            in_view = os.path.join(view, os.path.relpath(folder, source)) if folder != source else view
            in_view = os.path.normpath(in_view)
            if any(in_view == e or in_view.startswith(e.rstrip("/") + "/") for e in excluded):
                dirs[:] = []
                continue
            for name in files:
                if name.endswith(".py"):
                    target = os.path.join(in_view, name)
                    if target not in seen:
                        seen.add(target)
                        yield os.path.join(folder, name), target


def compile_one(job):
    source, view, out = job
    sys.pycache_prefix = out
    try:
        py_compile.compile(source, cfile=importlib.util.cache_from_source(view), dfile=view, doraise=True,
                           invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)
        return 1
    except (py_compile.PyCompileError, OSError, ValueError, SyntaxError):
        return 0


def main(argv):
    if not argv or argv[0].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 2
    out, pairs, excluded = os.path.abspath(argv[0]), [], [os.path.abspath(argv[0])]
    rest = argv[1:]
    while rest:
        arg = rest.pop(0)
        if arg == "--exclude" and rest:
            excluded.append(os.path.abspath(rest.pop(0)))
        elif "=" in arg:
            source, view = arg.split("=", 1)
            pairs.append((source, view))
        else:
            print(f"unexpected argument {arg!r}", file=sys.stderr)
            return 2
    if not pairs:
        here = os.getcwd()
        pairs = [(p, p) for p in sys.path if p and os.path.isdir(p) and os.path.abspath(p) != here]
    jobs = [(source, view, out) for source, view in targets(pairs, excluded)]
    with ProcessPoolExecutor(max_workers=max(1, min(4, os.cpu_count() or 1))) as pool:
        done = sum(pool.map(compile_one, jobs, chunksize=64))
    print(f"compiled {done} files")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
