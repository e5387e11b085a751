"""Running pytest inside a sandbox with the report plugin (``inside/repogym_report.py``).

The harness, not the repository, decides how pytest reports: each run copies the plugin under a random
module name into a fresh folder outside the repository and loads it with ``-p`` (so no file the agent adds,
say a ``repogym_report.py`` at the root, which ``python -m`` would import first, can stand in for it);
``PYTEST_ADDOPTS`` and ``PYTEST_PLUGINS`` are emptied. The plugin writes a per-test report to a random
path outside the repository, tagged with a nonce; only a report with the right nonce is read, and the exit
code of the test command is never looked at. Shared by the agent's ``run_tests`` tool and by grading.

Not guaranteed: code under test runs in the same process as the plugin, so code written to look for it
(``sys.modules``, ``/proc/self/environ``) could still forge its report. Nothing short of running tests
outside the agent's code closes that; the tamper filter keeps the cheap routes (conftest, plugins, start-up
hooks, configuration) closed.
"""

from __future__ import annotations

import json
import shlex
import uuid

from envs.errors import InfraError
from envs.sandbox.base import Sandbox


class TestRunTimeout(InfraError):
    """The test run passed its time limit (the harness's timeout, not the sandbox's failure)."""

    __test__ = False  # not a pytest test class


def run_tests(sandbox: Sandbox, test_command: str, files: list[str] | None = None, *,
              timeout: float = 900.0) -> tuple[dict[str, str], str]:
    """Run tests with the report plugin; returns ``({test id: outcome}, output tail)``.

    An empty dict means pytest wrote no trustworthy report (it crashed, or the agent's code killed it):
    every test counts as not passed. A harness timeout is a :class:`TestRunTimeout`.
    """
    nonce = uuid.uuid4().hex
    folder, plugin = f"/tmp/.repogym-{nonce}", f"repogym_report_{nonce}"
    report = f"{folder}/report.json"
    inside = getattr(sandbox, "inside_dir", "/opt/repogym")
    staged = sandbox.run(f"mkdir -m 700 {folder} && cp {inside}/repogym_report.py {folder}/{plugin}.py", timeout=60)
    if not staged.ok:
        raise InfraError("sandbox.run_tests", f"could not stage the report plugin: {staged.stderr.strip()[-400:]}")
    env = {"REPOGYM_REPORT": report, "REPOGYM_REPORT_NONCE": nonce, "PYTHONPATH": folder,
           "PYTHONDONTWRITEBYTECODE": "1", "PYTEST_ADDOPTS": "", "PYTEST_PLUGINS": ""}
    command = f"{test_command} -p {plugin} " + " ".join(shlex.quote(f) for f in files or [])
    result = sandbox.run(command, timeout=timeout, env=env, output_limit=256 * 1024)
    log = (result.stdout + result.stderr)[-4000:]
    if result.timed_out:
        raise TestRunTimeout("sandbox.run_tests", f"tests ran past the harness timeout of {timeout:.0f}s")
    raw = sandbox.run(f"cat {report}; rm -rf {folder}", timeout=60, output_limit=16 << 20)
    try:
        data = json.loads(raw.stdout) if raw.stdout.strip() else {}
    except json.JSONDecodeError:
        data = {}
    if not isinstance(data, dict) or data.get("nonce") != nonce:
        return {}, log
    return {str(k): str(v) for k, v in data.get("tests", {}).items()}, log
