"""PyPI's release history, for pinning a dependency as it stood on a date: which release, with a wheel for which Python.

:class:`PyPI` reads PyPI's JSON API (``/pypi/NAME/json``: every release with its files and their upload times)
and each chosen wheel's core metadata (``FILE_URL.metadata``, PEP 658, for its ``Requires-Dist``; the wheel itself
when that file is missing), and keeps
the answers on disk under repogym's cache (``pypi/``). A project's answer is reused while it is newer than the
date asked about (releases uploaded since cannot matter for an older date); a wheel's metadata never changes.

:func:`pick_release` chooses, among the releases a specifier allows, the newest uploaded before a date that has a
binary wheel installable on Linux x86_64 CPython of a given version (tags, ``Requires-Python``, the image's glibc),
else the oldest such release uploaded after it (a commit older than its image's Python still needs a wheel).

Guaranteed: nothing is executed, nothing is installed; an unreachable index raises :class:`InfraError`
(``tasks.pypi``) naming the URL, a project PyPI does not know gives None. Not guaranteed: that the chosen
releases install together (pip decides that when the environment is built).
"""

from __future__ import annotations

import datetime
import hashlib
import io
import json
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path
from typing import Any, Callable

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from repogym.envs.core.errors import InfraError
from repogym.envs.core.paths import cache_dir

INDEX_URL = "https://pypi.org/pypi"
"""PyPI's JSON API (``REPOGYM_PYPI_URL`` replaces it, e.g. with a mirror's)."""
TIMEOUT_S = 20
MAX_WHEEL_READ = 20_000_000
"""The largest wheel downloaded to read its requirements when the index serves no separate metadata file."""
GLIBC_OF_PYTHON = {"3.9": (2, 31), "3.11": (2, 36), "3.13": (2, 41)}
"""The glibc of the Debian release under each image Python (bullseye, bookworm, trixie): manylinux wheels newer
than it do not load there."""

Fetch = Callable[[str], "bytes | None"]
"""``fetch(url)``: the body, None for 404; raises :class:`InfraError` when the index cannot be reached."""


def http_fetch(url: str) -> bytes | None:
    """GET ``url`` (None on 404); :class:`InfraError` for any other failure to get an answer."""
    request = urllib.request.Request(url, headers={"User-Agent": "repogym (environment inference)",
                                                   "Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            return response.read()
    except urllib.error.HTTPError as exc:  # the index answered: 404 is "no such project", others are its trouble
        if exc.code == 404:
            return None
        raise InfraError("tasks.pypi", f"{url}: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:  # no network, DNS, timeout, TLS
        raise InfraError("tasks.pypi", f"{url}: cannot reach the index ({getattr(exc, 'reason', exc)})") from None


@dataclass(frozen=True)
class Release:
    """One release of a project as :func:`pick_release` chose it."""

    name: str
    version: str
    uploaded: datetime.datetime
    wheel_url: str
    """A wheel of this release that fits the Python asked about."""
    wheel_size: int
    after_date: bool
    """True when no release before the date fitted and this is the first one after it."""


class PyPI:
    """PyPI's JSON API with an on-disk cache (``cache/pypi``); ``fetch`` is the HTTP boundary (tests replace it)."""

    def __init__(self, *, fetch: Fetch | None = None, cache: Path | None = None, index_url: str | None = None):
        self.fetch = fetch or http_fetch
        self.cache = cache if cache is not None else cache_dir() / "pypi"
        self.index_url = (index_url or os.environ.get("REPOGYM_PYPI_URL") or INDEX_URL).rstrip("/")
        self._projects: dict[str, dict[str, Any] | None] = {}

    def project(self, name: str, newer_than: datetime.datetime | None = None) -> dict[str, Any] | None:
        """The JSON of project ``name`` (None when PyPI has none), from the cache when fetched after ``newer_than``."""
        key = canonicalize_name(name)
        if key in self._projects:
            return self._projects[key]
        path = self.cache / "projects" / f"{key}.json"
        data = self._cached(path, newer_than)
        if data is None:
            url = f"{self.index_url}/{key}/json"
            body = self.fetch(url)
            try:
                project = _absolute(json.loads(body), url) if body is not None else None
            except (json.JSONDecodeError, UnicodeDecodeError, AttributeError) as exc:  # a proxy's error page, say
                raise InfraError("tasks.pypi", f"{url}: the answer is not PyPI's JSON ({exc})") from None
            data = {"fetched": time.time(), "project": project}
            _write(path, json.dumps(data).encode())
        self._projects[key] = data["project"]
        return data["project"]

    def requires_dist(self, release: Release) -> list[str]:
        """The ``Requires-Dist`` lines of a release's wheel (its PEP 658 metadata, else the wheel's own
        ``METADATA`` when the wheel is under :data:`MAX_WHEEL_READ` bytes; cached for good)."""
        path = self.cache / "metadata" / (hashlib.sha256(release.wheel_url.encode()).hexdigest()[:24] + ".txt")
        if path.is_file():
            text = path.read_text(encoding="utf-8", errors="replace")
        else:
            body = self.fetch(release.wheel_url + ".metadata")
            if body is None and release.wheel_size <= MAX_WHEEL_READ:  # no PEP 658 file (or a proxy hides it)
                wheel = self.fetch(release.wheel_url)
                body = _wheel_metadata(wheel) if wheel is not None else None
            text = body.decode("utf-8", errors="replace") if body is not None else ""
            _write(path, text.encode())
        return Parser().parsestr(text, headersonly=True).get_all("Requires-Dist") or []

    @staticmethod
    def _cached(path: Path, newer_than: datetime.datetime | None) -> dict[str, Any] | None:
        if not path.is_file():
            return None
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):  # a cache file cut short by a killed process: fetched again
            return None
        if newer_than is not None and data.get("fetched", 0) <= newer_than.timestamp() + 86400:
            return None  # fetched before (or just after) the date asked about: releases since may count
        return data


def _absolute(project: dict[str, Any], url: str) -> dict[str, Any]:
    """The project's file URLs made absolute (a proxy in front of PyPI may answer with relative ones)."""
    for files in (project.get("releases") or {}).values():
        for f in files or []:
            if isinstance(f, dict) and isinstance(f.get("url"), str):
                f["url"] = urllib.parse.urljoin(url, f["url"])
    return project


def _wheel_metadata(wheel: bytes) -> bytes | None:
    """The ``*.dist-info/METADATA`` of a wheel's bytes, None when it has none (or is no zip)."""
    try:
        with zipfile.ZipFile(io.BytesIO(wheel)) as archive:
            name = next((n for n in archive.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)), None)
            return archive.read(name) if name else None
    except (zipfile.BadZipFile, OSError):  # not a wheel after all
        return None


def _write(path: Path, body: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_bytes(body)
    os.replace(tmp, path)  # atomic: a reader never sees half a file


def supported_tags(python: str) -> frozenset[Tag]:
    """The wheel tags Linux x86_64 CPython ``python`` (``3.9``) installs, up to its image's glibc."""
    major, minor = (int(x) for x in python.split("."))
    glibc_major, glibc_minor = GLIBC_OF_PYTHON.get(python, (2, 31))
    platforms = [f"manylinux_{glibc_major}_{m}_x86_64" for m in range(glibc_minor, 4, -1)]
    legacy = {"manylinux2014_x86_64": 17, "manylinux2010_x86_64": 12, "manylinux1_x86_64": 5}
    platforms += [name for name, m in legacy.items() if m <= glibc_minor] + ["linux_x86_64"]
    tags = set(cpython_tags((major, minor), platforms=platforms))
    tags |= set(compatible_tags((major, minor), f"cp{major}{minor}", platforms=platforms))
    return frozenset(tags)


def wheel_fits(filename: str, tags: frozenset[Tag]) -> bool:
    """Whether the wheel ``filename`` has a tag among ``tags``."""
    try:
        return bool(parse_wheel_filename(filename)[3] & tags)
    except InvalidWheelFilename:
        return False


def _python_ok(requires_python: str | None, python: str) -> bool:
    if not requires_python:
        return True
    try:
        return SpecifierSet(requires_python).contains(f"{python}.0", prereleases=True)
    except InvalidSpecifier:
        return True  # pip ignores a Requires-Python it cannot parse, and so do we


def _when(stamp: str) -> datetime.datetime | None:
    try:
        return datetime.datetime.fromisoformat(re.sub(r"Z$", "+00:00", stamp))
    except (TypeError, ValueError):
        return None


def fitting_releases(project: dict[str, Any], spec: SpecifierSet, python: str,
                     skip: frozenset[str] = frozenset()) -> list[tuple[Version, datetime.datetime, str, int]]:
    """``(version, first upload, wheel url, wheel size)`` of every release of ``project`` that ``spec`` allows
    (none of ``skip``, no pre-release, not yanked) with a wheel for Linux x86_64 CPython ``python``, in version
    order."""
    tags = supported_tags(python)
    fitting: list[tuple[Version, datetime.datetime, str, int]] = []
    for text, files in (project.get("releases") or {}).items():
        try:
            version = Version(text)
        except InvalidVersion:
            continue
        files = [f for f in files or [] if not f.get("yanked")]
        stamps = [w for w in (_when(f.get("upload_time_iso_8601") or f.get("upload_time")) for f in files) if w]
        if not stamps or version.is_prerelease or not spec.contains(version, prereleases=False) or text in skip:
            continue
        wheel = next((f for f in files if f.get("packagetype") == "bdist_wheel"
                      and wheel_fits(f.get("filename", ""), tags) and _python_ok(f.get("requires_python"), python)),
                     None)
        if wheel:
            uploaded = min(stamps)
            fitting.append((version, uploaded if uploaded.tzinfo else uploaded.replace(tzinfo=datetime.timezone.utc),
                            wheel["url"], int(wheel.get("size") or 0)))
    return sorted(fitting)


def pick_release(project: dict[str, Any], spec: SpecifierSet, python: str, before: datetime.datetime | None,
                 skip: frozenset[str] = frozenset()) -> Release | None:
    """The release of ``project`` (PyPI's JSON) to pin, none of ``skip``: see the module docstring; None when no
    release fits."""
    name = str(project.get("info", {}).get("name") or "")
    fitting = fitting_releases(project, spec, python, skip)
    if not fitting:
        return None
    earlier = [f for f in fitting if before is None or f[1] < before]
    version, uploaded, url, size = earlier[-1] if earlier else fitting[0]
    return Release(name, str(version), uploaded, url, size, after_date=not earlier)
