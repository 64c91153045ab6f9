"""Whether each mutation keeps every shape a population's checkpoints hold.

A member that exploits restores another member's checkpoint under its own
settings, so a binding whose value changes a variable's shape (a network's
size) or the learn batch's (Q, T, E x B, the env's specs) cannot be mutated.
`check` builds the algorithm at each mutation's LOW and at its HIGH (one env for
its specs; no driver, no training), in a child process so that the `pbt`
command stays free of TensorFlow, and refuses the first mutation that changes
a shape, in one line, before anything starts. A binding gin cannot apply (a
misspelt configurable) is refused the same way, with gin's own line.

    python -m alf_async.population.shapes < {"gin_files": [...], "gin_params": [...],
                                             "mutations": [[BINDING, LOW, HIGH], ...]}

prints `{BINDING: what changes}` for each refused one (JSON).
"""

import json
import subprocess
import sys
from typing import Dict, List, Sequence

from alf_async.population.mutations import IN_VARIABLES, Mutation


def check(gin_files: Sequence[str], gin_params: Sequence[str],
          mutations: Sequence[Mutation], timeout_secs: float = 300.0) -> None:
    """Raises ValueError (one line) for the first mutation that changes a shape, or that
    gin cannot apply. A setting the learner holds in a variable (`IN_VARIABLES`: a
    scalar it takes again at a resume) changes none: no build for those."""
    built = [m for m in mutations if m.setting not in IN_VARIABLES]
    if not built:
        return
    request = dict(gin_files=list(gin_files), gin_params=list(gin_params),
                   mutations=[[m.binding, _value(m, m.low), _value(m, m.high)] for m in built])
    done = subprocess.run([sys.executable, "-m", "alf_async.population.shapes"],
                          input=json.dumps(request), capture_output=True, text=True,
                          timeout=timeout_secs, check=False)
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        raise ValueError(f"--mutate: the population's config does not build: "
                         f"{lines[-1] if lines else f'exit {done.returncode}'}")
    refused = json.loads(done.stdout.strip().splitlines()[-1])
    for mutation in built:
        if mutation.binding in refused:
            raise ValueError(f"--mutate={mutation.binding}: {refused[mutation.binding]}; a "
                             f"member restores others' checkpoints, so a mutation must keep "
                             f"every shape")


def _value(mutation: Mutation, bound: float):
    return int(bound) if mutation.integer else bound


def _shapes(gin_files: Sequence[str], bindings: Sequence[str]) -> Dict[str, List]:
    """The shapes a run of this config holds: its algorithm's variables (in order, and
    their names), its learn batch's `[Q, T, E x B]` and its env's specs."""
    # pylint: disable=import-outside-toplevel
    import gin

    from alf_async import config
    from alf_async.environments import create_environment
    from alf_async.training import assembly

    gin.clear_config()
    config.parse_config(gin_files, bindings)
    records = assembly.run_settings()
    env = create_environment(num_parallel_environments=1, num_workers=0)
    try:
        specs = [str(env.time_step_spec().observation), str(env.action_spec())]
        algorithm = records.run.algorithm_class(env.time_step_spec(), env.action_spec())
    finally:
        env.close()
    sizes = records.sizes
    return dict(variables=[v.shape.as_list() for v in algorithm.variables],
                names=[v.name for v in algorithm.variables],
                learn_batch=[sizes.learn_queue_cap, sizes.unroll_length,
                             sizes.num_envs * records.env.num_parallel_environments],
                specs=specs)


def _difference(low: Dict[str, List], high: Dict[str, List]) -> str:
    """What differs between two `_shapes` (empty: nothing)."""
    if low["specs"] != high["specs"]:
        return "it changes the env's observation or action spec"
    if low["learn_batch"] != high["learn_batch"]:
        return (f"it changes the learn batch [Q, T, E x B] from {low['learn_batch']} at LOW "
                f"to {high['learn_batch']} at HIGH")
    if len(low["variables"]) != len(high["variables"]):
        return (f"it changes the number of variables from {len(low['variables'])} at LOW to "
                f"{len(high['variables'])} at HIGH")
    for index, (a, b) in enumerate(zip(low["variables"], high["variables"])):
        if a != b:
            return (f"it changes the shape of the algorithm's variable {low['names'][index]} "
                    f"from {a} at LOW to {b} at HIGH")
    return ""


def main() -> None:
    request = json.load(sys.stdin)
    from alf_async.learning.devices import op_threads  # pylint: disable=import-outside-toplevel
    op_threads(intra_op=1, inter_op=1)
    files, params = request["gin_files"], request["gin_params"]
    refused = {}
    for binding, low, high in request["mutations"]:
        difference = _difference(_shapes(files, [*params, f"{binding}={low!r}"]),
                                 _shapes(files, [*params, f"{binding}={high!r}"]))
        if difference:
            refused[binding] = difference
    print(json.dumps(refused))


if __name__ == "__main__":
    main()
