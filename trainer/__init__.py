"""Training (RL learner, rollout fleet, curriculum): not built yet; see the issues."""
