"""Sample-level dispatch: pacing by staleness, per-group caps, requeues, the buffer's ledger and
length-bias control."""

import pytest

from posttrain.envs import ArithmeticTasks
from posttrain.rollout.buffer import RolloutBuffer
from posttrain.rollout.dispatch import Dispatcher, SampleRequest, TaskMixer
from posttrain.types import Episode, Segment

G = 3


def source(group):
    return f"task{group}", [100 * group + i for i in range(G)]


def drain(d):
    out = []
    while (r := d.next()) is not None:
        out.append(r)
    return out


def episode(group):
    return Episode([Segment.from_prompt_completion([1], [2])], group_id=str(group))


def test_pacing_allows_staleness_plus_one_steps_of_groups():
    d = Dispatcher(source, G, groups_per_step=2, max_staleness=1)
    first = drain(d)
    assert [(r.group, r.index) for r in first] == [(g, i) for g in range(4) for i in range(G)]
    assert [r.seed for r in first[:G]] == [0, 1, 2] and first[G].task == "task1"
    for r in first:
        d.returned(r)
    assert d.next() is None  # 4 groups outstanding = (1 + 1) x 2
    d.release(2)  # the trainer took a step's groups and synced
    assert {r.group for r in drain(d)} == {4, 5}
    with pytest.raises(ValueError, match="only 4 outstanding"):
        d.release(5)


def test_zero_staleness_waits_for_every_release():
    d = Dispatcher(source, G, groups_per_step=2, max_staleness=0, start_group=10)
    assert {r.group for r in drain(d)} == {10, 11}
    d.release(1)
    assert {r.group for r in drain(d)} == {12}


def test_per_group_cap_hands_out_the_rest_as_samples_return():
    d = Dispatcher(source, G, groups_per_step=1, max_staleness=0, max_inflight_per_group=2)
    a, b = drain(d)
    assert (a.index, b.index) == (0, 1)
    d.returned(a)
    (c,) = drain(d)
    assert (c.group, c.index) == (0, 2)


def test_a_lost_sample_is_handed_out_again_first():
    d = Dispatcher(source, G, groups_per_step=2, max_staleness=0, max_inflight_per_group=1)
    a = d.next()
    d.requeue(a)
    assert d.next() == a


def test_buffer_closes_groups_and_ledger_rejects_a_sample_counted_twice():
    buf = RolloutBuffer(2)
    r0, r1 = SampleRequest(0, 0, "t", 1), SampleRequest(0, 1, "t", 2)
    buf.opened(0)
    assert buf.add(r0, episode(0)) == "open" and buf.ready() == 0
    assert buf.add(r0, episode(0)) == "duplicate" and buf.duplicates == 1
    assert buf.add(r1, episode(0)) == "complete" and buf.ready() == 1
    (group,) = buf.take(5)
    assert len(group) == 2 and buf.ready() == 0
    assert buf.add(r1, episode(0)) == "duplicate"  # even after its group was taken


@pytest.mark.parametrize("max_overtake, takeable", [(None, [1, 3]), (2, [1, 3]), (1, [1]),
                                                     (0, [])])
def test_overtaking_finished_groups_are_held_back(max_overtake, takeable):
    buf = RolloutBuffer(1, max_overtake=max_overtake)
    for g in range(4):
        buf.opened(g)
    buf.add(SampleRequest(3, 0, "t", 0), episode(3))
    buf.add(SampleRequest(1, 0, "t", 0), episode(1))
    # groups 0 and 2 are still generating (long answers); 1 and 3 finished early
    assert [int(grp[0].group_id) for grp in buf.take(5)] == takeable


def test_task_mixer_follows_the_ratios_and_is_reproducible():
    families = {"add": ArithmeticTasks(("+",), 1), "mul": ArithmeticTasks(("*",), 1)}
    mixer = TaskMixer(families, {"add": 3, "mul": 1}, seed=1)
    names = [mixer(n)[0] for n in range(4000)]
    assert abs(names.count("add") / 4000 - 0.75) < 0.03  # ~4 standard errors
    assert mixer(17) == TaskMixer(families, {"add": 3, "mul": 1}, seed=1)(17)
    assert "*" in mixer(names.index("mul"))[1].messages()[-1]["content"]
    task, seeds = mixer.groups(4)(names.index("mul"))
    assert "*" in task.messages()[-1]["content"] and len(set(seeds)) == 4
    assert mixer.groups(4)(0)[1] != mixer.groups(4)(1)[1]
    with pytest.raises(ValueError, match="differ"):
        TaskMixer(families, {"add": 1})
    with pytest.raises(ValueError, match="positive sum"):
        TaskMixer(families, {"add": 0, "mul": 0})
