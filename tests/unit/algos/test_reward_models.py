"""§9 reward-model losses and graders."""

import pytest
import torch
from algo_helpers import t

from posttrain.algos import get

# rel=1e-4 against a literal: the spec's worked examples are quoted to 5 significant
# figures (rounding <= 5e-5 relative); the float64 arithmetic itself is good to ~1e-15.


def test_bradley_terry_and_pairwise_classifier_spec_examples():
    bt = get("reward_model", "bradley_terry")
    assert bt(chosen_scores=t([1.0]), rejected_scores=t([0.0])).item() == pytest.approx(
        0.31326, rel=1e-4)
    assert bt(chosen_scores=t([0.5]), rejected_scores=t([0.5])).item() == pytest.approx(
        0.69315, rel=1e-4)
    pc = get("reward_model", "pairwise_classifier")(scores=t([2.0]), targets=t([1.0]))
    assert pc.item() == pytest.approx(0.12693, rel=1e-4)


def test_bt_token_span_uses_the_divergent_span():
    ids_c = torch.tensor([[1, 2, 3, 4, 0], [5, 6, 7, 0, 0]])
    ids_r = torch.tensor([[1, 2, 9, 9, 9], [5, 6, 7, 0, 0]])
    vc = t([[0, 0, 1.0, 2.0, 0], [0, 0, 3.0, 0, 0]])
    vr = t([[9, 9, 0.0, 0.0, 1.0], [0, 0, 1.0, 0, 0]])
    out = get("reward_model", "bt_token_span")(
        chosen_values=vc, rejected_values=vr, chosen_ids=ids_c, rejected_ids=ids_r,
        chosen_lengths=torch.tensor([4, 3]), rejected_lengths=torch.tensor([5, 3]))
    ls = torch.nn.functional.logsigmoid
    first = -(ls(t(1.0)) + ls(t(2.0)) + ls(t(-1.0))) / 3  # positions 2..4: the tokens 9 9 9
    second = -ls(t(2.0))  # identical responses: the last token only
    torch.testing.assert_close(out, torch.stack([first, second]))


def test_genrm_spec_example_and_failures():
    genrm = get("reward_model", "genrm")
    outs = ["ok <score>7</score>", "no score here", "<score>1</score> then <score>9</score>"]
    assert genrm(outputs=outs, score_max=10) == (pytest.approx(0.8), False)
    assert genrm(outputs=["nothing"], score_max=10) == (0.0, True)
    garbage = ["<score>11</score>", "<score>-1</score>", "<score>x</score>", "", "<score>4"]
    assert genrm(outputs=garbage, score_max=10) == (0.0, True)
    assert genrm(outputs=[*garbage, "<score>5.5</score>"], score_max=10) == (
        pytest.approx(0.55), False)


def test_group_binary_comparison_spec_example():
    outcomes = t([[0, 1, 1], [0, 0, 0.5], [0, 0, 0]])  # y1 beats y2; y2 vs y3 tie if in budget
    r = get("reward_model", "group_binary_comparison")(
        outcomes=outcomes, over_budget=torch.tensor([False, False, True]))
    torch.testing.assert_close(r, t([1.0, 0.5, 0.0]))
    both_over = get("reward_model", "group_binary_comparison")(
        outcomes=t([[0, 1], [0, 0]]), over_budget=torch.tensor([True, True]))
    torch.testing.assert_close(both_over, t([0.5, 0.5]))


def test_gradcheck_reward_model_losses():
    s = t([0.3, -1.2]).requires_grad_(True)
    assert torch.autograd.gradcheck(
        lambda x: get("reward_model", "bradley_terry")(chosen_scores=x,
                                                       rejected_scores=t([0.1, 0.4])), (s,))
    assert torch.autograd.gradcheck(
        lambda x: get("reward_model", "pairwise_classifier")(scores=x, targets=t([1.0, 0.0])),
        (s,))
    vc = t([[0.1, 0.5, -0.3]]).requires_grad_(True)
    ids = torch.tensor([[1, 2, 3]])
    assert torch.autograd.gradcheck(
        lambda x: get("reward_model", "bt_token_span")(
            chosen_values=x, rejected_values=t([[0.0, 0.2, 0.1]]), chosen_ids=ids,
            rejected_ids=torch.tensor([[1, 4, 5]]), chosen_lengths=torch.tensor([3]),
            rejected_lengths=torch.tensor([3])), (vc,))
