"""A dataset's own image (``setup.image``) made runnable by the docker backend, built offline once.

SWE-bench, SWE-Gym, SWE-rebench, SWE-smith and R2E-Gym ship one image per instance (or per repository) with
the repository at ``/testbed`` and its environment installed. :func:`ensure_prebuilt_image` derives an image
from it, tagged by content hash (the named image's id, the runner files, this recipe), so it is built once:

- the ``agent`` user (uid 1000; written to ``/etc/passwd`` by hand where ``useradd`` is missing; a uid 1000
  already there under another name is used as it is) and ``/home/agent``;
- the in-sandbox runner files in ``/opt/repogym``;
- the image's own interpreter and environment, untouched; the one the dataset means is the first of
  :data:`ENV_PYTHONS` that exists, else ``python3`` / ``python`` on the image's ``PATH``; its folder goes first
  on ``PATH`` (label ``repogym.env_python``). A virtualenv inside the workdir (R2E-Gym's ``/testbed/.venv``)
  would be hidden by the repository's tmpfs, so it is copied to ``/opt/repogym/venv`` (scripts' ``#!`` lines
  rewritten); one under ``/root`` is made readable to the agent;
- ``/repo``, a link to the workdir, so "``/repo``" keeps meaning the repository root for agents.

The runner needs Python 3.8 or newer (``shlex.join``); where the dataset's interpreter is older (SWE-bench's
environments run 3.6 to 3.11), the runner runs under another interpreter of the image that is new enough (the
conda base, the system ``python3``), while commands still find the dataset's first on ``PATH``; an image with
none is a :class:`ConfigError` at build time (label ``repogym.python``: the runner's interpreter).

Not guaranteed: the repository is loaded from the task's snapshot into a tmpfs at the workdir, which hides
the image's own copy, so what the image built in place in its repository folder (compiled extensions, a
setuptools ``*.egg-info``, a setuptools-scm ``_version.py``) is not there; a task that needs them says so
in its install steps (``setup.install``). Nothing is pulled: a missing image is a :class:`ConfigError`
saying ``docker pull``. A build says what it builds and then the time elapsed at least every 10 s (on the
caller's ``log``, else stderr).
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from repogym.envs.core.errors import ConfigError, SandboxError
from repogym.envs.sandbox.base import INSIDE_DIR, REPO_DIR, WRITABLE
from repogym.envs.sandbox.docker import container_labels
from repogym.envs.sandbox.docker_client import daemon_errors, docker_client

PREBUILT_REPO = "repogym/prebuilt"
ENV_PYTHONS = ("/opt/miniconda3/envs/testbed/bin/python", "/testbed/.venv/bin/python", "/root/.venv/bin/python")
"""Where the datasets' images keep their environment's interpreter, in the order tried."""
RUNNER_MIN_PYTHON = (3, 8)
"""The oldest Python the in-sandbox runner runs under."""
RUNNER_PYTHONS = ("/opt/miniconda3/bin/python3", "/usr/bin/python3", "/usr/local/bin/python3")
"""Where else to look for an interpreter for the runner when the environment's is too old."""
MOVED_VENV = "/opt/repogym/venv"
AGENT_UID = 1000
# Folders the workdir may not be (or be inside): the sandbox's other mounts, and what the system needs.
_RESERVED = ("/proc", "/sys", "/dev", "/tmp", "/var/tmp", "/home/agent", "/opt/repogym", "/usr", "/bin", "/sbin",
             "/lib", "/etc")

_PROBE = r"""
env=""
for p in {candidates}; do
  if [ -x "$p" ]; then env="$p"; break; fi
done
[ -n "$env" ] || env="$(command -v python3 || command -v python || true)"
echo "env_python=$env"
[ -n "$env" ] && echo "env_version=$("$env" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)"
for p in "$env" {runner_candidates} "$(command -v python3 || true)"; do
  if [ -n "$p" ] && [ -x "$p" ] && "$p" -c 'import sys; sys.exit(sys.version_info < {minimum})' 2>/dev/null; then
    echo "runner_python=$p"; break
  fi
done
echo "useradd=$(command -v useradd || true)"
echo "git=$(command -v git || true)"
echo "uid1000=$(awk -F: '$3 == 1000 {{print $1; exit}}' /etc/passwd 2>/dev/null)"
""".format(candidates=" ".join(ENV_PYTHONS), runner_candidates=" ".join(RUNNER_PYTHONS),
           minimum=str(RUNNER_MIN_PYTHON))


@dataclass(frozen=True)
class PrebuiltImage:
    """A derived image ready for :class:`~repogym.envs.sandbox.docker.DockerSandbox`."""

    tag: str
    python: str
    """The interpreter that runs the in-sandbox runner."""
    workdir: str
    """Where the repository lives in the sandbox."""
    env_python: str
    """The dataset's environment's interpreter (first on ``PATH``)."""


def workdir_of(setup: dict[str, Any]) -> str:
    """``setup.workdir`` (default ``/repo``), checked: an absolute folder that is none of the sandbox's own."""
    workdir = str(setup.get("workdir") or REPO_DIR)
    norm = posixpath.normpath(workdir)
    if not workdir.startswith("/") or norm != workdir.rstrip("/") or norm == "/" or any(
            norm == r or norm.startswith(r + "/") or r.startswith(norm + "/") for r in _RESERVED + tuple(WRITABLE)
            if r != REPO_DIR):
        raise ConfigError(f"setup.workdir: expected an absolute folder like /testbed (not /, nor inside "
                          f"{', '.join(_RESERVED)}), got {workdir!r}")
    return norm


def prebuilt_tag(image_id: str, workdir: str) -> str:
    """Content-hash tag: the named image's id, the workdir, the runner files and this recipe."""
    digest = hashlib.sha256()
    for path in sorted(INSIDE_DIR.glob("*.py")):
        digest.update(path.name.encode() + path.read_bytes())
    key = json.dumps({"image": image_id, "workdir": workdir, "inside": digest.hexdigest(),
                      "recipe": hashlib.sha256(Path(__file__).read_bytes()).hexdigest()}, sort_keys=True)
    return f"{PREBUILT_REPO}:{hashlib.sha256(key.encode()).hexdigest()[:12]}"


def ensure_prebuilt_image(setup: dict[str, Any], *, log: Callable[[str], Any] | None = None) -> PrebuiltImage:
    """The derived image of ``setup["image"]`` (see the module docstring), built on first use.

    ``log``: where to say what is built; without one, only the progress of a build shows (on stderr)."""
    import docker
    note = log or (lambda m: None)
    name = setup.get("image")
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"setup.image: expected an image name, got {name!r}")
    workdir = workdir_of(setup)
    client = docker_client()
    try:
        source = client.images.get(name)
    except docker.errors.ImageNotFound:
        raise ConfigError(f"the task's image {name} is not on this machine: run `docker pull {name}` "
                          "(repogym never pulls)") from None
    tag = prebuilt_tag(source.id, workdir)
    try:
        return _described(tag, client.images.get(tag).labels)
    except (docker.errors.ImageNotFound, KeyError) as exc:  # not built yet, or without repogym's labels: built now
        note(f"{tag} is not built ({type(exc).__name__}: {exc})")
    dockerfile, _ = prebuilt_dockerfile(name, workdir, _probe(client, name))
    note(f"{tag} derives from {name}")
    from repogym.envs.sandbox.images import _build
    _build(client, dockerfile, {f"inside/{p.name}": p.read_bytes() for p in INSIDE_DIR.glob("*.py")}, tag,
           network=False, log=log)
    return _described(tag, client.images.get(tag).labels)


def _described(tag: str, labels: dict[str, str] | None) -> PrebuiltImage:
    labels = labels or {}
    return PrebuiltImage(tag, labels["repogym.python"], labels["repogym.workdir"], labels["repogym.env_python"])


def _probe(client, name: str) -> dict[str, str]:
    """What the image holds: its environment's interpreter and version, one for the runner, ``useradd``."""
    try:
        # Labelled like sandboxes, so `repogym gc` reaps the probe should this process die while it runs.
        out = client.containers.run(name, ["-c", _PROBE], entrypoint=["/bin/sh"], user="root", network_mode="none",
                                    remove=True, stdout=True, stderr=True, labels=container_labels("prebuilt-probe"))
    except daemon_errors() as exc:  # the Docker daemon, or the image's own /bin/sh failing
        raise SandboxError("sandbox.prebuilt", f"could not look inside {name} (it needs /bin/sh): {exc}") from exc
    found = dict(line.split("=", 1) for line in out.decode(errors="replace").splitlines() if "=" in line)
    if not found.get("env_python"):
        raise ConfigError(f"{name} has no Python: none of {', '.join(ENV_PYTHONS)}, nor python3 or python on its PATH")
    if not found.get("runner_python"):
        minimum = ".".join(map(str, RUNNER_MIN_PYTHON))
        raise ConfigError(f"{name}: repogym's in-sandbox runner needs Python >= {minimum}, and the image has only "
                          f"{found['env_python']} (Python {found.get('env_version') or '?'}) and no other "
                          f"python3 >= {minimum} (looked at {', '.join(RUNNER_PYTHONS)})")
    if not found.get("git"):
        raise ConfigError(f"{name} has no git on its PATH; repogym's runner needs it to make the base commit")
    return found


def prebuilt_dockerfile(name: str, workdir: str, found: dict[str, str]) -> tuple[str, str]:
    """The derived image's Dockerfile and the environment interpreter commands find first on ``PATH``."""
    env_python, runner_python = found["env_python"], found["runner_python"]
    q = shlex.quote
    if found.get("uid1000"):
        user = "true"  # the image's own uid 1000 is the agent's (HOME is set to /home/agent regardless)
    elif found.get("useradd"):
        user = (f"(getent group {AGENT_UID} >/dev/null || groupadd -g {AGENT_UID} agent) && "
                f"useradd -u {AGENT_UID} -g {AGENT_UID} -M -d /home/agent -s /bin/sh agent")
    else:
        user = (f"echo 'agent:x:{AGENT_UID}:{AGENT_UID}::/home/agent:/bin/sh' >> /etc/passwd && "
                f"(grep -q '^[^:]*:[^:]*:{AGENT_UID}:' /etc/group || echo 'agent:x:{AGENT_UID}:' >> /etc/group)")
    lines = [f"FROM {name}", "USER root",
             f"RUN {user} && mkdir -p /home/agent /opt/repogym {q(workdir)} && chown {AGENT_UID}:{AGENT_UID} /home/agent"]
    venv = posixpath.dirname(posixpath.dirname(env_python))
    moved = {}
    if env_python.startswith(workdir + "/") and posixpath.basename(posixpath.dirname(env_python)) == "bin":
        # The tmpfs at the workdir hides it: a venv finds its pyvenv.cfg next to the folder it is run from.
        lines.append(f"RUN cp -a {q(venv)} {MOVED_VENV} && for f in {MOVED_VENV}/bin/*; do "
                     f"[ -f \"$f\" ] && [ ! -L \"$f\" ] && sed -i '1s|^#!{venv}/|#!{MOVED_VENV}/|' \"$f\"; done; true")
        moved = {env_python: MOVED_VENV + env_python[len(venv):]}
        env_python = moved[env_python]
    runner_python = moved.get(runner_python, runner_python)
    for python in sorted({env_python, runner_python}):
        # The agent must reach each interpreter, and the install a venv's link resolves to, even under /root.
        folders = (q(posixpath.dirname(posixpath.dirname(python)))
                   + f' "$(dirname "$(dirname "$(readlink -f {q(python)})")")"')
        lines.append(f"RUN for real in {folders}; do case \"$real\" in /root/*) chmod -R a+rX \"$real\" && d=\"$real\" "
                     f"&& while [ \"$d\" != / ]; do chmod a+x \"$d\"; d=\"$(dirname \"$d\")\"; done;; esac; done")
    if workdir != REPO_DIR:
        lines.append(f"RUN [ -e {REPO_DIR} ] || [ -L {REPO_DIR} ] || ln -s {q(workdir)} {REPO_DIR}")
    labels = {"repogym.source": name, "repogym.workdir": workdir, "repogym.python": runner_python,
              "repogym.env_python": env_python}
    lines += ["COPY inside/ /opt/repogym/",
              f"ENV PATH={posixpath.dirname(env_python)}:$PATH",
              "LABEL " + " ".join(f"{k}={json.dumps(v)}" for k, v in labels.items()),
              f"WORKDIR {workdir}", "ENTRYPOINT []", 'CMD ["sleep", "infinity"]']
    return "\n".join(lines) + "\n", env_python
