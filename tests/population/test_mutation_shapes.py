"""`alf_async.population.shapes`: which differences between the builds at LOW and HIGH
refuse a mutation (the builds themselves: tests/test_pbt.py's bad-input cases)."""

from alf_async.population import shapes
from alf_async.population.mutations import parse_mutation


def _built(variables=([4, 64], [64]), learn_batch=(2, 8, 64), specs=("obs", "act")):
    return dict(variables=[list(v) for v in variables], learn_batch=list(learn_batch),
                specs=list(specs), names=[f"v{i}:0" for i in range(len(variables))])


def test_the_same_shapes_pass_and_each_kind_of_change_is_named():
    assert shapes._difference(_built(), _built()) == ""  # pylint: disable=protected-access
    cases = {
        "it changes the shape of the algorithm's variable v0:0 from [4, 64] at LOW to "
        "[4, 128] at HIGH": _built(variables=([4, 128], [64])),
        "it changes the number of variables from 2 at LOW to 1 at HIGH":
            _built(variables=([4, 64],)),
        "it changes the learn batch [Q, T, E x B] from [2, 8, 64] at LOW to [2, 16, 64] at "
        "HIGH": _built(learn_batch=(2, 16, 64)),
        "it changes the env's observation or action spec": _built(specs=("obs2", "act"))}
    for line, high in cases.items():
        assert shapes._difference(_built(), high) == line  # pylint: disable=protected-access


def test_settings_held_in_variables_need_no_build():
    lr = parse_mutation("alf_async.Learner.learning_rate:log_uniform(1e-4,1e-2)")
    shapes.check(["no/such/file.gin"], [], [lr], timeout_secs=0.001)  # no child started
