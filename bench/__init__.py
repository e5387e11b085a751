"""Benchmarking agents and checkpoints: a runner, a SQLite results database, metrics, the leaderboard."""
