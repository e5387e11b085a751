"""The stack's layers: each package imports only layers below it, and no module import cycle hides anywhere.

Imports are read from the source (module-level and function-level alike: a cycle hidden in a function body
is still a cycle). ``docs/architecture.md`` draws the same layers.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FOLDERS = {"envs": "repogym.envs", "agents": "repogym.agents", "trainer": "repogym.trainer", "bench": "repogym.bench",
           "integrations": "repogym.integrations", "repogym": "repogym"}
# Files that run inside sandboxes or as scripts: stdlib only, never imported by the host.
NOT_IMPORTED = ("repogym.envs.sandbox.inside", "repogym.envs.sandbox.local_launch")

# Bottom to top. A module may import its own unit, or a unit of a lower layer; units of one layer are
# independent of each other (bench and trainer do not import each other, nor do tasks and analysis).
LAYERS: list[tuple[str, ...]] = [
    ("repogym.envs.core", "repogym.envs.core.errors", "repogym.envs.core.status",
     "repogym.envs.core.episode_state"),                     # the vocabulary
    ("repogym.envs.core.registry", "repogym.envs.core.rates"),  # the one registry idiom; success rates
    ("repogym.envs.tasks", "repogym.envs.analysis"),         # task records and repositories; static analysis
    ("repogym.envs.sandbox",),                               # where commands run
    ("repogym.envs.rewards",),                               # grading in a pristine sandbox, reward components
    ("repogym.envs.tools",),                                 # what the agent calls
    ("repogym.envs.actions",),                               # model text to tool calls
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
            module = ".".join((name, *parts))
            if not module.startswith(NOT_IMPORTED):
                found[module] = path
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
