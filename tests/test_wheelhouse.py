"""The host-side wheelhouse resolves dependencies with the target Python's markers, not the host's."""

from __future__ import annotations

import zipfile
from pathlib import Path

from repogym.envs.sandbox.wheelhouse import missing_dependencies


def _wheel(folder: Path, name: str, version: str, requires: list[str]) -> None:
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires)
    with zipfile.ZipFile(folder / f"{name}-{version}-py3-none-any.whl", "w") as archive:
        archive.writestr(f"{name}-{version}.dist-info/METADATA", metadata)


def test_markers_are_evaluated_for_the_target_python(tmp_path):
    _wheel(tmp_path, "pytest", "7.4.0", ['exceptiongroup>=1.0.0rc8; python_version < "3.11"', "iniconfig",
                                         'colorama; sys_platform == "win32"', 'tomli>=1.0.0; python_version < "3.11"',
                                         'xmlschema; extra == "testing"'])
    _wheel(tmp_path, "iniconfig", "2.0.0", [])
    assert missing_dependencies(tmp_path, "3.9") == ["exceptiongroup>=1.0.0rc8", "tomli>=1.0.0"]
    assert missing_dependencies(tmp_path, "3.11") == []


def test_a_provided_name_is_not_asked_for_again(tmp_path):
    _wheel(tmp_path, "pandas", "1.5.3", ['numpy>=1.20.3; python_version < "3.10"',
                                         'numpy>=1.23.2; python_version >= "3.11"', "python-dateutil>=2.8.1"])
    _wheel(tmp_path, "numpy", "1.23.0", [])
    _wheel(tmp_path, "python_dateutil", "2.8.2", ["six>=1.5"])
    assert missing_dependencies(tmp_path, "3.9") == ["six>=1.5"]
