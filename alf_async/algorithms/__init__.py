"""Algorithms: PPO, A2C and V-trace actor-critic (on-policy style), SAC, DQN and R2D2 (from
replay), BC and CQL (from datasets), and the estimators they use."""

from alf_async.algorithms.a2c import A2cAlgorithm
from alf_async.algorithms.bc import BcAlgorithm
from alf_async.algorithms.cql import CqlDqnAlgorithm, CqlSacAlgorithm
from alf_async.algorithms.dqn import DqnAlgorithm
from alf_async.algorithms.impala import ImpalaAlgorithm
from alf_async.algorithms.ppo import PPOAlgorithm
from alf_async.algorithms.r2d2 import R2d2Algorithm
from alf_async.algorithms.sac import SacAlgorithm
