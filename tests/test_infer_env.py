"""Environment inference (envs/tasks/infer_env.py, envs/tasks/pypi.py) on tiny git repositories made here, with
PyPI's answers faked at the HTTP boundary (``PyPI(fetch=...)``)."""

import datetime
import json
import subprocess

import pytest

from repogym.envs.core.errors import InfraError
from repogym.envs.tasks.datasets import convert_row
from repogym.envs.tasks.infer_env import PYTEST, files_from_git, infer, infer_for_repo
from repogym.envs.tasks.pypi import PyPI, pick_release, supported_tags, wheel_fits
from repogym.envs.tasks.swebench_envs import EDITABLE

FILES = "https://files.example/packages"


def release(name, version, when, *, tag="py3-none-any", requires=(), requires_python=None):
    """One release of a fake PyPI: a wheel uploaded at ``when`` (ISO date) needing ``requires``."""
    return name, version, when, tag, list(requires), requires_python


class FakeIndex:
    """PyPI's JSON API and PEP 658 metadata for a few releases; counts the requests."""

    def __init__(self, *releases, down=False):
        self.projects, self.metadata, self.requests, self.down = {}, {}, [], down
        for name, version, when, tag, requires, requires_python in releases:
            filename = f"{name.replace('-', '_')}-{version}-{tag}.whl"
            url = f"{FILES}/{filename}"
            files = self.projects.setdefault(name, {"info": {"name": name}, "releases": {}})["releases"]
            files.setdefault(version, []).append({
                "filename": filename, "url": url, "packagetype": "bdist_wheel", "yanked": False,
                "upload_time_iso_8601": f"{when}T12:00:00.000000Z", "requires_python": requires_python})
            self.metadata[url + ".metadata"] = "".join(
                [f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"]
                + [f"Requires-Dist: {r}\n" for r in requires]).encode()

    def __call__(self, url):
        self.requests.append(url)
        if self.down:
            raise InfraError("tasks.pypi", f"{url}: cannot reach the index (no network)")
        if url.endswith("/json"):
            project = self.projects.get(url.rsplit("/", 2)[-2])
            return json.dumps(project).encode() if project else None
        return self.metadata.get(url)


def commit_repo(path, files, date="2023-03-11T12:00:00+00:00"):
    """A git repository at ``path`` holding ``files`` in one commit made at ``date``; its id."""
    path.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    env = {"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t", "HOME": str(path), "PATH": "/usr/bin:/bin"}
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "base"]):
        subprocess.run(["git", "-C", str(path), *args], check=True, env=env, capture_output=True)
    return subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], check=True, capture_output=True,
                          text=True).stdout.strip()


def inferred(tmp_path, files, index, date="2023-03-11T12:00:00+00:00"):
    repo = tmp_path / "repo"
    commit = commit_repo(repo, files, date)
    return infer(files_from_git(repo, commit), pypi=PyPI(fetch=index, cache=tmp_path / "pypi"))


# The releases every inferred environment asks for: pytest (the runner) and the install step's build tools.
TOOLS = (release("pytest", "6.2.5", "2021-08-30"), release("pytest", "7.2.2", "2023-03-03"),
         release("pytest", "7.4.0", "2023-06-23"), release("pytest", "8.2.0", "2024-04-27"),
         release("setuptools", "67.6.0", "2023-03-09"), release("setuptools", "70.0.0", "2024-05-21"),
         release("setuptools", "75.0.0", "2024-09-15"),
         release("wheel", "0.38.4", "2022-11-09"), release("wheel", "0.43.0", "2024-03-11"))

PYPROJECT = """
[build-system]
requires = ["flit_core<4"]
build-backend = "flit_core.buildapi"

[project]
name = "tinyproj"
requires-python = ">=3.8"
dependencies = ["click>=8.0", "colorama; platform_system == 'Windows'", "tinyproj-plugin",
                "tomli>=1; python_version < '3.11'"]
classifiers = ["Programming Language :: Python :: 3.9", "Programming Language :: Python :: 3.12"]

[project.optional-dependencies]
test = ["freezegun"]
docs = ["sphinx"]

[tool.pytest.ini_options]
testpaths = ["tests"]
"""


def test_pyproject_project_pinned_as_of_its_commit(tmp_path):
    index = FakeIndex(*TOOLS,
                      release("click", "8.1.3", "2022-04-28"), release("click", "8.1.7", "2023-08-17"),
                      release("click", "9.0.0", "2022-01-01", requires_python=">=3.12"),  # not for 3.11
                      release("freezegun", "1.2.2", "2022-08-01", requires=["python-dateutil>=2.7"]),
                      release("python-dateutil", "2.8.2", "2021-07-08"),
                      release("flit-core", "3.8.0", "2022-11-13"), release("flit-core", "4.0.0", "2023-01-01"),
                      release("sphinx", "6.1.0", "2023-01-01"))
    result = inferred(tmp_path, {"pyproject.toml": PYPROJECT, "tinyproj/__init__.py": ""}, index,
                      date="2024-05-01T00:00:00+00:00")
    # 3.11: allowed by requires-python, listed up to 3.12 and out long enough; 3.13 came out after the commit.
    assert result.setup["python"] == "3.11"
    assert result.setup["pip"] == ["click==8.1.7", "flit-core==3.8.0", "freezegun==1.2.2", "pytest==8.2.0",
                                   "python-dateutil==2.8.2", "setuptools==67.6.0", "wheel==0.43.0"]
    assert result.setup["install"] == EDITABLE and result.test_command == PYTEST and "toolchain" not in result.setup
    why = result.provenance
    assert "pyproject.toml requires-python '>=3.8'" in why["python"] and "classifiers up to 3.12" in why["python"]
    assert "pyproject.toml optional-dependencies.test" in why["requirements"]
    assert "freezegun==1.2.2" in why["pins"]["python-dateutil"]  # who asked for it
    assert why["runner"].startswith("pytest (pyproject.toml [tool.pytest.ini_options])")
    assert any("tinyproj-plugin: not on PyPI" in note for note in why["notes"])
    assert not any("sphinx" in pin for pin in result.setup["pip"]) and "colorama" not in str(result.setup["pip"])


def test_setup_py_is_read_never_run_and_an_old_commit_gets_the_oldest_python(tmp_path):
    setup_py = """
import sys
open("RAN", "w").write("setup.py was executed")
REQUIRES = ["six>=1.0"] + ["chardet"]
EXTRAS = dict(tests=["mock"], docs=["sphinx"])
setup(name="oldproj", install_requires=REQUIRES, extras_require=EXTRAS, python_requires=">=2.7",
      classifiers=["Programming Language :: Python :: 2.7", "Programming Language :: Python :: 3.4"],
      ext_modules=[Extension("oldproj._speedups", ["oldproj/_speedups.c"])])
"""
    index = FakeIndex(*TOOLS,
                      release("six", "1.9.0", "2015-01-02", tag="py2.py3-none-any"),
                      release("six", "1.16.0", "2021-05-05"),
                      release("chardet", "2.3.0", "2014-10-07", tag="py2-none-any"),  # no wheel for Python 3
                      release("chardet", "3.0.4", "2017-06-08", tag="py2.py3-none-any"),
                      release("chardet", "4.0.0", "2020-12-10", tag="py2.py3-none-any"),
                      release("mock", "2.0.0", "2016-04-06", tag="py2.py3-none-any", requires=["pbr>=0.11"]),
                      release("pbr", "1.0.0", "2015-06-01"), release("pbr", "5.4.0", "2019-06-01"))
    result = inferred(tmp_path, {"setup.py": setup_py, "oldproj/__init__.py": ""}, index,
                      date="2015-06-01T00:00:00+00:00")
    assert not (tmp_path / "repo" / "RAN").exists()
    assert result.setup["python"] == "3.9"  # the oldest image Python: the commit predates them all
    pins = result.setup["pip"]
    assert "six==1.9.0" in pins  # the newest before the commit
    # No chardet before the commit has a Python 3 wheel: the first after it that has one.
    assert "chardet==3.0.4" in pins and "first after the date" in result.provenance["pins"]["chardet"]
    # pytest is held at the harness's floor, and its own requirements would be pinned as of its upload.
    assert "pytest==6.2.5" in pins and "mock==2.0.0" in pins and "pbr==1.0.0" in pins
    assert not any(p.startswith("sphinx") for p in pins)
    assert "setup.py ext_modules" in result.provenance["extensions"] and result.setup["toolchain"] == "build"
    assert result.provenance["python"].startswith("3.9: setup.py python_requires '>=2.7'; setup.py classifiers")


def test_a_pin_from_after_the_commit_pins_its_own_requirements_as_of_its_upload(tmp_path):
    index = FakeIndex(*TOOLS,
                      release("tool", "1.0", "2013-01-01", tag="py2-none-any"),
                      release("tool", "2.0", "2020-01-01", requires=["dep"]),
                      release("dep", "0.1", "2013-06-01"), release("dep", "1.5", "2019-06-01"),
                      release("dep", "2.0", "2022-01-01"))
    result = inferred(tmp_path, {"setup.cfg": "[metadata]\nname = p\n[options]\ninstall_requires =\n    tool\n"},
                      index, date="2014-01-01T00:00:00+00:00")
    assert "tool==2.0" in result.setup["pip"]
    assert "dep==1.5" in result.setup["pip"]  # as of tool 2.0's upload (2020), not the commit's (2014)


def test_setup_cfg_and_requirement_files_about_tests(tmp_path):
    files = {
        "setup.cfg": "[metadata]\nname = cfgproj\nclassifiers =\n    Programming Language :: Python :: 3.10\n"
                     "[options]\npython_requires = >=3.7\ninstall_requires =\n    attrs>=20\n"
                     "[options.extras_require]\ntesting =\n    hypothesis\n[tool:pytest]\naddopts = -q\n",
        "setup.py": "from setuptools import setup\nsetup()\n",
        "requirements/tests.txt": "-r base.txt\npytest-mock==3.10.0  # via -r tests.in\n--hash=sha256:00\n",
        "requirements/base.txt": "attrs==22.2.0\n",
        "requirements/dev.txt": "pre-commit\ntox\nvirtualenv==20.0\n",  # not read: there are test files
        "requirements/docs.txt": "sphinx\n",
        "requirements/tests-min.txt": "attrs==20.1.0\n",  # the lowest supported versions: not read
    }
    index = FakeIndex(*TOOLS, release("attrs", "20.1.0", "2020-08-20"), release("attrs", "22.2.0", "2022-12-21"),
                      release("attrs", "22.3.0", "2023-02-01"),
                      release("hypothesis", "6.68.0", "2023-02-19"), release("pytest-mock", "3.10.0", "2022-10-05"),
                      release("virtualenv", "20.0", "2020-02-10"))
    result = inferred(tmp_path, files, index)
    pins = result.setup["pip"]
    assert result.setup["python"] == "3.9"  # 3.11 is newer than the 3.10 listed
    assert {"attrs==22.2.0", "hypothesis==6.68.0", "pytest-mock==3.10.0", "pytest==7.2.2"} <= set(pins)
    assert not any(p.startswith(("virtualenv", "sphinx", "tox", "pre-commit")) for p in pins)
    assert result.provenance["requirements"] == ["requirements/tests.txt", "setup.cfg extras_require.testing",
                                                 "setup.cfg install_requires"]
    assert "setup.cfg [tool:pytest]" in result.provenance["runner"]


def test_conda_environment_and_every_ci_workflow_are_read(tmp_path):
    files = {"setup.py": "from setuptools import setup\nsetup(name='sci')\n",
             "ci/requirements/environment.yml": "name: test\ndependencies:\n  - python=3.10\n  - numpy>=1.21\n"
                                                "  - matplotlib-base\n  - hdf5\n  - pip\n  - pip:\n"
                                                "    - pint==0.19\n",
             "ci/requirements/doc.yml": "dependencies:\n  - sphinx\n",
             ".github/workflows/cron.yml": "jobs:\n  t:\n    strategy:\n      matrix:\n"
                                          "        python-version: ['3.8']\n",
             ".github/workflows/ci.yml": "jobs:\n  t:\n    strategy:\n      matrix:\n"
                                        "        python-version: ['3.8', '3.11']\n"}
    index = FakeIndex(*TOOLS, release("numpy", "1.24.0", "2022-12-18", tag="cp311-cp311-manylinux_2_17_x86_64"),
                      release("matplotlib", "3.6.3", "2023-01-11", tag="cp311-cp311-manylinux_2_17_x86_64"),
                      release("pint", "0.19", "2022-04-01"), release("sphinx", "6.1.0", "2023-01-01"))
    result = inferred(tmp_path, files, index, date="2024-01-01T00:00:00+00:00")
    assert result.setup["python"] == "3.11"  # the workflows together test up to 3.11
    assert ".github/workflows" in result.provenance["python"]
    assert {"numpy==1.24.0", "matplotlib==3.6.3", "pint==0.19"} <= set(result.setup["pip"])
    assert not any(p.startswith(("sphinx", "hdf5", "python")) for p in result.setup["pip"])


def test_what_a_chosen_release_requires_wins_over_a_stale_pin_of_the_project(tmp_path):
    index = FakeIndex(*TOOLS, release("py", "1.4.31", "2015-12-01", tag="py2.py3-none-any"),
                      release("py", "1.10.0", "2020-12-01"), release("py", "1.11.0", "2021-11-04"))
    index.metadata[f"{FILES}/pytest-6.2.5-py3-none-any.whl.metadata"] = \
        b"Metadata-Version: 2.1\nName: pytest\nVersion: 6.2.5\nRequires-Dist: py>=1.8.2\n"
    result = inferred(tmp_path, {"setup.py": "setup(name='old')\n", "requirements.txt": "py==1.4.31\n"}, index,
                      date="2016-01-01T00:00:00+00:00")
    assert "pytest==6.2.5" in result.setup["pip"] and "py==1.10.0" in result.setup["pip"]  # as of pytest's upload
    assert "no release fits all of them, so >=1.8.2" in result.provenance["pins"]["py"]


def test_pytest_plugins_follow_pytest_where_the_harness_needs_a_later_pytest_than_the_commits(tmp_path):
    # requests in 2015: pytest 2.8.1 and pytest-cov 2.1.0, whose old-style hooks pytest 6 refuses at start-up.
    index = FakeIndex(*TOOLS, release("pytest-cov", "2.1.0", "2015-08-24", tag="py2.py3-none-any"),
                      release("pytest-cov", "2.12.1", "2021-06-01"), release("pytest-cov", "3.0.0", "2021-10-04"),
                      release("pytest-httpbin", "0.0.7", "2015-06-25", tag="py2.py3-none-any"),
                      release("pytest-httpbin", "1.0.0", "2019-03-01"), release("six", "1.10.0", "2015-10-07"))
    requirements = "pytest==2.8.1\npytest-cov==2.1.0\npytest-httpbin==0.0.7\nsix==1.10.0\n"
    result = inferred(tmp_path, {"setup.py": "setup(name='old')\n", "requirements.txt": requirements}, index,
                      date="2015-12-15T00:00:00+00:00")
    pins = result.setup["pip"]
    assert "pytest==6.2.5" in pins and "six==1.10.0" in pins  # pytest lifted; other pins kept as of the commit
    assert "pytest-cov==2.12.1" in pins and "pytest-httpbin==1.0.0" in pins  # as of pytest 6.2.5's upload
    assert result.provenance["pins"]["pytest-cov"].endswith(
        "pytest-cov==2.1.0 (requirements.txt) was for pytest ==2.8.1; pinned as of pytest 6.2.5")
    # Where the commit's own pytest is kept, so are its plugins' pins.
    index = FakeIndex(*TOOLS, release("pytest-cov", "2.12.1", "2021-06-01"), release("pytest-cov", "3.0.0", "2021-10-04"))
    result = inferred(tmp_path / "kept", {"setup.py": "setup(name='new')\n",
                                          "requirements.txt": "pytest==7.2.2\npytest-cov==2.12.1\n"}, index)
    assert {"pytest==7.2.2", "pytest-cov==2.12.1"} <= set(result.setup["pip"])


def test_a_release_that_needs_something_with_no_wheel_is_left_out_with_its_reason(tmp_path):
    index = FakeIndex(*TOOLS, release("tbump", "6.9.0", "2022-05-01", requires=["docopt>=0.6.1", "schema"]),
                      release("schema", "0.7.5", "2021-11-01"), release("attrs", "22.1.0", "2022-07-28"))
    index.projects["docopt"] = {"info": {"name": "docopt"}, "releases": {"0.6.2": [
        {"filename": "docopt-0.6.2.tar.gz", "url": f"{FILES}/docopt-0.6.2.tar.gz", "packagetype": "sdist",
         "upload_time_iso_8601": "2014-06-16T11:18:57Z"}]}}
    result = inferred(tmp_path, {"setup.py": "setup(name='lint', install_requires=['attrs'])\n",
                                 "requirements_test.txt": "tbump\n"}, index)
    pins = result.setup["pip"]
    assert "attrs==22.1.0" in pins and not any(p.startswith(("tbump", "docopt", "schema")) for p in pins)
    assert "tbump: needs docopt, which has no release to pin here: left out" in result.provenance["notes"]


def test_a_wheel_without_a_metadata_file_is_read_for_its_requirements(tmp_path):
    import io
    import zipfile
    index = FakeIndex(*TOOLS, release("tbump", "6.9.0", "2022-05-01"), release("schema", "0.7.5", "2021-11-01"))
    url = f"{FILES}/tbump-6.9.0-py3-none-any.whl"
    del index.metadata[url + ".metadata"]  # the index serves no PEP 658 file for it
    wheel = io.BytesIO()
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("tbump-6.9.0.dist-info/METADATA", "Name: tbump\nVersion: 6.9.0\nRequires-Dist: schema\n")
    index.metadata[url] = wheel.getvalue()
    result = inferred(tmp_path, {"setup.py": "setup(name='x')\n", "requirements-test.txt": "tbump\n"}, index)
    assert "schema==0.7.5" in result.setup["pip"] and url in index.requests


def test_a_release_whose_metadata_pip_refuses_gives_way_to_the_one_before(tmp_path):
    index = FakeIndex(*TOOLS, release("flox", "0.5.8", "2022-06-01"),
                      release("flox", "0.5.9", "2022-07-01", requires=["pandas (>=1.0"]))
    result = inferred(tmp_path, {"setup.py": "setup(name='x', install_requires=['flox'])\n"}, index,
                      date="2022-08-01T00:00:00+00:00")
    assert "flox==0.5.8" in result.setup["pip"]
    assert "skipped 0.5.9: metadata pip refuses" in result.provenance["pins"]["flox"]


def test_a_conflict_between_two_askers_moves_one_back_to_a_release_that_agrees(tmp_path):
    index = FakeIndex(*TOOLS, release("aiobotocore", "2.3.4", "2022-06-23", requires=["botocore>=1.24.21,<1.24.22"]),
                      release("boto3", "1.21.21", "2022-03-16", requires=["botocore<1.25.0,>=1.24.21"]),
                      release("boto3", "1.24.35", "2022-07-21", requires=["botocore<1.28.0,>=1.27.35"]),
                      release("botocore", "1.24.21", "2022-03-16"), release("botocore", "1.27.35", "2022-07-21"))
    result = inferred(tmp_path, {"setup.py": "setup(name='x', install_requires=['aiobotocore', 'boto3'])\n"}, index,
                      date="2022-08-01T00:00:00+00:00")
    assert {"aiobotocore==2.3.4", "boto3==1.21.21", "botocore==1.24.21"} <= set(result.setup["pip"])
    assert "the resolver (botocore==1.24.21, which boto3==1.24.35 excludes)" in result.provenance["pins"]["boto3"]


def test_the_asker_moved_back_is_found_among_many_releases_by_its_floor(tmp_path):
    # boto3 1.21.N needs botocore >=1.24.N,<1.25; 1.20.N needs <1.24: only 1.21.0..1.21.21 admit botocore 1.24.21.
    boto3 = [release("boto3", f"1.20.{n}", f"2022-01-{1 + n // 2:02d}", requires=["botocore<1.24"]) for n in range(40)]
    boto3 += [release("boto3", f"1.21.{n}", f"2022-03-{1 + n // 2:02d}", requires=[f"botocore>=1.24.{n},<1.25"])
              for n in range(45)]
    boto3 += [release("boto3", f"1.24.{n}", f"2022-07-{1 + n // 2:02d}", requires=[f"botocore>=1.27.{n}"])
              for n in range(36)]
    index = FakeIndex(*TOOLS, *boto3, release("aiobotocore", "2.3.4", "2022-06-23", requires=["botocore==1.24.21"]),
                      release("botocore", "1.24.21", "2022-03-16"), release("botocore", "1.27.35", "2022-07-21"))
    result = inferred(tmp_path, {"setup.py": "setup(name='x', install_requires=['aiobotocore', 'boto3'])\n"}, index,
                      date="2022-08-01T00:00:00+00:00")
    assert {"boto3==1.21.21", "botocore==1.24.21"} <= set(result.setup["pip"])
    assert sum(url.endswith(".metadata") and "boto3" in url for url in index.requests) <= 20  # not one by one


def test_a_release_needing_a_pin_with_no_wheel_is_left_out_rather_than_break_the_build(tmp_path):
    index = FakeIndex(*TOOLS, release("cf-units", "3.0.1", "2022-01-01", requires=["antlr4-python3-runtime==4.7.2"]),
                      release("antlr4-python3-runtime", "4.11.0", "2022-09-01"))
    index.projects["iris"] = FakeIndex(release("iris", "3.2", "2022-02-01", requires=["cf-units"])).projects["iris"]
    index.metadata[f"{FILES}/iris-3.2-py3-none-any.whl.metadata"] = b"Name: iris\nRequires-Dist: cf-units\n"
    result = inferred(tmp_path, {"setup.py": "setup(name='x', install_requires=['cf-units', 'iris', "
                                             "'antlr4-python3-runtime'])\n"}, index,
                      date="2023-01-01T00:00:00+00:00")
    assert "antlr4-python3-runtime==4.11.0" in result.setup["pip"]
    # iris needs what was left out, so it goes too: the wheelhouse would otherwise fetch cf-units by itself.
    assert not any(p.startswith(("cf-units", "iris")) for p in result.setup["pip"])
    assert any(n.startswith("cf-units: needs antlr4-python3-runtime==4.7.2") for n in result.provenance["notes"])


def test_extras_an_install_line_names_are_followed_through_the_project_s_own_extras(tmp_path):
    setup_py = ("setup(name='cloudmock', install_requires=['requests'],\n"
                "      extras_require={'all': ['cloudmock[s3,ec2]'], 's3': ['boto3'], 'ec2': ['sshpubkeys'],\n"
                "                      'server': ['flask']})\n")
    index = FakeIndex(*TOOLS, release("requests", "2.28.2", "2023-01-12"), release("boto3", "1.26.56", "2023-01-24"),
                      release("sshpubkeys", "3.3.1", "2021-02-04"), release("flask", "2.2.2", "2022-08-08"))
    result = inferred(tmp_path, {"setup.py": setup_py, "requirements-dev.txt": "-e .[all]\n"}, index)
    pins = set(result.setup["pip"])
    assert {"requests==2.28.2", "boto3==1.26.56", "sshpubkeys==3.3.1"} <= pins
    assert not any(p.startswith("flask") for p in pins)  # the server extra is not asked for


def test_unreachable_pypi_leaves_requirements_unpinned_and_says_so(tmp_path):
    files = {"pyproject.toml": PYPROJECT}
    result = inferred(tmp_path, files, FakeIndex(down=True))
    assert "PyPI could not be reached" in result.provenance["pypi"]
    assert "click>=8.0" in result.setup["pip"] and "freezegun" in result.setup["pip"]
    # Markers are evaluated for the Python here (3.9), not passed on: no quote reaches the image's build.
    assert "tomli>=1" in result.setup["pip"] and not any("'" in p or '"' in p for p in result.setup["pip"])
    assert not any(p.startswith("colorama") for p in result.setup["pip"])
    assert result.setup["install"] == EDITABLE


def test_answers_are_cached_on_disk_and_refreshed_for_a_later_date(tmp_path):
    index = FakeIndex(release("click", "8.1.3", "2022-04-28"))
    PyPI(fetch=index, cache=tmp_path).project("click")
    offline = FakeIndex(down=True)
    again = PyPI(fetch=offline, cache=tmp_path)
    assert again.project("Click", newer_than=datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone.utc))
    assert offline.requests == []
    later = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=30)
    with pytest.raises(InfraError, match="cannot reach"):  # fetched before that date: releases since may count
        PyPI(fetch=offline, cache=tmp_path).project("click", newer_than=later)


def test_wheels_fit_by_python_abi_and_glibc():
    py39, py311 = supported_tags("3.9"), supported_tags("3.11")
    assert wheel_fits("numpy-1.26.0-cp39-cp39-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", py39)
    assert not wheel_fits("numpy-1.26.0-cp311-cp311-manylinux_2_17_x86_64.whl", py39)
    assert not wheel_fits("x-1.0-cp39-cp39-manylinux_2_34_x86_64.whl", py39)  # bullseye's glibc is 2.31
    assert wheel_fits("x-1.0-cp311-cp311-manylinux_2_34_x86_64.whl", py311)
    assert wheel_fits("x-1.0-cp37-abi3-manylinux2014_x86_64.whl", py311)
    assert not wheel_fits("x-1.0-cp39-cp39-macosx_11_0_arm64.whl", py39)
    assert not wheel_fits("x-1.0-py2-none-any.whl", py39) and wheel_fits("x-1.0-py2.py3-none-any.whl", py39)


def test_pick_release_skips_prereleases_and_yanked_files():
    from packaging.specifiers import SpecifierSet
    index = FakeIndex(release("lib", "1.0", "2020-01-01"), release("lib", "2.0rc1", "2020-06-01"),
                      release("lib", "1.1", "2020-03-01"))
    project = index.projects["lib"]
    project["releases"]["1.1"][0]["yanked"] = True
    when = datetime.datetime(2021, 1, 1, tzinfo=datetime.timezone.utc)
    assert pick_release(project, SpecifierSet(), "3.9", when).version == "1.0"
    assert pick_release(project, SpecifierSet(">=3"), "3.9", when) is None


# -- datasets: rows without a table entry ---------------------------------------------------------------

ROW = {"instance_id": "tinyorg__tinyproj-1", "repo": "tinyorg/tinyproj", "problem_statement": "fix it",
       "patch": "", "version": "0.1", "FAIL_TO_PASS": '["tests/test_x.py::test_x"]', "PASS_TO_PASS": "[]"}


@pytest.fixture
def mirrored(tmp_path, monkeypatch):
    """A mirror of tinyorg/tinyproj in REPOGYM_MIRRORS, a private cache, and PyPI faked; the base commit."""
    commit = commit_repo(tmp_path / "mirrors" / "tinyorg__tinyproj", {"pyproject.toml": PYPROJECT})
    monkeypatch.setenv("REPOGYM_CACHE", str(tmp_path / "cache"))
    index = FakeIndex(*TOOLS, release("click", "8.1.3", "2022-04-28"), release("freezegun", "1.2.2", "2022-08-01"),
                      release("flit-core", "3.8.0", "2022-11-13"))
    monkeypatch.setattr("repogym.envs.tasks.pypi.http_fetch", index)
    return commit


def test_a_row_without_a_table_entry_is_inferred_from_its_mirror(tmp_path, monkeypatch, mirrored):
    monkeypatch.setenv("REPOGYM_MIRRORS", str(tmp_path / "mirrors"))
    task = convert_row({**ROW, "base_commit": mirrored})
    assert "image" not in task.setup and task.setup["python"] == "3.9"
    assert "click==8.1.3" in task.setup["pip"] and task.test_command == PYTEST
    assert task.extra["dataset_image"] == "swebench/sweb.eval.x86_64.tinyorg_1776_tinyproj-1:latest"
    assert task.extra["setup_inferred"]["requirements"][0].startswith("pyproject.toml")
    # Without a mirror, the default does not clone: the row keeps its image, as before.
    monkeypatch.delenv("REPOGYM_MIRRORS")
    assert convert_row({**ROW, "base_commit": mirrored}).setup["image"].startswith("swebench/")


def test_infer_mode_keeps_the_image_of_a_row_it_cannot_serve_and_says_why(tmp_path, monkeypatch, mirrored):
    monkeypatch.setenv("REPOGYM_MIRRORS", str(tmp_path / "mirrors"))
    task = convert_row({**ROW, "base_commit": "f" * 40}, environments="infer")
    assert task.setup["image"].startswith("swebench/")
    assert "is not in mirror" in task.extra["setup_inferred"]["failed"]
    assert infer_for_repo("tinyorg/tinyproj", mirrored).setup == convert_row(
        {**ROW, "base_commit": mirrored}, environments="infer").setup


def test_the_import_command_infers_with_environments_infer(tmp_path, monkeypatch, mirrored, capsys):
    from repogym.cli import main
    monkeypatch.setenv("REPOGYM_MIRRORS", str(tmp_path / "mirrors"))
    rows, out = tmp_path / "rows.jsonl", tmp_path / "tasks.jsonl"
    rows.write_text(json.dumps({**ROW, "base_commit": mirrored}) + "\n")
    assert main(["tasks", "import", str(rows), "--out", str(out), "--environments", "infer"]) == 0
    record = json.loads(out.read_text())
    assert record["setup"]["python"] == "3.9" and "click==8.1.3" in record["setup"]["pip"]
    assert record["setup_inferred"]["install"] == "pip install -e . (pyproject.toml)"


def _pylint_pyproject(astroid: str) -> str:
    return ('[build-system]\nrequires = ["setuptools>=62"]\nbuild-backend = "setuptools.build_meta"\n\n'
            f'[project]\nname = "pylint"\nversion = "2.15.0-dev0"\nrequires-python = ">=3.7.2"\n'
            f'dependencies = ["astroid{astroid}", "dill>=0.2", "colorama>=0.4.5; sys_platform == \'win32\'"]\n')


def test_a_table_pin_the_commit_refuses_gives_way_to_inference_and_says_why(tmp_path, monkeypatch):
    """pylint's "2.15" rows span commits needing astroid 2.11 and 2.12: the table's one pin (astroid 2.11.7) is
    kept where the commit accepts it and replaced by the inferred environment where it does not (the install step
    runs without dependencies, so the wrong astroid would stay and pylint would not import)."""
    mirror = tmp_path / "mirrors" / "pylint-dev__pylint"
    old = commit_repo(mirror, {"pyproject.toml": _pylint_pyproject(">=2.11.6,<=2.12.0-dev0")}, "2022-06-28T12:00:00+00:00")
    (mirror / "pyproject.toml").write_text(_pylint_pyproject(">=2.12.2,<=2.14.0-dev0"))
    subprocess.run(["git", "-C", str(mirror), "commit", "-qam", "astroid 2.12"], check=True, capture_output=True,
                   env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t", "GIT_AUTHOR_DATE": "2022-08-08T12:00:00+00:00",
                        "GIT_COMMITTER_DATE": "2022-08-08T12:00:00+00:00", "PATH": "/usr/bin:/bin"})
    new = subprocess.run(["git", "-C", str(mirror), "rev-parse", "HEAD"], check=True, capture_output=True,
                         text=True).stdout.strip()
    monkeypatch.setenv("REPOGYM_MIRRORS", str(tmp_path / "mirrors"))
    monkeypatch.setenv("REPOGYM_CACHE", str(tmp_path / "cache"))
    index = FakeIndex(release("pytest", "7.1.2", "2022-04-23"), release("setuptools", "64.0.0", "2022-08-04"),
                      release("wheel", "0.37.1", "2021-12-22"), release("astroid", "2.11.7", "2022-07-09"),
                      release("astroid", "2.12.2", "2022-07-12"), release("dill", "0.3.5.1", "2022-05-19"))
    monkeypatch.setattr("repogym.envs.tasks.pypi.http_fetch", index)
    row = {"instance_id": "pylint-dev__pylint-1", "repo": "pylint-dev/pylint", "problem_statement": "fix it",
           "patch": "", "version": "2.15", "FAIL_TO_PASS": '["tests/test_self.py::test_x"]', "PASS_TO_PASS": "[]"}

    kept = convert_row({**row, "base_commit": old})
    assert "astroid==2.11.7" in kept.setup["pip"] and "setup_inferred" not in kept.extra

    moved = convert_row({**row, "base_commit": new})
    assert "astroid==2.12.2" in moved.setup["pip"] and "astroid==2.11.7" not in moved.setup["pip"]
    assert moved.setup["cpus"] == 2 == kept.setup["cpus"]  # what the entry says besides dependencies stays
    assert moved.extra["setup_inferred"]["table_refused"] == [
        "astroid==2.11.7 against pyproject.toml [project] dependencies: astroid>=2.12.2,<=2.14.0-dev0"]
    # Without a mirror nothing is read: the table's entry stands.
    monkeypatch.delenv("REPOGYM_MIRRORS")
    assert "astroid==2.11.7" in convert_row({**row, "base_commit": new}).setup["pip"]


# -- end to end: a row with no table entry, inferred against the real PyPI, validated on docker ---------------

CALC = "def clamp(x, low, high):\n    return max(low, min(x, high))\n"


@pytest.mark.docker
def test_an_inferred_row_validates_on_docker(tmp_path, monkeypatch):
    from repogym.envs.rewards.validate import validate_task
    from repogym.envs.sandbox import SandboxConfig, sandbox_factory
    from tests.conftest import require_backend
    require_backend("docker")
    mirror = tmp_path / "mirrors" / "tinyorg__calc"
    files = {"pyproject.toml": '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = '
                               '"setuptools.build_meta"\n\n[project]\nname = "calc"\nversion = "0"\n'
                               'requires-python = ">=3.8"\n',
             "calc/__init__.py": "", "calc/ops.py": CALC.replace("min(x, high)", "min(x, high - 1)"),
             "tests/test_ops.py": "from calc.ops import clamp\n\ndef test_low():\n    assert clamp(-5, 0, 10) == 0\n"}
    base = commit_repo(mirror, files, date="2024-01-01T00:00:00+00:00")
    gold = "diff --git a/calc/ops.py b/calc/ops.py\n--- a/calc/ops.py\n+++ b/calc/ops.py\n@@ -1,2 +1,2 @@\n" \
           " def clamp(x, low, high):\n-    return max(low, min(x, high - 1))\n+    return max(low, min(x, high))\n"
    test_patch = "diff --git a/tests/test_high.py b/tests/test_high.py\nnew file mode 100644\n--- /dev/null\n" \
                 "+++ b/tests/test_high.py\n@@ -0,0 +1,4 @@\n" \
                 "+from calc.ops import clamp\n+\n+def test_high():\n+    assert clamp(15, 0, 10) == 10\n"
    monkeypatch.setenv("REPOGYM_MIRRORS", str(tmp_path / "mirrors"))
    task = convert_row({"instance_id": "tinyorg__calc-1", "repo": "tinyorg/calc", "base_commit": base,
                        "problem_statement": "clamp(15, 0, 10) is 9", "patch": gold, "test_patch": test_patch,
                        "FAIL_TO_PASS": ["tests/test_high.py::test_high"],
                        "PASS_TO_PASS": ["tests/test_ops.py::test_low"]})
    assert task.setup["python"] == "3.11" and "pytest==7.4.4" in task.setup["pip"]  # pytest's last of 2023
    assert task.extra["setup_inferred"]["pypi"] == "pinned as of the commit's date"
    verdict = validate_task(task, sandbox_factory("docker", task.setup, SandboxConfig(run_id="pytest")), runs=1)
    assert verdict.ok, (verdict.reasons, verdict.problems, verdict.infra_errors)
