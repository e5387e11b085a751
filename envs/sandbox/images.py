"""Docker images: a base image per Python version (pulled where a registry answers, else built offline) and
one environment image per task setup, tagged by a content hash so it is built once and reused.

Offline base: ``debootstrap --variant=minbase`` of the Debian release whose ``python3`` is the Python a task
asks for (``setup.python``, :data:`DEBIAN_FOR_PYTHON`; 3.11 when unset), with pytest and git, then ``docker
import``. Environment image: the base plus a non-root ``agent`` user, ``/repo``, the in-sandbox runner files
(stdlib only, run by the image's own interpreter) and, when a task's ``setup.pip`` names packages, a
wheelhouse that ``pip download`` fills on the host for that Python and that installs with ``--no-index``
inside (containers have no network).

Every long step (a pull, ``debootstrap``, an import, a build, the wheel downloads) says what it does and then the
time elapsed at least every 10 s (:func:`repogym.envs.core.ticker.ticking`): on the caller's ``log`` where one is
given, else on stderr.
"""

from __future__ import annotations

import hashlib
import io
import json
import shlex
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import Any, Callable

from repogym.envs.core.errors import ConfigError, SandboxError
from repogym.envs.core.ticker import ticking, to_stderr
from repogym.envs.sandbox.base import INSIDE_DIR, REPO_DIR
from repogym.envs.sandbox.docker_client import docker_client
from repogym.envs.sandbox.install import INSTALL_HOOK_NAME, environment_requirements, install_hook, install_steps
from repogym.envs.sandbox.wheelhouse import download_wheels

DEFAULT_PYTHON = "3.11"
# The Debian release whose python3 is each version: what debootstrap (and the slim images) can give offline.
DEBIAN_FOR_PYTHON = {"3.9": "bullseye", "3.11": "bookworm", "3.13": "trixie"}
DEBIAN_PACKAGES = ["python3", "python3-pytest", "python3-pip", "git", "procps", "ca-certificates"]
ENV_REPO = "repogym/env"


def python_of(setup: dict[str, Any] | None) -> str:
    """The Python version a task setup asks for (``setup.python``), checked against the ones images exist for."""
    version = str((setup or {}).get("python") or DEFAULT_PYTHON)
    if version not in DEBIAN_FOR_PYTHON:
        raise ConfigError(f"no image for Python {version!r} (setup.python); available: "
                          f"{', '.join(DEBIAN_FOR_PYTHON)}")
    return version


def base_image_name(python: str = DEFAULT_PYTHON) -> str:
    """The base image's tag for a Python version, e.g. ``repogym/base:bookworm`` for 3.11."""
    return f"repogym/base:{DEBIAN_FOR_PYTHON[python_of({'python': python})]}"


BASE_IMAGE = base_image_name()


def base_image_exists(client=None, python: str = DEFAULT_PYTHON) -> bool:
    """Whether the base image for ``python`` is present."""
    import docker
    client = client or docker_client()
    try:
        client.images.get(base_image_name(python))
        return True
    except docker.errors.ImageNotFound:
        return False


def build_base_image(*, force: bool = False, pull: bool = True, log: Callable[[str], Any] = print,
                     python: str = DEFAULT_PYTHON) -> str:
    """Make the base image for ``python``: pull an official python image where a registry answers, else debootstrap."""
    client = docker_client()
    name = base_image_name(python)
    if not force and base_image_exists(client, python):
        log(f"{name} already present")
        return name
    if pull and _try_pull(client, log, python):
        return name
    return _debootstrap_import(client, log, python)


def _try_pull(client, log, python: str) -> bool:
    import docker
    name, tag = "python", f"{python}-slim-{DEBIAN_FOR_PYTHON[python]}"
    try:
        with ticking(f"pulling {name}:{tag}", log):
            client.images.pull(name, tag=tag)
    except (docker.errors.APIError, docker.errors.DockerException, OSError) as exc:
        log(f"no registry answered for {name}:{tag} ({str(exc).splitlines()[0][:120]}); building offline")
        return False
    dockerfile = (f"FROM {name}:{tag}\nRUN apt-get update && apt-get install -y --no-install-recommends git procps "
                  "&& rm -rf /var/lib/apt/lists/* && pip install --no-cache-dir pytest\n"
                  "RUN ln -sf /usr/local/bin/python3 /usr/bin/python3 || true\n")
    _build(client, dockerfile, {}, base_image_name(python), network=True, log=log)
    log(f"built {base_image_name(python)} from {name}:{tag}")
    return True


def _debootstrap_import(client, log, python: str) -> str:
    if shutil.which("debootstrap") is None:
        raise SandboxError("sandbox.images", "no registry answered and debootstrap is missing: apt-get install debootstrap")
    with tempfile.TemporaryDirectory(prefix="repogym-rootfs-") as tmp:
        rootfs, archive = Path(tmp) / "rootfs", Path(tmp) / "rootfs.tar"
        release = DEBIAN_FOR_PYTHON[python]
        with ticking(f"debootstrap {release} for Python {python} (about a minute)", log):
            proc = subprocess.run(["debootstrap", "--variant=minbase", "--include=" + ",".join(DEBIAN_PACKAGES),
                                   release, str(rootfs)], capture_output=True, text=True)
        if proc.returncode != 0:
            raise SandboxError("sandbox.images", f"debootstrap failed: {proc.stdout[-800:]}{proc.stderr[-800:]}")
        subprocess.run(["rm", "-rf", str(rootfs / "var/cache/apt/archives"), str(rootfs / "var/lib/apt/lists")])
        repo, tag = base_image_name(python).split(":")
        with ticking(f"importing the root file system as {base_image_name(python)}", log):
            subprocess.run(["tar", "-C", str(rootfs), "-cf", str(archive), "."], check=True)
            client.api.import_image(src=str(archive), repository=repo, tag=tag,
                                    changes=["ENV PATH=/usr/local/bin:/usr/bin:/bin", "ENV LANG=C.UTF-8",
                                             'CMD ["/bin/bash"]'])
    log(f"imported {base_image_name(python)}")
    return base_image_name(python)


def _files_hash(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(folder.glob("*.py")):
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()


def env_dockerfile(setup: dict[str, Any]) -> str:
    """The Dockerfile of the environment image for a task setup."""
    lines = [f"FROM {base_image_name(python_of(setup))}",
             # Written by hand: minbase Debian has no useradd.
             "RUN echo 'agent:x:1000:1000::/home/agent:/bin/bash' >> /etc/passwd && echo 'agent:x:1000:' >> /etc/group"
             " && mkdir -p /repo /opt/repogym /home/agent && chown 1000:1000 /repo /home/agent",
             "RUN [ -e /usr/local/bin/python ] || ln -s /usr/bin/python3 /usr/local/bin/python",
             "COPY inside/ /opt/repogym/"]
    requirements = environment_requirements(setup)
    if requirements:
        # PIP_BREAK_SYSTEM_PACKAGES, not the flag: older releases' pip does not know the flag (nor need it).
        lines += ["COPY wheels/ /tmp/wheels/",
                  "RUN PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --no-index --find-links /tmp/wheels "
                  + " ".join(f"'{p}'" for p in requirements) + " && rm -rf /tmp/wheels"]
    if install_steps(setup):
        hook = install_hook(REPO_DIR)
        lines += ["RUN python3 -c " + shlex.quote(f"import os, site; d = site.getsitepackages()[0]; "
                                                  f"os.makedirs(d, exist_ok=True); "
                                                  f"open(os.path.join(d, {INSTALL_HOOK_NAME!r}), 'w').write({hook!r})")]
    lines += ["WORKDIR /repo", "USER agent", 'CMD ["sleep", "infinity"]']
    return "\n".join(lines) + "\n"


def env_image_tag(setup: dict[str, Any], base_id: str) -> str:
    """Content-hash tag: base image id + setup + runner files."""
    key = json.dumps({"base": base_id, "setup": {k: v for k, v in setup.items() if k != "source"},
                      "inside": _files_hash(INSIDE_DIR), "dockerfile": env_dockerfile(setup)}, sort_keys=True)
    return f"{ENV_REPO}:{hashlib.sha256(key.encode()).hexdigest()[:12]}"


def docker_image_tag_for(setup: dict[str, Any]) -> str:
    """The environment image tag ``setup`` maps to, given the current base image."""
    return env_image_tag(setup, docker_client().images.get(base_image_name(python_of(setup))).id)


def ensure_env_image(setup: dict[str, Any] | None = None, *, log: Callable[[str], Any] | None = None) -> str:
    """The environment image for ``setup``, built on first use (and its base, for a Python other than 3.11).

    ``log``: where to say what is built; without one, only the progress of a build shows (on stderr)."""
    import docker
    setup = setup or {}
    python = python_of(setup)
    client = docker_client()
    note = log or (lambda m: None)
    if python != DEFAULT_PYTHON and not base_image_exists(client, python):
        build_base_image(python=python, log=log or to_stderr)  # minutes: the user hears of it
    try:
        base = client.images.get(base_image_name(python))
    except docker.errors.ImageNotFound:
        raise SandboxError("sandbox.images", f"base image {base_image_name(python)} is missing: run "
                                             "`repogym images build`") from None
    tag = env_image_tag(setup, base.id)
    try:
        client.images.get(tag)
        return tag
    except docker.errors.ImageNotFound:  # not built yet: built below
        note(f"{tag} is not built yet")
    files = {f"inside/{p.name}": p.read_bytes() for p in INSIDE_DIR.glob("*.py")}
    requirements = environment_requirements(setup)
    if requirements:
        files.update(_wheelhouse(requirements, python, log))
    _build(client, env_dockerfile(setup), files, tag, network=False, log=log)
    return tag


def _wheelhouse(requirements: list[str], python: str, log: Callable[[str], Any] | None) -> dict[str, bytes]:
    with tempfile.TemporaryDirectory() as tmp:
        error = download_wheels(requirements, python, Path(tmp), log=log)
        if error:
            raise ConfigError(f"could not download {requirements} for the image: {error[-600:]}")
        return {f"wheels/{p.name}": p.read_bytes() for p in Path(tmp).iterdir()}


def _build(client, dockerfile: str, files: dict[str, bytes], tag: str, *, network: bool,
           log: Callable[[str], Any] | None = None) -> None:
    """Build ``tag`` from ``dockerfile`` and ``files`` (name -> bytes), saying so on ``log`` (else stderr)."""
    import docker
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in {"Dockerfile": dockerfile.encode(), **files}.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    try:
        with ticking(f"building {tag}", log):
            client.images.build(fileobj=buf, custom_context=True, tag=tag, rm=True, forcerm=True,
                                network_mode=None if network else "none")
    except docker.errors.BuildError as exc:
        log = "".join(str(chunk.get("stream", chunk.get("error", ""))) for chunk in exc.build_log)
        raise SandboxError("sandbox.images", f"building {tag} failed: {log[-1500:]}") from None
