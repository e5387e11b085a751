"""Suite recipes: a committed JSON file (source, seed, parameters) that rebuilds a generated suite.

Generation is deterministic, so ``task_repos/recipes/<suite>.json`` is all that is committed; ``build``
writes the suite to ``<cache>/suites/<suite>.jsonl``, where :func:`repogym.envs.tasks.suites.list_suites` finds it.
A recipe: ``{"source": "pypi:NAME==VERSION", "seed": 0, "max_tasks": 20, "pip": [...], "max_candidates": 400}``.
"""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path
from typing import Callable

from repogym.envs.errors import ConfigError
from repogym.envs.registry import Registry
from repogym.envs.tasks.cache import cache_dir
from repogym.envs.tasks.schema import save_tasks
from repogym.envs.tasks.suites import task_repos_dir
from repogym.envs.taskgen.generate import GenerateConfig, generate


def recipes_dir() -> Path:
    return task_repos_dir() / "recipes"


def list_recipes() -> dict[str, Path]:
    """Recipe name -> file."""
    return {p.stem: p for p in sorted(recipes_dir().glob("*.json"))}


def built_suites_dir() -> Path:
    path = cache_dir() / "suites"
    path.mkdir(parents=True, exist_ok=True)
    return path


def load_recipe(name: str) -> tuple[str, GenerateConfig]:
    """``(source, config)`` of a recipe; a miss lists the recipes."""
    path = Registry("recipe", list_recipes()).resolve(name)
    data = json.loads(path.read_text())
    if "source" not in data:
        raise ConfigError(f"{path}: missing field 'source'")
    allowed = {f.name for f in fields(GenerateConfig)} - {"rewrite_problem", "sandbox"}
    unknown = set(data) - allowed - {"source", "description"}
    if unknown:
        raise ConfigError(f"{path}: unknown field(s) {sorted(unknown)}; valid: {sorted(allowed)}")
    return data["source"], GenerateConfig(**{k: v for k, v in data.items() if k in allowed})


def build(name: str, sandbox: str | None = None, progress: Callable | None = None) -> tuple[Path, dict]:
    """Generate recipe ``name`` into the cache; returns the suite file and the generation stats."""
    source, config = load_recipe(name)
    config.sandbox = sandbox
    tasks, stats = generate(source, config, progress)
    out = built_suites_dir() / f"{name}.jsonl"
    save_tasks(tasks, out)
    return out, stats
