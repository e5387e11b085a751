"""Requirements pinned as they stood on a date: every requirement, and theirs, to one release with a wheel.

:func:`resolve` takes requirements (each with who asked) and pins each project to the newest release uploaded before
a date with a wheel for a Python (:func:`repogym.envs.tasks.pypi.pick_release`), then reads the pins' own
requirements and pins those, round after round until nothing changes. A pin from after the date (the first release
with a wheel for the Python) has its requirements pinned as of its upload. Where askers disagree, what chosen
releases (and the harness, ``the ...`` askers) require binds over the project's files; where two chosen releases
disagree over a third, one is moved back to its newest release that agrees; a release whose metadata pip refuses
gives way to the one before it; a release that needs something with no wheel is left out, with every release that
needs it. Each pin says why, and so does each project left out.

Not a full resolver: no search beyond these moves, so a set pip cannot install is possible (``repogym validate``
says ``env_build``); the pins always carry only names and versions.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass, field

from packaging.markers import InvalidMarker, UndefinedComparison, UndefinedEnvironmentName
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from repogym.envs.tasks.pypi import PyPI, Release, fitting_releases, pick_release

MAX_ROUNDS = 16
"""Rounds of pinning and re-reading the pins' own requirements before the set is taken as it is."""
MAX_CONFLICT_TRIES = 40
"""Releases of an asker whose metadata is read to end a conflict over one of its requirements."""


def _environment(python: str) -> dict[str, str]:
    return {"python_version": python, "python_full_version": f"{python}.0", "sys_platform": "linux",
            "platform_system": "Linux", "os_name": "posix", "platform_machine": "x86_64",
            "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": ""}


def _applies(requirement: Requirement, python: str, extras: frozenset[str] = frozenset()) -> bool:
    if requirement.marker is None:
        return True
    try:
        return any(requirement.marker.evaluate({**_environment(python), "extra": e}) for e in (extras or {""}))
    except (UndefinedComparison, UndefinedEnvironmentName, InvalidMarker):
        return False


@dataclass
class _Want:
    """One project asked for: the specifiers, the extras, and who asked."""

    specs: list[tuple[str, str]] = field(default_factory=list)
    extras: set[str] = field(default_factory=set)
    dates: list[datetime.datetime | None] = field(default_factory=list)
    """As of when each asker wants it pinned."""


def parse_requirement(line: str) -> Requirement | None:
    """``line`` as a requirement, None when it is not one."""
    try:
        return Requirement(line)
    except InvalidRequirement:
        return None


def resolve(roots: list[tuple[str, str]], python: str, date: datetime.datetime | None,
            pypi: PyPI) -> tuple[list[str], dict[str, str], list[str]]:
    """``roots`` (requirement, who asked) and their requirements pinned as of ``date`` for ``python``:
    ``(pins, why each pin, notes)``. :class:`InfraError` when PyPI cannot be reached."""
    picked: dict[str, Release] = {}
    asof: dict[str, datetime.datetime | None] = {}  # name -> the date its pin was chosen as of
    why: dict[str, str] = {}
    notes: dict[str, str] = {}
    dropped: dict[str, str] = {}  # releases that need something with no wheel: the image's build would fail on them
    held: dict[str, tuple[str, str]] = {}  # name -> (requirement, why): an asker moved back to end a conflict
    relaxed: dict[str, str] = {}
    for _ in range(MAX_ROUNDS):
        wants: dict[str, _Want] = {}
        relaxed = {}  # this round's pytest plugins whose project pins were made for an older pytest than pinned
        lifted = _lifted_pytest(picked.get("pytest"), roots, python)
        for index, (line, source) in enumerate(roots + list(held.values())):
            plugin = _pytest_plugin(line)
            if lifted is not None and plugin and index < len(roots) and not source.startswith("the "):
                # Its pin fits the project's pytest, not the one the harness needs: as of that pytest's upload.
                relaxed[plugin] = (f"{line.strip()} ({source}) was for pytest {lifted[1]}; pinned as of pytest "
                                   f"{lifted[0].version}")
                _want(wants, plugin, source, python, lifted[0].uploaded)
                continue
            _want(wants, line, source, python, date)
        for name, release in sorted(picked.items()):
            extras = frozenset(wants[name].extras) if name in wants else frozenset()
            # A release pinned from after the commit (the first with a wheel for this Python) has its own
            # requirements pinned as of its upload, not as of the commit: older ones may not work with it.
            when = release.uploaded if release.after_date else asof.get(name, date)
            for line in pypi.requires_dist(release):
                requirement = parse_requirement(line)
                if requirement is not None and _applies(requirement, python, extras):
                    _want(wants, line, f"{name}=={release.version}", python, when)
        for name in dropped:
            wants.pop(name, None)
        new: dict[str, Release] = {}
        asof = {}
        for name, want in sorted(wants.items()):
            stamps = [d for d in want.dates if d is not None]
            asof[name] = max(stamps) if stamps else None
            release, reason = _pick(name, want, python, asof[name], pypi)
            if release is None:
                notes[name] = reason
                continue
            new[name] = release
            why[name] = reason
        unmet = _unmet(new, wants, (set(wants) - set(new)) | set(dropped), python, pypi)
        if unmet:
            dropped.update(unmet)
            notes.update(unmet)
            picked = {n: r for n, r in new.items() if n not in unmet}
            continue
        moved, gone = _settle_conflict(new, wants, asof, python, pypi, held)
        if moved or gone:
            held.update(moved)
            dropped.update(gone)
            notes.update(gone)
            picked = {n: r for n, r in new.items() if n not in gone}
            continue
        if {n: r.version for n, r in new.items()} == {n: r.version for n, r in picked.items()}:
            break
        picked = new
    pins = [f"{name}=={release.version}" for name, release in sorted(picked.items())]
    for name in relaxed.keys() & picked.keys():
        why[name] += f"; {relaxed[name]}"
    return pins, {n: why[n] for n in sorted(picked)}, [f"{n}: {m}" for n, m in sorted(notes.items())
                                                          if n not in picked]


def _pytest_plugin(line: str) -> str | None:
    """The canonical name of a ``pytest-*`` project that ``line`` requires, else None."""
    requirement = parse_requirement(line)
    name = canonicalize_name(requirement.name) if requirement is not None else ""
    return name if name.startswith("pytest-") else None


def _lifted_pytest(release: Release | None, roots: list[tuple[str, str]], python: str) -> tuple[Release, str] | None:
    """``(pytest's pin, the project's own specifier)`` where the pin is outside what the project's files ask of
    pytest (the harness needs a later one than the commit's), else None."""
    if release is None:
        return None
    for line, source in roots:
        requirement = parse_requirement(line)
        if (requirement is not None and not source.startswith("the ") and canonicalize_name(requirement.name) == "pytest"
                and _applies(requirement, python) and requirement.specifier
                and not requirement.specifier.contains(release.version, prereleases=True)):
            return release, str(requirement.specifier)
    return None


def _settle_conflict(picked: dict[str, Release], wants: dict[str, _Want], asof: dict[str, datetime.datetime | None],
                     python: str, pypi: PyPI,
                     held: dict[str, tuple[str, str]]) -> tuple[dict[str, tuple[str, str]], dict[str, str]]:
    """For the first pin that a picked release's requirement excludes (``aiobotocore`` wants ``botocore`` 1.24,
    ``boto3`` wants 1.27): that asker held at its newest release (as of its date, within what else asks of it)
    whose requirement admits the pin, else left out (pip would refuse the set); ``({}, {})`` when no conflict."""
    for name, release in sorted(picked.items()):
        for spec, who in wants[name].specs if name in wants else []:
            asker, _, version = who.partition("==")
            if not spec or asker not in picked or picked[asker].version != version or asker in held \
                    or SpecifierSet(spec).contains(release.version, prereleases=True):
                continue
            others = ",".join(s for s, w in wants[asker].specs if s and not w.startswith("the resolver"))
            project = pypi.project(asker, newer_than=asof.get(asker))
            candidates = [Release(asker, str(v), up, url, size, after_date=False)
                          for v, up, url, size in fitting_releases(project or {}, SpecifierSet(others), python)
                          if asof.get(asker) is None or up < asof[asker]][::-1]
            found = _newest_admitting(candidates, name, release.version, python, pypi)
            if found is not None:
                return {asker: (f"{asker}=={found.version}", f"the resolver ({name}=={release.version}, "
                                                             f"which {asker}=={version} excludes)")}, {}
            return {}, {asker: f"needs {name}{spec}, which no release with a wheel here meets beside the others' "
                               f"{name}=={release.version}: left out"}
    return {}, {}


def _newest_admitting(candidates: list[Release], name: str, version: str, python: str,
                      pypi: PyPI) -> Release | None:
    """The first of ``candidates`` (newest first) whose requirement on ``name`` admits ``version``. An asker's
    floor on another project only falls with its older releases (boto3 has a release a day), so the newest one whose
    floor admits ``version`` is found by galloping then bisecting; the few from there are then read in turn.
    At most :data:`MAX_CONFLICT_TRIES` metadata reads."""
    wanted = Version(version)
    reads = [0]

    def needs(index: int) -> list[Requirement]:
        reads[0] += 1
        return [r for r in map(parse_requirement, pypi.requires_dist(candidates[index]))
                if r is not None and canonicalize_name(r.name) == name and _applies(r, python)]

    def floor_admits(index: int) -> bool:
        return all(not (s.operator in (">=", ">", "==", "~=") and _version(s.version) > wanted)
                   for r in needs(index) for s in r.specifier)

    failed, step, first = -1, 1, None
    while failed < len(candidates) - 1 and reads[0] < MAX_CONFLICT_TRIES:
        probe = min(failed + step, len(candidates) - 1)
        if floor_admits(probe):
            low, high = failed, probe
            while high - low > 1 and reads[0] < MAX_CONFLICT_TRIES:
                middle = (low + high) // 2
                low, high = (low, middle) if floor_admits(middle) else (middle, high)
            first = high
            break
        failed, step = probe, step * 2
    for index in range(first, len(candidates)) if first is not None else ():
        if reads[0] >= MAX_CONFLICT_TRIES:
            break
        if all(r.specifier.contains(version, prereleases=True) for r in needs(index)):
            return candidates[index]
    return None


def _version(text: str) -> Version:
    try:
        return Version(text.rstrip(".*"))
    except InvalidVersion:
        return Version("0")


def _invalid_metadata(release: Release, pypi: PyPI) -> bool:
    return any(parse_requirement(line) is None for line in pypi.requires_dist(release))


def _unmet(picked: dict[str, Release], wants: dict[str, _Want], failed: set[str], python: str,
           pypi: PyPI) -> dict[str, str]:
    """The picked releases that need a project no release could be picked for (``failed``: no wheel, not on
    PyPI), and what."""
    unmet = {}
    for name, release in picked.items():
        extras = frozenset(wants[name].extras) if name in wants else frozenset()
        for line in pypi.requires_dist(release):
            requirement = parse_requirement(line)
            if requirement is not None and not requirement.url and _applies(requirement, python, extras) \
                    and canonicalize_name(requirement.name) in failed:
                unmet[name] = f"needs {requirement.name}, which has no release to pin here: left out"
                break
    return unmet


def unpinned(roots: list[tuple[str, str]], python: str) -> list[str]:
    """The requirements that apply to ``python`` as ``name<specifier>``, one per project, markers and URLs dropped:
    only characters a requirement's name and specifier allow reach the environment's build (never quotes)."""
    wants: dict[str, _Want] = {}
    for line, source in roots:
        _want(wants, line, source, python, None)
    return [name + ",".join(s for s, _ in want.specs if s) for name, want in sorted(wants.items())]


def _want(wants: dict[str, _Want], line: str, source: str, python: str, date: datetime.datetime | None) -> None:
    requirement = parse_requirement(line)
    if requirement is None or requirement.url or not _applies(requirement, python):
        return
    want = wants.setdefault(canonicalize_name(requirement.name), _Want())
    want.specs.append((str(requirement.specifier), source))
    want.dates.append(date)
    want.extras |= set(requirement.extras)


def _pick(name: str, want: _Want, python: str, date: datetime.datetime | None, pypi: PyPI):
    project = pypi.project(name, newer_than=date)
    if project is None:
        return None, "not on PyPI: left out"
    specs = [(s, who) for s, who in want.specs if s]
    said = "; ".join(f"{s} ({who})" for s, who in specs) or "any version"
    # The askers may disagree (or pin a release with no wheel for this Python). What the chosen releases and the
    # harness require binds (pip refuses an environment that breaks it); the project's files' pins give way.
    binding = [s for s, who in specs if who.startswith("the ") or re.fullmatch(r"[a-z0-9._-]+==\S+", who)]
    ranges = [SpecifierSet(",".join(s for s, _ in specs))] if specs else [SpecifierSet()]
    if specs:
        ranges += ([SpecifierSet(",".join(binding))] if binding else []) + [SpecifierSet(specs[0][0]), SpecifierSet()]
    refused: list[str] = []
    for number, spec in enumerate(ranges):
        release = pick_release(project, spec, python, date)
        while release is not None and _invalid_metadata(release, pypi):  # pip ignores it: the one before it
            refused.append(release.version)
            release = pick_release(project, spec, python, date, frozenset(refused))
        if release is not None:
            if number:
                said += f"; no release fits all of them, so {str(spec) or 'any version'}"
            break
    if refused:
        said += f"; skipped {', '.join(refused)}: metadata pip refuses"
    if release is None:
        return None, f"no release with a wheel for Python {python} ({said}): left out"
    when = "first after the date with a wheel" if release.after_date else "newest before the date"
    if date is not None:
        when += f" ({date.date().isoformat()})"
    return release, f"{when}; asked: {said}"
