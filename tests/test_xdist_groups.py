"""The main suite's xdist groups (tests/conftest.py) hold under the installed pytest and pytest-xdist: a file's tests
share a worker and every Ray test the same one. A pytest release once undid them without a word (every test became
its own group), and the suite grew by minutes: module fixtures rebuilt per worker, Ray clusters started at once."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("xdist")

CHECKOUT = Path(__file__).resolve().parents[1]

SAMPLE = '''\
import pytest


def test_{name}_one():
    pass


def test_{name}_two():
    pass


@pytest.mark.ray
def test_{name}_on_ray():
    pass
'''


def test_a_files_tests_share_a_worker_and_every_ray_test_shares_one(tmp_path: Path):
    for name in ("alpha", "beta", "gamma"):
        (tmp_path / f"test_{name}.py").write_text(SAMPLE.format(name=name))
    # The suite's own hooks, unchanged, over a sample with three files.
    (tmp_path / "conftest.py").write_text("from tests.conftest import pytest_collection_modifyitems, pytest_configure\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    ray: a Ray test\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(CHECKOUT), os.environ.get("PYTHONPATH")]))}
    env.pop("PYTEST_ADDOPTS", None)
    run = subprocess.run([sys.executable, "-m", "pytest", "-n", "3", "--dist", "loadgroup", "-v", "-p",
                          "no:cacheprovider", "-p", "no:randomly"], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    ran = {test: worker for worker, test in re.findall(r"^\[(gw\d+)\] .*?PASSED (\S+)", run.stdout, re.M)}
    assert len(ran) == 9, run.stdout
    workers: dict[str, set[str]] = {}
    for test, worker in ran.items():
        group = test.split("@")[-1] if "@" in test else test  # xdist names a grouped test `id@group`
        workers.setdefault(group, set()).add(worker)
    assert set(workers) == {"ray", "test_alpha.py", "test_beta.py", "test_gamma.py"}, sorted(ran)
    assert all(len(where) == 1 for where in workers.values()), workers


def test_the_queue_durations_come_from_a_durations_report(tmp_path: Path):
    """scripts/durations.py sums each test's phases, drops xdist's `@group` suffix and keeps the long ones."""
    log = tmp_path / "ci.log"
    log.write_text("\n".join([
        "============================= slowest durations ==============================",
        "500.50s call     tests/test_a.py::test_sweep[docker]@tests/test_a.py::test_sweep[docker]",
        "60.00s setup    tests/test_b.py::test_run@ray",
        "40.40s call     tests/test_b.py::test_run@ray",
        "9.00s call     tests/test_c.py::test_param[x@y]@tests/test_c.py",
        "7.90s call     tests/test_c.py::test_short@tests/test_c.py",
        "0.01s teardown tests/test_c.py::test_short@tests/test_c.py",
        "tests/test_d.py ....                                                   [100%]",
    ]))
    out = tmp_path / "durations.json"
    run = subprocess.run([sys.executable, str(CHECKOUT / "scripts" / "durations.py"), str(log), "--out", str(out)],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert json.loads(out.read_text()) == {"tests/test_a.py::test_sweep[docker]": 500, "tests/test_b.py::test_run": 100,
                                           "tests/test_c.py::test_param[x@y]": 9}
    empty = tmp_path / "empty.log"
    empty.write_text("no report here\n")
    failed = subprocess.run([sys.executable, str(CHECKOUT / "scripts" / "durations.py"), str(empty), "--out",
                             str(out)], capture_output=True, text=True, timeout=60)
    assert failed.returncode == 1 and "no --durations=0 lines" in failed.stderr
