"""An env that raises at random steps: the chaos run's env exception, from gin.

    create_environment.step_fault_probability = 0.001

wraps every env `create_environment` makes; with
`LocalCollection.restart_failed_envs = True` each fault is survived (the env
is rebuilt and counted in `faults/env_restarts`), without it the run stops
with the fault's message, as it would for a real env error.
"""

import collections
import threading
from typing import Optional

import numpy as np
from tf_agents.environments import wrappers


class InjectedEnvFault(RuntimeError):
    """The error a `FaultInjectingEnv` raises."""


_BUILT = collections.Counter()  # seed -> FaultInjectingEnvs built with it in this process
_BUILT_LOCK = threading.Lock()


class FaultInjectingEnv(wrappers.PyEnvironmentBaseWrapper):
    """Raises `InjectedEnvFault` instead of stepping, with probability p per step.

    Draws from its own generator, seeded by `seed` and how many were built
    with it before in this process: a seeded run injects at the same steps,
    and an env rebuilt after a fault (same seed) does not replay the faults
    of the one it replaces. Thread-safety: that of the wrapped env (one env
    thread steps it); building is thread-safe.
    """

    def __init__(self, env, probability: float, seed: Optional[int] = None):
        """
        Args:
            env: the batched env to wrap.
            probability: p, per batched step, in [0, 1].
            seed: seeds the draws (None: random).

        Raises:
            ValueError: p outside [0, 1] (names the setting).
        """
        if not 0.0 <= probability <= 1.0:
            raise ValueError(f"create_environment.step_fault_probability must be in [0, 1], "
                             f"got {probability}")
        super().__init__(env)
        self._probability = probability
        with _BUILT_LOCK:
            built, _BUILT[seed] = _BUILT[seed], _BUILT[seed] + 1
        self._rng = np.random.default_rng(None if seed is None else [seed, built])
        self.num_faults = 0

    def _step(self, action):
        if self._rng.random() < self._probability:
            self.num_faults += 1
            raise InjectedEnvFault(f"injected env fault (create_environment."
                                   f"step_fault_probability={self._probability})")
        return self._env.step(action)
