"""The local backend's virtualenvs: the task's own packages, never the host's."""

import os
from pathlib import Path

import pytest

from repogym.envs.core.errors import ConfigError
from repogym.envs.sandbox import make_sandbox, sandbox_factory
from repogym.envs.sandbox import local_env
from repogym.envs.sandbox.local_env import ensure_local_env, env_key, requirements_of
from tests.conftest import require_backend


def test_requirements_add_pytest_unless_the_setup_pins_it():
    assert requirements_of({})[0].startswith("pytest==")
    assert requirements_of({"pip": ["six==1.16.0"]})[1:] == ["six==1.16.0"]
    assert requirements_of({"pip": ["PyTest==8.3.3", "six"]}) == ["PyTest==8.3.3", "six"]
    assert env_key({}) == env_key({"source": "builtin:x"}) != env_key({"pip": ["six==1.16.0"]})


@pytest.mark.slow
def test_a_local_sandbox_sees_the_setups_packages_and_none_of_the_hosts():
    require_backend("local")
    import git  # GitPython: installed where repogym runs, in no task's setup
    assert git
    sandbox = sandbox_factory("local", {"pip": ["six==1.16.0"]})()
    try:
        result = sandbox.run("python -c 'import six, sys; print(six.__version__, sys.prefix)'; "
                             "python -c 'import git' 2>&1 | tail -n 1; pytest --version; ls -A /tmp")
    finally:
        sandbox.close()
    lines = result.stdout.splitlines()
    version, prefix = lines[0].split()
    assert lines[-1].startswith("pytest ")  # its script runs too; /tmp is empty (the env is not mounted there)
    assert version == "1.16.0" and prefix == "/.repogym-python"
    assert "No module named 'git'" in result.stdout and "pytest" in result.stdout
    plain = make_sandbox("local")
    try:
        assert "No module named 'six'" in plain.run("python -c 'import six' 2>&1 | tail -n 1").stdout
    finally:
        plain.close()


def test_an_env_is_made_once_and_a_failed_build_leaves_nothing(monkeypatch):
    first = ensure_local_env({})
    made = first.stat().st_ino
    assert ensure_local_env({}).stat().st_ino == made
    root = first.parent
    before = set(os.listdir(root))

    def boom(prefix: Path, requirements, hook):
        (prefix / "half-made").write_text("")
        raise RuntimeError("killed mid-build")

    monkeypatch.setattr(local_env, "_make", boom)
    with pytest.raises(RuntimeError):
        ensure_local_env({"pip": ["six==1.16.0", "attrs"]})
    assert set(os.listdir(root)) == before


@pytest.mark.slow
def test_a_requirement_that_has_no_wheel_is_a_clear_error():
    with pytest.raises(ConfigError, match="no-such-package-repogym-test"):
        ensure_local_env({"pip": ["no-such-package-repogym-test==0.0.1"]})
