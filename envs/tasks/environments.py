"""A task's environment, described by data: the ``setup`` keys, and the install steps they imply.

``Task.setup`` holds everything the sandbox's environment needs (tasks with equal setups share it):

=============== =========================================================================================
key             meaning
=============== =========================================================================================
``python``      Python version of the image (``3.9``, ``3.11`` (default), ``3.13``); the local backend runs only
                its own interpreter's
``pip``         requirements installed into the environment from the host-side wheelhouse (binary wheels)
``pre_install`` shell commands run in the fresh tree before the install step (e.g. ``sed`` on ``setup.py``)
``install``     one shell command that installs the repository itself, e.g. ``python -m pip install -e .``
``runner``      how tests run and report: ``pytest`` (default), ``django``, ``sympy``
``cpus``        CPUs the sandbox gets at least (tests of parallel workers skip on one)
``image``       a prebuilt image to run instead of repogym's own (docker backend only)
``workdir``     where that image keeps the repository (``/testbed`` in the datasets' images)
``toolchain``   ``build``: the base image with compilers and headers (gcc, g++, gfortran, make, python3-dev,
                freetype, libpng, OpenBLAS, LAPACK, zlib), for projects that build extensions in place (docker only)
``hide_vendored`` package names whose copies in pip's ``_vendor`` the image keeps as bytecode only (the remedy for
                a leak validate finds there; docker only)
``source``      where the repository comes from (see :mod:`repogym.envs.tasks.repos`)
=============== =========================================================================================

The install steps these keys imply (``pre_install``, ``install``, ``pip``) are built at the sandbox's level, where
environments are made: :mod:`repogym.envs.sandbox.install`. This module only describes the keys.

Where a setup comes from: a suite's author, the built-in table of SWE-bench's repositories
(:mod:`repogym.envs.tasks.swebench_envs`), or inference from the repository at its base commit
(:mod:`repogym.envs.tasks.infer_env`). An inferred setup is plain data like the others (edit it freely); the task
keeps beside it, at its top level and outside ``setup`` (so it never splits an environment), ``setup_inferred``:
which file decided the Python, each pin and its asker, the install step and the runner, and notes on what was
left out (docs/environments.md).
"""
