"""The base vocabulary every layer shares: errors, episode statuses, the episode's state, the registry idiom, rates.

Nothing here imports the rest of repogym, so every package (sandboxes, rewards, the env, agents, the trainer, the
bench) may import it; it is the floor of the stack (``tests/test_layers.py``).
"""
