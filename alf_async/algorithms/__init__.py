"""Algorithms: PPO (and the advantage estimators they share)."""

from alf_async.algorithms.ppo import PPOAlgorithm

