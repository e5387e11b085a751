"""Suite recipes: a committed JSON file (source, seed, parameters) that rebuilds a generated suite.

Generation is deterministic, so ``task_repos/recipes/<suite>.json`` is all that is committed; ``build``
writes the suite to ``<cache>/suites/<suite>.jsonl``, where :func:`repogym.envs.tasks.suites.list_suites` finds it.
A recipe: ``{"source": "pypi:NAME==VERSION", "seed": 0, "max_tasks": 20, "pip": [...], "max_candidates": 400}``,
or ``{"source": "flips", ...}`` with :class:`~repogym.envs.taskgen.flips.FlipsConfig` fields for the generated
operator-flip family (two suites, ``NAME`` and ``NAME-heldout``; cheap, so :func:`ensure_suites` builds them on use).
"""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path
from typing import Callable

from repogym.envs.core.errors import ConfigError
from repogym.envs.core.paths import cache_dir, task_repos_dir
from repogym.envs.core.registry import Registry
from repogym.envs.taskgen.flips import FlipsConfig, build_flips, suite_files
from repogym.envs.taskgen.generate import GenerateConfig, generate
from repogym.envs.tasks.schema import save_tasks

FLIPS = "flips"
"""The ``source`` of an operator-flip recipe (no project to download: the projects are generated)."""


def recipes_dir() -> Path:
    return task_repos_dir() / "recipes"


def list_recipes() -> dict[str, Path]:
    """Recipe name -> file."""
    return {p.stem: p for p in sorted(recipes_dir().glob("*.json"))}


def built_suites_dir() -> Path:
    path = cache_dir() / "suites"
    path.mkdir(parents=True, exist_ok=True)
    return path


def load_recipe(name: str) -> tuple[str, GenerateConfig | FlipsConfig]:
    """``(source, config)`` of a recipe; a miss lists the recipes."""
    path = Registry("recipe", list_recipes()).resolve(name)
    data = json.loads(path.read_text())
    if "source" not in data:
        raise ConfigError(f"{path}: missing field 'source'")
    kind = FlipsConfig if data["source"] == FLIPS else GenerateConfig
    allowed = {f.name for f in fields(kind)} - {"rewrite_problem", "sandbox", "name"}
    unknown = set(data) - allowed - {"source", "description"}
    if unknown:
        raise ConfigError(f"{path}: unknown field(s) {sorted(unknown)}; valid: {sorted(allowed)}")
    config = kind(**{k: v for k, v in data.items() if k in allowed})
    if isinstance(config, FlipsConfig):
        config.name = name
    return data["source"], config


def build(name: str, sandbox: str | None = None, progress: Callable | None = None) -> tuple[Path, dict]:
    """Generate recipe ``name`` into the cache; returns the suite file and the generation stats."""
    source, config = load_recipe(name)
    if isinstance(config, FlipsConfig):
        train, heldout = build_flips(config)
        return suite_files(config)[0], {"family": FLIPS, "tasks": len(train), "heldout": len(heldout),
                                        "heldout_file": str(suite_files(config)[1])}
    config.sandbox = sandbox
    tasks, stats = generate(source, config, progress)
    out = built_suites_dir() / f"{name}.jsonl"
    save_tasks(tasks, out)
    return out, stats


def ensure_suites(names) -> None:
    """Build the operator-flip suites among ``names`` (``R`` or ``R-heldout`` of a flips recipe ``R``; cached by
    their config, so a changed recipe rebuilds); a missing suite of a project recipe says how to build it."""
    from repogym.envs.tasks.suites import list_suites

    recipes, built = list_recipes(), list_suites()
    for name in names:
        recipe = name.removesuffix("-heldout")
        if recipe not in recipes or Path(name).is_file():
            continue
        source, config = load_recipe(recipe)
        if isinstance(config, FlipsConfig):
            build_flips(config)
        elif name not in built:
            raise ConfigError(f"suite {name!r} is not built yet: build it with `repogym tasks build {name}` "
                              f"(generates it from {source}; minutes)")
