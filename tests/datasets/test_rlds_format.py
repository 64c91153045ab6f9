import numpy as np

from alf_async.datasets.rlds_format import from_rlds, to_rlds
from dataset_fakes import concatenated, episode


def test_rlds_steps_carry_the_reward_and_discount_of_their_action():
    steps = episode(4, terminated=True, tag=0)  # rewards on arrival: 0, 1, 2, 3
    rlds = to_rlds(steps)
    assert rlds["reward"].tolist() == [1, 2, 3, 0]  # of the action taken; LAST's unused
    assert rlds["discount"].tolist() == [1, 1, 0, 0]
    assert rlds["is_first"].tolist() == [True, False, False, False]
    assert rlds["is_last"].tolist() == [False, False, False, True]
    assert rlds["is_terminal"].tolist() == [False, False, False, True]
    assert not to_rlds(episode(4, terminated=False, tag=0))["is_terminal"].any()


def test_episodes_go_to_rlds_and_back_unchanged():
    episodes = [episode(5, True, 0), episode(3, False, 1), episode(7, True, 2)]
    rlds = concatenated([to_rlds(e) for e in episodes])
    back, expected = from_rlds(rlds), concatenated(episodes)
    assert set(back) == set(expected)
    for key, value in expected.items():
        np.testing.assert_array_equal(back[key], value, err_msg=key)


def test_an_episode_cut_short_ends_as_truncated_and_other_tools_steps_get_zero_policy_info():
    rlds = to_rlds(episode(5, True, 0))
    cut = {k: v[:3] for k, v in rlds.items() if k not in ("log_prob", "policy_version")}
    back = from_rlds(cut)
    assert back["step_type"].tolist() == [0, 1, 2]
    assert back["discount"][-1] == 1.0  # bootstraps from its last observation
    assert back["log_prob"].tolist() == [0, 0, 0] and back["policy_version"].tolist() == [0] * 3
