"""Post-training on repogym environments: an optional SFT warm start, then RL (GRPO or PPO) with a curriculum.

The entry point is ``repogym train --config configs/tiny-cpu.yaml`` (or :class:`repogym.trainer.train.Trainer`
with a :class:`repogym.trainer.config.TrainConfig`): ``config`` loads the YAML, ``train`` runs the loop top
to bottom, ``fleet`` runs episodes on rollout workers (in-process or Ray actors), ``learner`` owns the model
and its optimiser, ``algorithms`` holds GRPO, PPO and SFT (one file each, behind the ``Algorithm``
protocol), ``curriculum`` picks the tasks, ``sft_data`` tokenises any agent's trajectories as SFT data,
``inference`` holds the vLLM engine actors, ``tiny`` builds the random-init CPU model, and ``checkpoint``
and ``metrics`` write the run folder. See docs/training.md.
"""
