"""repogym's own speed, memory and robustness checks (sandbox, rollout, learner, analysis, task generation, a soak
under sandbox kills), each measured side by side in one run and run as ``python -m benchmarks.NAME``; unlike
:mod:`repogym.bench` (``bench/``), which benchmarks *agents* on tasks, these measure repogym itself."""
