"""Running pytest inside a sandbox with the report plugin (``inside/repogym_report.py``).

The plugin writes a per-test report to a random path outside the repository, tagged with a nonce; only
a report with the right nonce is read. Shared by the agent's ``run_tests`` tool and by grading.
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
    every test counts as not passed. A harness timeout is an :class:`InfraError`.
    """
    nonce = uuid.uuid4().hex
    report = f"/tmp/.repogym-report-{nonce}.json"
    inside = getattr(sandbox, "inside_dir", "/opt/repogym")
    env = {"REPOGYM_REPORT": report, "REPOGYM_REPORT_NONCE": nonce, "PYTHONPATH": inside,
           "PYTHONDONTWRITEBYTECODE": "1"}
    command = f"{test_command} -p repogym_report " + " ".join(shlex.quote(f) for f in files or [])
    result = sandbox.run(command, timeout=timeout, env=env, output_limit=256 * 1024)
    log = (result.stdout + result.stderr)[-4000:]
    if result.timed_out:
        raise TestRunTimeout("sandbox.run_tests", f"tests ran past the harness timeout of {timeout:.0f}s")
    raw = sandbox.run(f"cat {report} && rm -f {report}", timeout=60, output_limit=16 << 20)
    try:
        data = json.loads(raw.stdout) if raw.ok else {}
    except json.JSONDecodeError:
        data = {}
    if data.get("nonce") != nonce:
        return {}, log
    return {str(k): str(v) for k, v in data.get("tests", {}).items()}, log
