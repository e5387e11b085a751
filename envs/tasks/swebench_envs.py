"""Built-in environments of SWE-bench's repositories, by ``repo`` and ``version``, runnable offline.

SWE-bench's harness keeps such a table (``swebench/harness/constants/python.py``, ``MAP_REPO_VERSION_TO_SPECS``),
but its environments come from conda and from each repository's own requirement files read over the network
(``"packages": "requirements.txt"``). Here every entry is plain data for a task's ``setup``
(:mod:`repogym.envs.tasks.environments`): a Python repogym has an image for, pinned binary wheels from the
host-side wheelhouse, the install step, the runner and the test command. Where SWE-bench asks for a Python
repogym has no image for, the nearest newer one stands in (3.5..3.8 -> 3.9, 3.10 -> 3.11); where it runs tests
through tox (sphinx), pytest runs them directly; locale set-up (Django) becomes environment variables.

Not here (:data:`UNSUPPORTED` says why): repositories that build C extensions in place (astropy, matplotlib,
scikit-learn): they need the compiler image (``setup.toolchain: build``) and a per-load build of the tree, which no
entry here is tuned for yet. Their rows keep the dataset's own image (``setup.image``).
A missing entry is not an error: :func:`swebench_setup` returns None, and the row's environment is inferred from
its repository at its base commit where a mirror holds it (:mod:`repogym.envs.tasks.infer_env`), else it keeps
its image. An entry here overrides inference: keep one only where inference is known to be wrong.
"""

from __future__ import annotations

from typing import Any

DJANGO_TEST = "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1"
SYMPY_TEST = "PYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning' bin/test -C --verbose"
PYTEST = "python -m pytest -rA -p no:cacheprovider"
EDITABLE = "python -m pip install -e ."

UNSUPPORTED = {
    "astropy/astropy": "builds C extensions in place (needs a compiler and numpy headers)",
    "matplotlib/matplotlib": "builds C extensions in place (needs a compiler and freetype)",
    "scikit-learn/scikit-learn": "builds Cython extensions in place (needs a compiler)",
}
"""SWE-bench repositories with no built-in environment, and why."""


def _django(python: str, pip: list[str]) -> dict[str, Any]:
    return {"python": python, "pip": pip, "install": EDITABLE, "runner": "django", "test_command": DJANGO_TEST}


def _versions(names: str, entry: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v: entry for v in names.split()}


# Optional dependencies Django's tests use (tests/requirements/py3.txt): their tests are skipped, or fail, without.
_DJANGO_TEST_39 = ["tzdata==2023.3", "Pillow==9.5.0", "numpy==1.24.4", "PyYAML==6.0.1", "argon2-cffi==21.3.0",
                   "bcrypt==4.0.1", "docutils==0.20.1", "tblib==2.0.0"]
_DJANGO_TEST_311 = ["tzdata==2023.3", "Pillow==10.0.0", "numpy==1.26.0", "PyYAML==6.0.1", "argon2-cffi==21.3.0",
                    "bcrypt==4.0.1", "docutils==0.20.1", "tblib==2.0.0"]
_SEABORN_PINS = ["contourpy==1.1.0", "cycler==0.11.0", "fonttools==4.42.1", "importlib-resources==6.0.1",
                 "kiwisolver==1.4.5", "matplotlib==3.7.2", "numpy==1.25.2", "packaging==23.1", "pillow==10.0.0",
                 "pyparsing==3.0.9", "pytest==7.4.0", "python-dateutil==2.8.2", "pytz==2023.3.post1",
                 "scipy==1.11.2", "six==1.16.0", "tzdata==2023.1", "zipp==3.16.2",
                 "flit-core==3.9.0"]  # seaborn builds with flit
_XARRAY_PINS = ["numpy==1.23.0", "packaging==23.1", "pandas==1.5.3", "pytest==7.4.0", "python-dateutil==2.8.2",
                "pytz==2023.3", "six==1.16.0", "scipy==1.11.1", "setuptools==68.0.0", "dask==2022.8.1",
                # the optional back-ends xarray's tests use, from its ci/requirements/environment.yml
                "bottleneck==1.3.7", "pint==0.21.1", "sparse==0.14.0", "numba==0.57.1", "toolz==0.12.0"]
_SPHINX_PINS = ["Jinja2==2.11.3", "markupsafe==2.0.1", "sphinxcontrib-applehelp==1.0.4",
                "sphinxcontrib-devhelp==1.0.2", "sphinxcontrib-jsmath==1.0.1", "sphinxcontrib-htmlhelp==2.0.1",
                "sphinxcontrib-serializinghtml==1.1.5", "sphinxcontrib-qthelp==1.0.3", "Pygments==2.14.0",
                "docutils==0.16", "snowballstemmer==2.2.0", "babel==2.12.1", "alabaster==0.7.11", "imagesize==1.4.1",
                "requests==2.31.0", "packaging==23.1", "pytest==7.4.0", "html5lib==1.1", "cython==0.29.36",
                "setuptools==68.0.0"]
_PYLINT_COMMON = ["isort==5.10.1", "mccabe==0.6.1", "toml==0.10.2", "platformdirs==2.5.2", "typing-extensions==4.7.1",
                  "lazy-object-proxy==1.9.0", "wrapt==1.13.3", "pytest-benchmark==3.4.1"]

ENVIRONMENTS: dict[str, dict[str, dict[str, Any]]] = {
    "django/django": {
        **_versions("2.2 3.0 3.1 3.2", _django("3.9", ["asgiref==3.4.1", "pytz==2023.3", "sqlparse==0.4.4",
                                                       "Jinja2==2.11.3", "markupsafe==2.0.1", *_DJANGO_TEST_39])),
        "4.0": _django("3.9", ["asgiref==3.5.2", "pytz==2023.3", "sqlparse==0.4.4", "Jinja2==3.1.2",
                               *_DJANGO_TEST_39]),
        "4.1": _django("3.9", ["asgiref==3.7.2", "pytz==2023.3", "sqlparse==0.4.4", "Jinja2==3.1.2", *_DJANGO_TEST_39]),
        # 3.11, not SWE-bench's 3.9: bullseye's SQLite (3.34) lacks RETURNING, and 4.2's bulk_create tests skip on it.
        "4.2": _django("3.11", ["asgiref==3.7.2", "pytz==2023.3", "sqlparse==0.4.4", "Jinja2==3.1.2",
                                *_DJANGO_TEST_311]),
        **_versions("5.0 5.1 5.2", _django("3.11", ["asgiref==3.8.1", "sqlparse==0.5.0", "Jinja2==3.1.2",
                                                    *_DJANGO_TEST_311])),
    },
    "sympy/sympy": _versions("0.7 1.0 1.1 1.2 1.4 1.5 1.6 1.7 1.8 1.9 1.10 1.11 1.12 1.13 1.14",
                             {"python": "3.9", "pip": ["mpmath==1.3.0"], "install": EDITABLE, "runner": "sympy",
                              "test_command": SYMPY_TEST}),
    "pylint-dev/pylint": {
        # astroid 2.6 pins wrapt<1.13, which has no wheels for 3.9: this environment does not build (validate says so).
        **_versions("2.8 2.9", {"python": "3.9", "pip": ["astroid==2.6.6", "pytest==6.2.5", "toml==0.10.2",
                                                         "isort==5.9.3", "mccabe==0.6.1", "pytest-benchmark==3.4.1"],
                                "install": EDITABLE, "test_command": PYTEST}),
        **_versions("2.10 2.11", {"python": "3.9", "pip": ["astroid==2.8.6", "pytest==6.2.5", "appdirs==1.4.4",
                                                    *_PYLINT_COMMON],
                                  "install": EDITABLE, "test_command": PYTEST}),
        **_versions("2.13 2.14 2.15", {"python": "3.9", "pip": ["astroid==2.11.7", "dill==0.3.6", "tomli==2.0.1",
                                                                "tomlkit==0.11.8", "pytest==7.1.3",
                                                                "pytest-timeout==2.1.0", *_PYLINT_COMMON],
                                       "install": EDITABLE, "test_command": PYTEST, "cpus": 2}),
    },
    "mwaskom/seaborn": {
        "0.11": {"python": "3.9", "pip": [*_SEABORN_PINS, "pandas==1.3.5"], "install": EDITABLE,
                 "test_command": PYTEST},
        **_versions("0.12 0.13 0.14", {"python": "3.9", "pip": [*_SEABORN_PINS, "pandas==2.0.0"], "install": EDITABLE,
                                       "test_command": PYTEST}),
    },
    "pydata/xarray": _versions("0.12 0.18 0.19 0.20 2022.03 2022.06 2022.09 2023.07 2024.05",
                               {"python": "3.9", "pip": _XARRAY_PINS, "install": EDITABLE, "test_command": PYTEST}),
    "sphinx-doc/sphinx": _versions("3.0 3.1 3.2 3.3 3.4 3.5 4.0 4.1 4.2 4.3 4.4",
                                   {"python": "3.9", "pip": _SPHINX_PINS, "install": EDITABLE,
                                    "test_command": PYTEST}),
    "psf/requests": _versions("2.0 2.2 2.3 2.4 2.5 2.7 2.8 2.9 2.10 2.12 2.17 2.18 2.19 2.22 2.25 2.26 2.27 2.31 3.0",
                              {"python": "3.9", "pip": ["pytest==7.4.0", "urllib3==1.26.16", "chardet==4.0.0",
                                                        "idna==2.10", "certifi==2023.7.22", "pysocks==1.7.1",
                                                        "pytest-httpbin==2.0.0", "httpbin==0.10.1",
                                                        # httpbin 0.10.1 and flasgger import what Werkzeug 3 and Flask 2.3 removed
                                                        "flask==2.2.5", "werkzeug==2.2.3"],
                               "install": EDITABLE, "test_command": PYTEST}),
    "pytest-dev/pytest": _versions("5.0 5.1 5.2 5.3 5.4 6.0 6.2 6.3 7.0 7.1 7.2 7.4 8.0",
                                   {"python": "3.9", "pip": ["attrs==23.1.0", "iniconfig==2.0.0", "packaging==23.1",
                                                             "pluggy==0.13.1", "py==1.11.0", "more-itertools==10.1.0",
                                                             "wcwidth==0.2.6", "setuptools-scm==7.1.0", "toml==0.10.2",
                                                             "tomli==2.0.1", "hypothesis==6.82.0", "xmlschema==2.4.0"],
                                    "install": EDITABLE, "test_command": PYTEST}),
}
"""``repo`` -> ``version`` -> the ``setup`` (and ``test_command``) of its tasks."""


def swebench_setup(repo: str, version: str) -> dict[str, Any] | None:
    """The built-in environment of a SWE-bench ``repo`` at ``version`` (a fresh dict), or None when there is none."""
    entry = ENVIRONMENTS.get(repo, {}).get(str(version))
    if entry is None:
        return None
    return {k: (list(v) if isinstance(v, list) else v) for k, v in entry.items()}
