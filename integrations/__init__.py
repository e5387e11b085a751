"""repogym inside the trainers and agent harnesses people already run.

One module per peer, each thin over :mod:`repogym.envs` (the episode logic stays there): an OpenEnv
server, SkyRL-Gym and verifiers environments, TRL's GRPO rollouts, and an OpenAI-compatible proxy that
records what an engine generated for black-box agent harnesses such as mini-swe-agent. The peers'
packages are optional (``pip install "repogym[integrations]"``); each module imports its peer lazily
and says what to install when it is missing.
"""
