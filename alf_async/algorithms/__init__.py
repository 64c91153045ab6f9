"""Algorithms: PPO and V-trace actor-critic (on-policy style), SAC and DQN (from
replay), and the estimators they use."""

from alf_async.algorithms.dqn import DqnAlgorithm
from alf_async.algorithms.impala import ImpalaAlgorithm
from alf_async.algorithms.ppo import PPOAlgorithm
from alf_async.algorithms.sac import SacAlgorithm
