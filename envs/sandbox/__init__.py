"""Sandboxes: the ``Sandbox`` protocol and its backends, found by name.

``make_sandbox("docker" | "local", config)``; ``default_backend()`` picks docker when a daemon answers
and local otherwise (saying so once). Backends import lazily, so the docker SDK stays optional.
``sandbox_factory`` gives a task's sandboxes: under docker, its dataset image's derivative when
``setup.image`` names one (:mod:`repogym.envs.sandbox.prebuilt`; an explicit ``SandboxConfig.image`` wins),
else repogym's environment image; any other backend refuses a task with ``setup.image``.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
from pathlib import Path
from typing import Any

from repogym.envs.core.errors import ConfigError, SandboxRequestError
from repogym.envs.core.registry import Registry
from repogym.envs.sandbox.base import CommandResult, Sandbox, SandboxConfig

BACKENDS: Registry[type] = Registry("sandbox backend", {
    "docker": "repogym.envs.sandbox.docker:DockerSandbox",
    "local": "repogym.envs.sandbox.local:LocalSandbox",
})
_noted = False

__all__ = ["Sandbox", "SandboxConfig", "CommandResult", "SandboxRequestError", "make_sandbox", "default_backend",
           "backend_unavailable", "BACKENDS"]


def _module(name: str):
    """The module of backend ``name`` (it defines ``available()``); a miss lists the backends."""
    return importlib.import_module(BACKENDS.resolve(name).__module__)


def backend_unavailable(name: str) -> str | None:
    """``None`` when backend ``name`` can run here, else why not."""
    return _module(name).available()


def default_backend() -> str:
    """``docker`` when a Docker daemon answers, else ``local`` (with a one-line note on stderr)."""
    global _noted
    why = backend_unavailable("docker")
    if why is None:
        return "docker"
    if not _noted:
        print("repogym: no Docker daemon answers; using the local (bubblewrap) sandbox", file=sys.stderr)
        _noted = True
    return "local"


def make_sandbox(name: str | None = None, config: SandboxConfig | None = None, **kwargs: Any) -> Sandbox:
    """A new sandbox of backend ``name`` (``None``: the default backend)."""
    name = name or default_backend()
    return BACKENDS.resolve(name)(config, **kwargs)


def sandbox_factory(backend: str, setup: dict | None = None, config: SandboxConfig | None = None):
    """A no-argument callable making sandboxes of ``backend`` for a task ``setup`` (builds the image once).

    ``setup.cpus`` raises the sandbox's CPU limit to that many (tests that need parallel workers)."""
    config = config or SandboxConfig()
    wanted_cpus = (setup or {}).get("cpus")
    if wanted_cpus is not None:
        if isinstance(wanted_cpus, bool) or not isinstance(wanted_cpus, (int, float)) or not 0 < wanted_cpus <= 64:
            raise ConfigError(f"setup.cpus: expected a number of CPUs in (0, 64], got {wanted_cpus!r}")
        config = dataclasses.replace(config, cpus=max(config.cpus, float(wanted_cpus)))
    if backend == "docker" and (setup or {}).get("image") and not config.image:
        from repogym.envs.sandbox.prebuilt import ensure_prebuilt_image
        prebuilt = ensure_prebuilt_image(setup)
        return lambda: make_sandbox("docker", config, image=prebuilt.tag, repo_dir=prebuilt.workdir,
                                    python=prebuilt.python)
    if backend == "docker":
        from repogym.envs.sandbox.images import ensure_env_image
        image = config.image or ensure_env_image(setup or {})
        return lambda: make_sandbox("docker", config, image=image)
    if (setup or {}).get("image"):
        raise ConfigError(f"the task runs in its own image {setup['image']}, which needs the docker backend "
                          f"(--sandbox docker); the {backend} backend cannot run it")
    _module(backend)
    _check_python(backend, setup or {})
    if (setup or {}).get("hide_vendored"):
        # The sandbox sees the host's /usr, whose pip may vendor the same copy: nothing here can take it away.
        raise ConfigError(f"the task hides pip's vendored {setup['hide_vendored']} (setup.hide_vendored), which only "
                          f"an image can do: the {backend} sandbox shows the host's own files; use the docker backend "
                          "(--sandbox docker)")
    _check_toolchain(backend, setup or {})
    if backend == "local":
        from repogym.envs.sandbox.local_env import ensure_local_env
        python_env = ensure_local_env(setup or {})
        return lambda: make_sandbox("local", config, python_env=python_env)
    return lambda: make_sandbox(backend, config)


def _check_toolchain(backend: str, setup: dict) -> None:
    """A task that builds extensions (``setup.toolchain``) runs locally only where the host has what the toolchain
    image carries that such builds cannot do without: a C compiler and this Python's headers."""
    from repogym.envs.sandbox.images import toolchain_of
    toolchain = toolchain_of(setup)
    if toolchain is None:
        return
    import shutil
    import sysconfig
    missing = [what for what, there in (("a C compiler (cc)", shutil.which("cc") or shutil.which("gcc")),
                                        ("Python.h", Path(sysconfig.get_paths()["include"], "Python.h").is_file()))
               if not there]
    if missing:
        raise ConfigError(f"the task builds extensions (setup.toolchain: {toolchain!r}) and the {backend} sandbox uses "
                          f"the host's tools, which lack {' and '.join(missing)}: use the docker backend (--sandbox "
                          "docker), whose toolchain image has them, or install them here")


def _check_python(backend: str, setup: dict) -> None:
    # The local backend runs this interpreter; a task made for another Python would fail for the wrong reason.
    wanted, here = setup.get("python"), f"{sys.version_info.major}.{sys.version_info.minor}"
    if wanted and str(wanted) != here:
        raise ConfigError(f"the task needs Python {wanted}; the {backend} sandbox runs this interpreter's {here}: "
                          "use the docker backend (--sandbox docker), which builds an image for it")
