import pytest
import torch

from posttrain.types import (
    Batch,
    Episode,
    SamplingParams,
    Segment,
    StepSpan,
    read_episodes,
    write_episodes,
)


def seg(prompt, completion, lp=None, version=0):
    return Segment.from_prompt_completion(prompt, completion, lp, version)


def test_segment_from_prompt_completion_masks_only_completion():
    s = seg([5, 6, 7], [8, 9], [-0.5, -1.5], version=3)
    assert s.loss_mask == [0, 0, 0, 1, 1]
    assert s.logprobs == [0, 0, 0, -0.5, -1.5]
    assert s.versions == [-1, -1, -1, 3, 3]
    assert s.steps == [StepSpan(3, 5)] and s.num_trainable == 2


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(token_ids=[1, 2], loss_mask=[0], logprobs=[0, 0], versions=[0, 0]), "loss_mask"),
        (dict(token_ids=[1, 2], loss_mask=[0, 2], logprobs=[0, 0], versions=[0, 0]), "only 0"),
        (dict(token_ids=[1, 2], loss_mask=[1, 1], logprobs=[0, 0], versions=[0, 0]), "first"),
        (dict(token_ids=[1], loss_mask=[0], logprobs=[0], versions=[0],
              steps=[StepSpan(0, 3)]), "exceeds"),
    ],
)
def test_segment_rejects_inconsistent_fields(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Segment(**kwargs)


def test_episode_requires_segment_and_finite_reward():
    with pytest.raises(ValueError):
        Episode(segments=[])
    with pytest.raises(ValueError, match="finite"):
        Episode([seg([1], [2])], reward=float("nan"))


def test_jsonl_round_trip(tmp_path):
    eps = [
        Episode([seg([1, 2], [3], [-0.25], 1), seg([4], [5, 6], [-1.0, -2.0], 2)],
                rewards={"correct": 1.0, "format": 0.5}, reward=1.05, group_id="g0",
                finish_reason="length", meta={"note": "x"}),
        Episode([seg([9], [])], group_id="g1"),
    ]
    path = tmp_path / "eps.jsonl"
    assert write_episodes(path, eps) == 2
    back = list(read_episodes(path))
    assert [b.to_dict() for b in back] == [e.to_dict() for e in eps]


def test_jsonl_malformed_line_names_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"segments": []}\n')
    with pytest.raises(ValueError, match=":1:"):
        list(read_episodes(path))


def test_batch_pads_and_aligns():
    eps = [Episode([seg([1, 2], [3, 4], [-1.0, -2.0])], reward=1.0, group_id="a"),
           Episode([seg([5], [6])], reward=0.0, group_id="b"),
           Episode([seg([7], [8])], reward=0.5, group_id="a")]
    b = Batch.from_episodes(eps, pad_token_id=0)
    assert b.input_ids.tolist() == [[1, 2, 3, 4], [5, 6, 0, 0], [7, 8, 0, 0]]
    assert b.attention_mask.tolist() == [[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 0, 0]]
    assert b.loss_mask.tolist() == [[0, 0, 1, 1], [0, 1, 0, 0], [0, 1, 0, 0]]
    assert b.behaviour_logprobs[0].tolist() == [0, 0, -1, -2]
    assert b.group_index.tolist() == [0, 1, 0]
    assert b.rewards.tolist() == [1.0, 0.0, 0.5]


def test_batch_select_trims_and_split_covers():
    eps = [Episode([seg([1, 2, 3], [4, 5])]), Episode([seg([1], [2])])]
    b = Batch.from_episodes(eps, 0).replace(advantages=torch.ones(2, 5))
    small = b.select([1])
    assert small.input_ids.shape == (1, 2) and small.advantages.shape == (1, 2)
    parts = b.split(1)
    assert [len(p) for p in parts] == [1, 1]
    with pytest.raises(ValueError):
        b.split(0)
    with pytest.raises(ValueError):
        Batch.from_episodes([], 0)


@pytest.mark.parametrize("kwargs", [dict(max_new_tokens=0), dict(temperature=-1),
                                    dict(top_p=0), dict(top_k=-1)])
def test_sampling_params_validate(kwargs):
    with pytest.raises(ValueError):
        SamplingParams(**kwargs)
    assert SamplingParams(temperature=0).greedy
