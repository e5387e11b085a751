"""Docker images: a base image per Python version (pulled where a registry answers, else built offline) and
one environment image per task setup, tagged by a content hash so it is built once and reused.

Offline base: ``debootstrap --variant=minbase`` of the Debian release whose ``python3`` is the Python a task
asks for (``setup.python``, :data:`DEBIAN_FOR_PYTHON`; 3.11 when unset), with pytest and git, then ``docker
import``. Environment image: the base plus a non-root ``agent`` user, ``/repo``, the in-sandbox runner files
(stdlib only, run by the image's own interpreter) and, when a task's ``setup.pip`` names packages, a
wheelhouse that ``pip download`` fills on the host for that Python and that installs with ``--no-index``
inside (containers have no network).

Build toolchain (``setup.toolchain: "build"``): the base image is a variant, ``repogym/base:<release>-build``: the
plain base with :data:`BUILD_PACKAGES` installed over it by apt (gcc, g++, gfortran, make, the image's Python
headers, pkg-config and the ``-dev`` headers scientific builds link: freetype, libpng, OpenBLAS/LAPACK, zlib), or
debootstrapped whole with them where Debian's archive does not answer a build. A project with C, C++, Fortran or
Cython extensions builds in place (its Cython and numpy come as wheels from ``setup.pip``). Without the key,
images carry no compiler.

Vendored copies (``setup.hide_vendored``: package names, e.g. ``["requests"]``): pip carries copies of
projects (``pip/_vendor/requests``); a task on such a project would find a later version of it, the fix often
included, in the image. pip needs its copy whole (the base commit's release of the project is often too old for
it), so the copy's sources are removed and only its bytecode stays: each named copy's ``.py`` files, in every
pip of the image and in Debian's ``/usr/share/python-wheels`` wheels, become sourceless ``.pyc`` files compiled
with ``-OO`` (no docstrings), after the environment's installs. pip runs as before. Not guaranteed: the bytecode
still holds the code, names and string constants; an agent that disassembles pip's copy on purpose reads the fix
in other words. No file of the image holds the fix as text.

Every long step (a pull, ``debootstrap``, an import, a build, the wheel downloads) says what it does and then the
time elapsed at least every 10 s (:func:`repogym.envs.core.ticker.ticking`): on the caller's ``log`` where one is
given, else on stderr.
"""

from __future__ import annotations

import base64
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
from repogym.envs.sandbox.install import (INSTALL_HOOK_NAME, LIST_PLUGINS, environment_requirements, install_hook,
                                          install_steps)
from repogym.envs.sandbox.wheelhouse import download_wheels

DEFAULT_PYTHON = "3.11"
# The Debian release whose python3 is each version: what debootstrap (and the slim images) can give offline.
DEBIAN_FOR_PYTHON = {"3.9": "bullseye", "3.11": "bookworm", "3.13": "trixie"}
DEBIAN_PACKAGES = ["python3", "python3-pytest", "python3-pip", "git", "procps", "ca-certificates"]
BUILD_PACKAGES = ["build-essential", "gfortran", "python3-dev", "pkg-config", "libfreetype-dev", "libpng-dev",
                  "libopenblas-dev", "liblapack-dev", "zlib1g-dev"]
"""Debian packages the ``build`` toolchain adds: compilers (C, C++, Fortran), make, the image's Python headers
(``python3-dev``) and the headers scientific builds link against."""
TOOLCHAINS = {"build": BUILD_PACKAGES}
"""``setup.toolchain`` -> the Debian packages its base image adds."""
ENV_REPO = "repogym/env"


def python_of(setup: dict[str, Any] | None) -> str:
    """The Python version a task setup asks for (``setup.python``), checked against the ones images exist for."""
    version = str((setup or {}).get("python") or DEFAULT_PYTHON)
    if version not in DEBIAN_FOR_PYTHON:
        raise ConfigError(f"no image for Python {version!r} (setup.python); available: "
                          f"{', '.join(DEBIAN_FOR_PYTHON)}")
    return version


def toolchain_of(setup: dict[str, Any] | None) -> str | None:
    """The build toolchain a task setup asks for (``setup.toolchain``), checked; None for none."""
    toolchain = (setup or {}).get("toolchain")
    if toolchain is not None and toolchain not in TOOLCHAINS:
        raise ConfigError(f"setup.toolchain: expected one of {sorted(TOOLCHAINS)} or none, got {toolchain!r}")
    return toolchain


def hidden_vendored(setup: dict[str, Any] | None) -> list[str]:
    """``setup.hide_vendored``, checked: the packages whose copies in pip's ``_vendor`` the image deletes."""
    names = (setup or {}).get("hide_vendored") or []
    if isinstance(names, str) or not isinstance(names, list) or not all(
            isinstance(n, str) and n.isidentifier() for n in names):
        raise ConfigError(f"setup.hide_vendored: expected a list of package names like ['requests'], got {names!r:.80}")
    return sorted(set(names))


def base_image_name(python: str = DEFAULT_PYTHON, toolchain: str | None = None) -> str:
    """The base image's tag for a Python version (and toolchain), e.g. ``repogym/base:bookworm`` for 3.11,
    ``repogym/base:bullseye-build`` for 3.9 with the build toolchain."""
    release = DEBIAN_FOR_PYTHON[python_of({"python": python})]
    return f"repogym/base:{release}" + (f"-{toolchain_of({'toolchain': toolchain})}" if toolchain else "")


BASE_IMAGE = base_image_name()


def base_image_of(setup: dict[str, Any] | None) -> str:
    """The base image a task setup builds on (its Python, its toolchain)."""
    return base_image_name(python_of(setup), toolchain_of(setup))


def base_image_exists(client=None, python: str = DEFAULT_PYTHON, toolchain: str | None = None) -> bool:
    """Whether the base image for ``python`` (and ``toolchain``) is present."""
    import docker
    client = client or docker_client()
    try:
        client.images.get(base_image_name(python, toolchain))
        return True
    except docker.errors.ImageNotFound:
        return False


def build_base_image(*, force: bool = False, pull: bool = True, log: Callable[[str], Any] = print,
                     python: str = DEFAULT_PYTHON, toolchain: str | None = None) -> str:
    """Make the base image for ``python`` (with ``toolchain``'s packages): pull an official python image where a
    registry answers, else debootstrap."""
    client = docker_client()
    name = base_image_name(python, toolchain)
    if not force and base_image_exists(client, python, toolchain):
        log(f"{name} already present")
        return name
    if pull and _try_pull(client, log, python, toolchain):
        return name
    if toolchain:
        return _toolchain_layer(client, log, python, toolchain, pull=pull)
    return _debootstrap_import(client, log, python, toolchain)


def _toolchain_layer(client, log, python: str, toolchain: str, *, pull: bool) -> str:
    """The toolchain's packages as one apt layer over the plain base (seconds where the plain base exists, against
    minutes for a second debootstrap); a whole debootstrap with them where Debian's archive does not answer the
    build."""
    plain = build_base_image(pull=pull, log=log, python=python)
    name = base_image_name(python, toolchain)
    dockerfile = (f"FROM {plain}\nRUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y "
                  f"--no-install-recommends {' '.join(TOOLCHAINS[toolchain])} "
                  "&& rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb\n")
    try:
        _build(client, dockerfile, {}, name, network=True, log=log)
    except SandboxError as exc:
        why = (exc.message.strip().splitlines() or ["no output"])[-1][:160]
        log(f"installing the {toolchain} toolchain over {plain} failed ({why}); debootstrapping it whole")
        return _debootstrap_import(client, log, python, toolchain)
    log(f"built {name} over {plain}")
    return name


def _try_pull(client, log, python: str, toolchain: str | None = None) -> bool:
    import docker
    name, tag = "python", f"{python}-slim-{DEBIAN_FOR_PYTHON[python]}"
    try:
        with ticking(f"pulling {name}:{tag}", log):
            client.images.pull(name, tag=tag)
    except (docker.errors.APIError, docker.errors.DockerException, OSError) as exc:
        log(f"no registry answered for {name}:{tag} ({str(exc).splitlines()[0][:120]}); building offline")
        return False
    # The official image's Python has its own headers: Debian's python3-dev would be another Python's.
    extra = [p for p in TOOLCHAINS[toolchain] if p != "python3-dev"] if toolchain else []
    dockerfile = (f"FROM {name}:{tag}\nRUN apt-get update && apt-get install -y --no-install-recommends git procps "
                  + " ".join(extra) + " && rm -rf /var/lib/apt/lists/* && pip install --no-cache-dir pytest\n"
                  "RUN ln -sf /usr/local/bin/python3 /usr/bin/python3 || true\n")
    _build(client, dockerfile, {}, base_image_name(python, toolchain), network=True, log=log)
    log(f"built {base_image_name(python, toolchain)} from {name}:{tag}")
    return True


def _debootstrap_import(client, log, python: str, toolchain: str | None = None) -> str:
    if shutil.which("debootstrap") is None:
        raise SandboxError("sandbox.images", "no registry answered and debootstrap is missing: apt-get install debootstrap")
    with tempfile.TemporaryDirectory(prefix="repogym-rootfs-") as tmp:
        rootfs, archive = Path(tmp) / "rootfs", Path(tmp) / "rootfs.tar"
        release, name = DEBIAN_FOR_PYTHON[python], base_image_name(python, toolchain)
        packages = DEBIAN_PACKAGES + (TOOLCHAINS[toolchain] if toolchain else [])
        how_long = "a few minutes: compilers and headers" if toolchain else "about a minute"
        with ticking(f"debootstrap {release} for Python {python}{' with the ' + toolchain + ' toolchain' if toolchain else ''} "
                     f"({how_long})", log):
            proc = subprocess.run(["debootstrap", "--variant=minbase", "--include=" + ",".join(packages),
                                   release, str(rootfs)], capture_output=True, text=True)
        if proc.returncode != 0:
            raise SandboxError("sandbox.images", f"debootstrap failed: {proc.stdout[-800:]}{proc.stderr[-800:]}")
        subprocess.run(["rm", "-rf", str(rootfs / "var/cache/apt/archives"), str(rootfs / "var/lib/apt/lists")])
        repo, tag = name.split(":")
        with ticking(f"importing the root file system as {name}", log):
            subprocess.run(["tar", "-C", str(rootfs), "-cf", str(archive), "."], check=True)
            client.api.import_image(src=str(archive), repository=repo, tag=tag,
                                    changes=["ENV PATH=/usr/local/bin:/usr/bin:/bin", "ENV LANG=C.UTF-8",
                                             'CMD ["/bin/bash"]'])
    log(f"imported {name}")
    return name


def _files_hash(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(folder.glob("*.py")):
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()


# Run as root in the image after its installs, with the package names as arguments: each vendored copy's sources
# become bytecode (-OO: no docstrings), in pip's folders and in Debian's wheels of them.
_HIDE_VENDORED = """\
import glob, os, py_compile, shutil, sys, tempfile, zipfile
names = sys.argv[1:]


def compiled(source, path):
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "m.py"), "wb") as fh:
            fh.write(source)
        py_compile.compile(os.path.join(tmp, "m.py"), cfile=os.path.join(tmp, "m.pyc"), dfile=path, doraise=True,
                           optimize=2)
        with open(os.path.join(tmp, "m.pyc"), "rb") as fh:
            return fh.read()


for vendor in glob.glob("/usr/**/pip/_vendor", recursive=True):
    for name in names:
        package = os.path.join(vendor, name)
        sources = glob.glob(package + "/**/*.py", recursive=True) + glob.glob(package + ".py")
        for path in sources:
            with open(path, "rb") as fh:
                data = compiled(fh.read(), path)
            with open(path + "c", "wb") as fh:
                fh.write(data)
            os.remove(path)
        for cache in glob.glob(package + "/**/__pycache__", recursive=True):
            shutil.rmtree(cache)
        if sources:
            print("compiled", len(sources), "sources of", package)
for name in names:
    for wheel in glob.glob("/usr/share/python-wheels/%s-*.whl" % name):
        with zipfile.ZipFile(wheel) as old, zipfile.ZipFile(wheel + ".new", "w", zipfile.ZIP_DEFLATED) as new:
            for item in old.infolist():
                data = old.read(item)
                if item.filename.startswith(name + "/") and item.filename.endswith(".py"):
                    new.writestr(item.filename + "c", compiled(data, item.filename))
                else:
                    new.writestr(item, data)
        os.replace(wheel + ".new", wheel)
        print("compiled the sources of", wheel)
"""


def env_dockerfile(setup: dict[str, Any]) -> str:
    """The Dockerfile of the environment image for a task setup."""
    lines = [f"FROM {base_image_of(setup)}",
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
    hidden = hidden_vendored(setup)
    if hidden:  # after the installs: they need pip whole. In base64: a Dockerfile instruction is one line.
        script = base64.b64encode(_HIDE_VENDORED.encode()).decode()
        lines += [f"RUN python3 -c \"import base64; exec(base64.b64decode('{script}'))\" " + " ".join(hidden)]
    if requirements:  # the pytest plugins they brought, for the launcher to name (plugin autoload is off)
        lines += ["RUN python3 -I -c " + shlex.quote(LIST_PLUGINS)]
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
    return env_image_tag(setup, docker_client().images.get(base_image_of(setup)).id)


def ensure_env_image(setup: dict[str, Any] | None = None, *, log: Callable[[str], Any] | None = None) -> str:
    """The environment image for ``setup``, built on first use (and its base, for a Python other than 3.11).

    ``log``: where to say what is built; without one, only the progress of a build shows (on stderr)."""
    import docker
    setup = setup or {}
    python, toolchain = python_of(setup), toolchain_of(setup)
    client = docker_client()
    note = log or (lambda m: None)
    if (python != DEFAULT_PYTHON or toolchain) and not base_image_exists(client, python, toolchain):
        build_base_image(python=python, toolchain=toolchain, log=log or to_stderr)  # minutes: the user hears of it
    try:
        base = client.images.get(base_image_name(python, toolchain))
    except docker.errors.ImageNotFound:
        raise SandboxError("sandbox.images", f"base image {base_image_name(python, toolchain)} is missing: run "
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
