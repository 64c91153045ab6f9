"""Algorithms: PPO and V-trace actor-critic, and the estimators they use."""

from alf_async.algorithms.impala import ImpalaAlgorithm
from alf_async.algorithms.ppo import PPOAlgorithm
