"""What the driver, the learner and the evaluation call on an algorithm.

Every algorithm (`PPOAlgorithm`, `ImpalaAlgorithm`, `SacAlgorithm`,
`DqnAlgorithm`) is a `tf.Module` with these members; `check_algorithm` tells
which ones a new algorithm still lacks. Shapes: N is the number of rows of
one call (actors: `n * B` sub-envs; learner: samples of one minibatch).
"""

from typing import Any, Dict, List, Protocol, Sequence, Tuple, runtime_checkable

import tensorflow as tf

from alf_async.errors import check_contract

Nest = Any


@runtime_checkable
class Algorithm(Protocol):
    """The algorithm contract.

    Attributes:
        time_step_spec: unbatched tf-agents time-step spec of one sub-env.
        action_spec: unbatched tf-agents action spec.
        policy_state_spec: unbatched spec of the policy state (`()` if
            feed-forward); env threads carry it from step to step.
        recurrent: whether the learner's samples are whole unrolls (`[N, T]`
            sequences) instead of single steps.
        burn_in: for a recurrent algorithm learning from replay, the steps
            before each replayed sequence that it only runs its network over
            (`ReplayBuffer` prefixes them from the sub-env's previous unroll);
            0 otherwise.
        item_terms: names of per-sample terms of `loss` that tell a batch
            source about each sampled item (`("td_error",)`: absolute TD
            errors, for prioritized replay); `()` if none. The learner
            computes only those the batch's source `wants_back`.
        variables_to_train: every variable the optimizer updates, each once.
        loss_groups: `[(term, variables)]`: which loss term each set of
            variables minimises (the learner may clip the groups apart);
            `[("loss", variables_to_train)]` when one term trains everything.
        mutable_settings: `{name: ScheduledValue}` of the settings it holds in
            variables, which a built run may change without a rebuild and
            reports as it trains with them (`learning.mutable`; PPO's clip
            ratio, the entropy coefficient); `{}` if none.

    The evaluation and the exported policy (`evaluation.GreedyPolicy`) use
    `act(..., greedy=True)` and `policy_state_spec`, nothing else.
    """

    time_step_spec: Nest
    action_spec: Nest
    policy_state_spec: Nest
    recurrent: bool
    burn_in: int
    item_terms: Sequence[str]
    variables_to_train: Sequence[tf.Variable]
    loss_groups: List[Tuple[str, Sequence[tf.Variable]]]
    mutable_settings: Dict[str, Any]

    def act(self, observation: Nest, step_type: tf.Tensor, policy_state: Nest,
            greedy: bool = False, seed=None, env_id=None) -> Tuple[Nest, Nest, tf.Tensor]:
        """`[N, ...]` observations -> `(action, new_policy_state, log_prob)`, leading dim N.

        `greedy`: the most likely action (evaluation, the exported policy);
        else a sample of the behaviour policy. `seed`: a `[2]` integer seed
        of a stateless sample (None: stateful). `env_id`: `[N]` int32, the
        global env id (stream) of each row, for exploration that differs by
        env (Ape-X's epsilons); None outside collection. Called by the actor
        threads (or env threads) while the learner trains.
        """

    def observe(self, batch) -> None:
        """Sees every `LearnBatch` once, in arrival order, before training on it
        (running statistics such as observation normalisation)."""

    def set_env_steps(self, env_steps: int) -> None:
        """Moves the algorithm's schedules (entropy, epsilon) to `env_steps`."""

    def preprocess(self, experience: Nest, bootstrap: Nest) -> Dict[str, tf.Tensor]:
        """One replica's `[T, B', ...]` experience (and `[B', ...]` bootstrap steps)
        -> samples: a dict of `[N, ...]` tensors with a `mask`."""

    def loss(self, samples: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
        """A minibatch of samples -> per-sample terms, among them each loss group's."""

    def after_sgd_step(self) -> None:
        """Called after every optimizer step (target-network updates; may do nothing)."""

    def scalars(self) -> Dict[str, tf.Tensor]:
        """`{name: scalar}` the learner writes as `learner/<name>` after each update
        (schedules such as the entropy coefficient or epsilon; may be empty)."""


class Stateless:
    """The contract's defaults for a feed-forward algorithm with nothing to do but learn:
    no policy state, no recurrence, no per-item terms, no mutable settings, no
    schedules, nothing to observe, no target network, no scalars. An algorithm
    inherits it (before `tf.Module`) and overrides what it does have."""

    recurrent: bool = False
    burn_in: int = 0
    item_terms: Sequence[str] = ()
    mutable_settings: Dict[str, Any] = {}  # nothing held in a variable that a run may change

    @property
    def policy_state_spec(self):
        return ()

    def set_env_steps(self, env_steps: int) -> None:
        """No schedules."""
        del env_steps

    def observe(self, batch) -> None:
        """Nothing to learn from a batch before training on it."""
        del batch

    def after_sgd_step(self) -> None:
        """No target network."""

    def scalars(self) -> Dict[str, tf.Tensor]:
        return {}


def per_item_terms(algorithm, samples: Dict[str, tf.Tensor], columns,
                   terms: Sequence[str]) -> Dict[str, tf.Tensor]:
    """The `terms` (among its `item_terms`) of `algorithm.loss(samples)` and the
    samples' `mask`, by column.

    Args:
        algorithm: an `Algorithm`.
        samples: its `preprocess` output for `columns` learn-batch columns
            (windows or sequences): `[N]` leaves (steps) or `[N, T']`
            (sequences).
        columns: how many columns the samples came from (a scalar).
        terms: which per-item terms (a batch source's `wants_back`).

    Returns:
        `{term: [K, columns]}`: K samples per column (a sequence's K are its
        steps), `mask` among them.
    """
    loss = algorithm.loss(samples)
    terms = {k: loss[k] for k in terms}
    by_step = lambda v: tf.transpose(v) if v.shape.rank == 2 else v  # [N, T'] -> [T', N]
    return {k: tf.reshape(by_step(v), [-1, columns])
            for k, v in dict(terms, mask=samples["mask"]).items()}


def check_algorithm(algorithm) -> None:
    """Raises TypeError naming every member of `Algorithm` that `algorithm` lacks."""
    check_contract(algorithm, Algorithm, "an alf_async algorithm")