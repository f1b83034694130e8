"""Rollouts (layer 3): many episodes at once, written as trajectories, resumable."""

from agentrl.rollout.runner import RolloutSummary, episode_seed, run_episode, run_rollout

__all__ = ["RolloutSummary", "episode_seed", "run_episode", "run_rollout"]
