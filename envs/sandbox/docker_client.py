"""The one docker SDK client of a process, shared by the docker backend, its images and ``repogym gc``.

Its own module so that :mod:`.docker` (which builds images on demand) and :mod:`.images` (which needs the
client) import it rather than each other. The docker SDK is imported here, on first use, and only here
decides what a missing SDK or daemon looks like: :class:`SandboxUnavailable` saying which.
"""

from __future__ import annotations

import functools

from repogym.envs.core.errors import SandboxUnavailable


@functools.lru_cache(maxsize=1)
def docker_client():
    """A docker SDK client, or :class:`SandboxUnavailable` saying why not."""
    try:
        import docker
    except ImportError:
        raise SandboxUnavailable("sandbox.docker", "the docker SDK is not installed: pip install docker") from None
    try:
        client = docker.from_env(timeout=120)
        client.ping()
    except daemon_errors() as exc:  # the Docker daemon: not running, connection refused, permission denied
        raise SandboxUnavailable("sandbox.docker", f"no Docker daemon answers: {exc}") from None
    return client


def daemon_errors() -> tuple[type[Exception], ...]:
    """What the docker SDK raises when the Docker daemon or the connection to it fails (not for a bug of ours):
    ``docker.errors.DockerException`` (``APIError``, ``NotFound``, ...) and ``OSError`` (requests' connection errors
    and timeouts are among them). For ``except`` clauses at the daemon's boundary; without the SDK, ``OSError``."""
    try:
        import docker.errors
    except ImportError:  # no SDK: nothing of it can have raised
        return (OSError,)
    return (docker.errors.DockerException, OSError)
