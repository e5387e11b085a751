"""The stack's layers: each package imports only layers below it, and no module import cycle hides anywhere.

Imports are read from the source (module-level and function-level alike: a cycle hidden in a function body
is still a cycle). ``docs/architecture.md`` draws the same layers. Every module of every package is checked,
the scripts that run inside sandboxes included: they import only the standard library and each other, and the
host imports none of them but the few named in :data:`SHARED_WITH_HOST`.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FOLDERS = {"envs": "repogym.envs", "agents": "repogym.agents", "trainer": "repogym.trainer", "bench": "repogym.bench",
           "integrations": "repogym.integrations", "repogym": "repogym"}
# Files that run inside sandboxes or as scripts (``python -I``): they import only the standard library and each other.
STDLIB_ONLY = ("repogym.envs.sandbox.inside", "repogym.envs.sandbox.local_launch",
               "repogym.envs.analysis.coverage_probe")  # the probe runs in the sandbox too
# Of those, the only ones the host may import (each stdlib only, so importing it runs nothing of a sandbox's):
# local_launch's HOST_UID, the uid the launcher drops to, which the local backend also needs.
SHARED_WITH_HOST = ("repogym.envs.sandbox.local_launch",)

# Bottom to top. A module may import its own unit, or a unit of a lower layer; units of one layer are
# independent of each other (bench and trainer do not import each other, nor do tasks and analysis).
# Sandboxes sit below tasks: what a sandbox takes in (the snapshot, the install steps) is defined at its level
# (envs/sandbox/snapshot.py, install.py) and the tasks layer builds it, so no sandbox module reads tasks' meaning.
LAYERS: list[tuple[str, ...]] = [
    ("repogym.envs.core", "repogym.envs.core.errors", "repogym.envs.core.status",
     "repogym.envs.core.episode_state", "repogym.envs.core.paths"),  # the vocabulary; repogym's folders
    ("repogym.envs.core.registry", "repogym.envs.core.rates",
     "repogym.envs.core.bugs"),                              # the one registry idiom; success rates; our own bugs
    ("repogym.envs.sandbox",),                               # where commands run
    ("repogym.envs.tasks", "repogym.envs.analysis"),         # task records and repositories; static analysis
    ("repogym.envs.rewards",),                               # grading in a pristine sandbox, reward components
    ("repogym.envs.tools",),                                 # what the agent calls
    ("repogym.envs.actions", "repogym.envs.step_info"),      # model text to tool calls; the shape of ``info``
    ("repogym.envs.repo_env", "repogym.envs.taskgen"),       # the Gymnasium env; the task generator
    ("repogym.envs",),                                       # the package: registers the env id
    ("repogym.agents",),
    ("repogym.bench", "repogym.trainer"),
    ("repogym.integrations",),                               # repogym inside other trainers and harnesses
    ("repogym.cli",),
    ("repogym",),
]


def _modules() -> dict[str, Path]:
    found = {}
    for folder, name in FOLDERS.items():
        for path in (REPO / folder).rglob("*.py"):
            parts = path.relative_to(REPO / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((name, *parts))] = path
    return found


def _is_stdlib_only(module: str) -> bool:
    return any(module == m or module.startswith(m + ".") for m in STDLIB_ONLY)


def _all_imports(path: Path) -> set[str]:
    """Every module name ``path`` imports, anywhere in its body (relative imports keep their leading dots)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.add("." * node.level + (node.module or ""))
    return found


def _imports(module: str, path: Path, known: set[str]) -> set[str]:
    """The repogym modules ``module`` imports, anywhere in its body (``from x import y`` counts y if a module)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known)
    return {m for m in found if m in known and m != module}


def _unit(module: str) -> tuple[int, str]:
    """The layer index and unit (the longest prefix named in LAYERS) of a module."""
    best = None
    for index, units in enumerate(LAYERS):
        for unit in units:
            if (module == unit or module.startswith(unit + ".")) and (best is None or len(unit) > len(best[1])):
                best = (index, unit)
    assert best is not None, f"{module} is in no layer: add it to LAYERS and to docs/architecture.md"
    return best


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    modules = _modules()
    return {m: _imports(m, p, set(modules)) for m, p in modules.items()}


def _upward(graph: dict[str, set[str]]) -> list[str]:
    wrong = []
    for module, targets in sorted(graph.items()):
        layer, unit = _unit(module)
        for target in sorted(targets):
            target_layer, target_unit = _unit(target)
            if target_unit != unit and target_layer >= layer:
                wrong.append(f"{module} ({unit}) imports {target} ({target_unit}), not a lower layer")
    return wrong


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    # Tarjan's strongly connected components: any component of more than one module is a cycle.
    index, low, stack, on_stack, cycles, counter = {}, {}, [], set(), [], [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def _outside_stdlib(modules: dict[str, Path]) -> list[str]:
    """What the in-sandbox scripts import besides the standard library and each other."""
    wrong = []
    for module, path in sorted(modules.items()):
        if not _is_stdlib_only(module):
            continue
        for name in sorted(_all_imports(path)):
            if name.startswith(".") or not (name.split(".")[0] in sys.stdlib_module_names or _is_stdlib_only(name)):
                wrong.append(f"{module} imports {name}: a script run in a sandbox imports only the stdlib and the "
                             "other scripts, by absolute name")
    return wrong


def _host_imports_of_scripts(graph: dict[str, set[str]]) -> list[str]:
    """Host modules that import an in-sandbox script other than those named in :data:`SHARED_WITH_HOST`."""
    return [f"{module} imports {target}: the host imports no in-sandbox script but {', '.join(SHARED_WITH_HOST)}"
            for module, targets in sorted(graph.items()) if not _is_stdlib_only(module)
            for target in sorted(targets)
            if _is_stdlib_only(target) and target not in SHARED_WITH_HOST
            and not any(s.startswith(target + ".") for s in SHARED_WITH_HOST)]


def test_every_module_is_in_a_layer_the_in_sandbox_scripts_included():
    modules = _modules()
    assert any(m.startswith("repogym.envs.sandbox.inside.") for m in modules)
    for module in modules:
        _unit(module)  # fails naming the module when it is in no layer


def test_in_sandbox_scripts_import_only_the_stdlib_and_each_other():
    wrong = _outside_stdlib(_modules())
    assert not wrong, "\n".join(wrong)


def test_the_host_imports_only_the_named_shared_scripts(graph):
    wrong = _host_imports_of_scripts(graph)
    assert not wrong, "\n".join(wrong)
    for shared in SHARED_WITH_HOST:
        assert not _outside_stdlib({shared: _modules()[shared]}), f"{shared} is shared with the host: stdlib only"


def test_sandbox_layer_imports_nothing_of_tasks(graph):
    wrong = [f"{m} imports {t}" for m, ts in sorted(graph.items()) if m.startswith("repogym.envs.sandbox")
             for t in sorted(ts) if t.startswith("repogym.envs.tasks")]
    assert not wrong, "\n".join(wrong)


def _runner():
    """The in-sandbox runner loaded from its file, as the sandbox runs it (never imported by the host)."""
    path = REPO / "envs" / "sandbox" / "inside" / "runner.py"
    spec = importlib.util.spec_from_file_location("_repogym_runner_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_hosts_copies_of_the_runners_helpers_agree_with_it():
    from repogym.envs.sandbox import base, install
    from repogym.envs.tools.files import looks_binary

    runner = _runner()
    samples = [b"", b"plain text\n", b"a\0b", "h\u00e9llo w\u00f6rld\n".encode(), "\u00e9".encode()[:1] * 3,
               bytes(range(256)), b"x" * 9000 + b"\0", b"\xff" * 10 + b"y" * 190, b"\xff" * 12 + b"y" * 188,
               "\u4e2d\u6587".encode() * 2000, b"ok" * 4095 + b"\xe4"]
    for data in samples:
        assert looks_binary(data) == runner.looks_binary(data), data[:40]
    assert looks_binary(b"a\0b") and not looks_binary(b"plain text\n")  # the samples hold both answers
    assert runner.INSTALL_DIR == install.INSTALL_DIR
    assert runner.INSTALL_TIMEOUT == base.INSTALL_TIMEOUT


def test_each_module_imports_only_its_unit_or_lower_layers(graph):
    wrong = _upward(graph)
    assert not wrong, "\n".join(wrong)


def test_no_import_cycle_between_modules(graph):
    cycles = _cycles(graph)
    assert not cycles, f"import cycles: {cycles}"


def test_the_checks_catch_an_upward_import_a_sibling_import_and_a_cycle():
    assert _upward({"repogym.envs.sandbox.docker": {"repogym.agents.null"}})
    assert _upward({"repogym.bench.db": {"repogym.trainer.fleet"}})  # same layer, another unit
    assert not _upward({"repogym.trainer.fleet": {"repogym.agents.null", "repogym.trainer.config"}})
    cyclic = {"repogym.envs.tasks.a": {"repogym.envs.tasks.b"}, "repogym.envs.tasks.b": {"repogym.envs.tasks.a"}}
    assert _cycles(cyclic) == [["repogym.envs.tasks.a", "repogym.envs.tasks.b"]]
    assert _cycles({"repogym.envs.tasks.a": {"repogym.envs.tasks.b"}, "repogym.envs.tasks.b": set()}) == []


def test_the_boundary_checks_catch_a_host_import_of_a_script_and_a_script_importing_repogym(tmp_path):
    runner = "repogym.envs.sandbox.inside.runner"
    assert _host_imports_of_scripts({"repogym.envs.tools.files": {runner}})
    assert not _host_imports_of_scripts({"repogym.envs.sandbox.local": {"repogym.envs.sandbox.local_launch"}})
    assert not _host_imports_of_scripts({runner: {"repogym.envs.sandbox.inside.repogym_report"}})
    script = tmp_path / "script.py"
    script.write_text("import json\nfrom repogym.envs.core.errors import InfraError\n")
    assert _outside_stdlib({runner: script}) == [f"{runner} imports repogym.envs.core.errors: a script run in a "
                                                 "sandbox imports only the stdlib and the other scripts, by absolute name"]
    script.write_text("import json, os.path\nfrom . import repogym_report\n")
    assert len(_outside_stdlib({runner: script})) == 1  # a relative import does not work under python -I
    script.write_text("import json, os.path\nimport yaml\n")
    assert len(_outside_stdlib({runner: script})) == 1
    assert not _outside_stdlib({"repogym.envs.sandbox.local": script})  # the host is not held to the stdlib
