"""Measuring a task's coverage map: the base commit's suite run once per test context, before any agent exists.

:func:`measure_coverage` loads the task's base snapshot into a fresh sandbox from the caller's factory (a
validation sandbox, never an agent's), runs the task's pytest command over the whole visible suite once plainly
(timed) and once with the harness's probe plugin (``repogym/envs/analysis/coverage_probe.py``: standard library
only, any Python from 3.8; ``sys.monitoring`` on 3.12+), reads the probe's report back and names its functions
with the base commit's index (:mod:`repogym.envs.analysis.coverage`). The map is harness data: it is saved under
repogym's cache (:func:`repogym.envs.analysis.coverage.cache_folder`), keyed by the task's snapshot key (the base tree and its install steps),
and the sandbox it was measured in is closed. :func:`cached_map` reads it back for the analysis the tools and the
reward read.

Guaranteed: a task whose runner is not pytest, or whose command the launcher cannot run (shell syntax in it), gets
no map (``None``), and nothing is cached for a run that went through no test. Not guaranteed: tests that behave
differently under a trace function (they are the base commit's own, so the plain run's outcome is the reference;
the probe's outcomes are not graded).
"""

from __future__ import annotations

import base64
import json
import re
import time
import uuid
from typing import Callable

from repogym.envs.analysis.coverage import PROBE, CoverageMap, cache_folder, cached, from_probe, load, save
from repogym.envs.core.errors import ConfigError
from repogym.envs.rewards.facts import base_index
from repogym.envs.sandbox.base import Sandbox
from repogym.envs.sandbox.testrun import environment_plugin_args, launch_command, runner_name
from repogym.envs.tasks.repos import snapshot
from repogym.envs.tasks.schema import Task

DEFAULT_TIMEOUT_S = 1800.0
_ENV = {"PYTHONDONTWRITEBYTECODE": "1", "PYTEST_ADDOPTS": "", "PYTEST_PLUGINS": "",
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}  # as graded runs see the suite


def cached_map(task: Task) -> CoverageMap | None:
    """The map measured for ``task``'s base tree, or None when none was measured."""
    return cached(snapshot(task).key)


def _command(test_command: str, folder: str, plugin: str | None) -> str:
    """The task's pytest command over the whole suite, the probe's folder on ``PYTHONPATH`` (the command's own
    ``PYTHONPATH=`` assignment kept behind it) and the probe loaded with ``-p`` when ``plugin`` is given."""
    assignments, python, mode, rest = launch_command(test_command)
    interpreter = python if mode == "--module" else "python"
    rest += " " + environment_plugin_args(interpreter)
    if plugin is None:
        return f"{assignments}{interpreter} -m pytest {rest} -p no:cacheprovider"
    if re.search(r"(^|\s)PYTHONPATH=", assignments):
        assignments = re.sub(r"(^|\s)PYTHONPATH=", rf"\1PYTHONPATH={folder}:", assignments, count=1)
    else:
        assignments += f"PYTHONPATH={folder}${{PYTHONPATH:+:$PYTHONPATH}} "
    return f"{assignments}{interpreter} -m pytest {rest} -p no:cacheprovider -p {plugin}"


def measure_coverage(task: Task, make_sandbox: Callable[[], Sandbox], *, timeout: float = DEFAULT_TIMEOUT_S,
                     use_cache: bool = True) -> CoverageMap | None:
    """The task's coverage map (from the cache when measured before), with ``info["plain_s"]`` and
    ``info["measured_s"]``: the suite's time without and with the probe. None for a task whose tests are not a
    pytest command the launcher can run. Sandbox failures raise as the sandbox raises them."""
    if runner_name(task.setup) != "pytest" or launch_command(task.test_command) is None:
        return None
    key = snapshot(task).key
    if use_cache:
        cached = load(cache_folder(), key)
        if cached is not None:
            return cached
    nonce = uuid.uuid4().hex
    plugin = f"repogym_coverage_{nonce}"
    sandbox = make_sandbox()
    try:
        sandbox.load(snapshot(task))
        start = time.monotonic()
        plain = sandbox.run(_command(task.test_command, "", None), timeout=timeout, env=_ENV, output_limit=64 * 1024)
        plain_s = time.monotonic() - start
        sandbox.reset()  # what the plain run wrote is gone before the measured one
        folder = sandbox.staging_folder(nonce) or f"/tmp/.repogym-coverage-{nonce}"
        report = f"{folder}/report.json"
        encoded = base64.b64encode(PROBE.read_bytes()).decode()
        staged = sandbox.run(f"mkdir -p {folder} && printf %s {encoded} | base64 -d > {folder}/{plugin}.py",
                             timeout=60)
        if not staged.ok:
            raise ConfigError(f"could not stage the coverage probe in the sandbox: {staged.stderr.strip()[-300:]}")
        start = time.monotonic()
        measured = sandbox.run(_command(task.test_command, folder, plugin), timeout=timeout,
                               env={**_ENV, "REPOGYM_COVERAGE_OUT": report,
                                    "REPOGYM_COVERAGE_ROOT": sandbox.repo_dir}, output_limit=64 * 1024)
        measured_s = time.monotonic() - start
        raw = sandbox.run(f"cat {report}", timeout=120, output_limit=256 << 20)
        base_tree = sandbox.base_tree
    finally:
        sandbox.close()
    errors = []
    for label, result in (("plain", plain), ("measured", measured)):
        if result.timed_out:
            errors.append(f"the {label} run passed the timeout of {timeout:.0f}s")
    try:
        data = json.loads(raw.stdout) if raw.ok and raw.stdout.strip() else None
    except json.JSONDecodeError as exc:
        data, errors = None, errors + [f"unreadable probe report: {exc}"]
    if data is None:
        cmap = CoverageMap(key=key)
        errors.append(f"the probe left no report (exit {measured.exit_code}): "
                      f"{(measured.stdout + measured.stderr).strip()[-500:]}")
    else:
        cmap = from_probe(data, base_index(task), key)
        errors += cmap.info.get("errors", [])
    cmap.info.update({"plain_s": round(plain_s, 3), "measured_s": round(measured_s, 3), "base_tree": base_tree,
                      "plain_exit": plain.exit_code, "measured_exit": measured.exit_code, "errors": errors,
                      "tests": len(cmap.tests), "functions": len(cmap.functions)})
    if cmap.tests:
        save(cmap, cache_folder())
    return cmap


def describe(cmap: CoverageMap | None) -> str:
    """One line for ``repogym validate``: the map's size and the coverage run's cost beside the plain suite's."""
    if cmap is None:
        return "coverage map: not measured (the task's tests are not a pytest command)"
    info = cmap.info
    plain, measured = info.get("plain_s"), info.get("measured_s")
    if plain is None or measured is None:
        return f"coverage map: {len(cmap.tests)} tests, {len(cmap.functions)} functions (cached)"
    ratio = f" ({measured / plain:.1f}x)" if plain else ""
    problems = f"; {info['errors'][0]}" if info.get("errors") else ""
    return (f"coverage map: {len(cmap.tests)} tests, {len(cmap.functions)} functions; suite {plain:.1f}s plain, "
            f"{measured:.1f}s measured{ratio}{problems}")


__all__ = ["DEFAULT_TIMEOUT_S", "cached_map", "describe", "measure_coverage"]
