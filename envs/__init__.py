"""repogym environments. Importing this package registers ``repogym/RepoTask-v0`` with Gymnasium.

:class:`StepInfo` is the shape of the ``info`` dict that ``reset`` and ``step`` return."""

import gymnasium

from repogym.envs.repo_env import ENV_ID, EnvConfig, RepoTaskEnv
from repogym.envs.step_info import StepInfo

if ENV_ID not in gymnasium.registry:
    # Nondeterministic: tool steps report wall-clock durations and run real processes.
    gymnasium.register(id=ENV_ID, entry_point="repogym.envs.repo_env:RepoTaskEnv", nondeterministic=True)

__all__ = ["RepoTaskEnv", "EnvConfig", "ENV_ID", "StepInfo"]
