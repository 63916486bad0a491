"""Tinker's built-in losses against hand-computed sums, and the request order a training
client's seq_ids give."""

import math
import threading

import pytest
import torch

from posttrain.tinker_api.losses import LOSSES, BadRequest
from posttrain.tinker_api.requests import Requests

LP = torch.tensor([-1.0, -2.0, -0.5], dtype=torch.float64)


def test_cross_entropy_is_the_weighted_sum_of_negative_logprobs():
    loss = LOSSES["cross_entropy"](LP, {"weights": torch.tensor([1.0, 0.0, 2.0])}, {})
    assert float(loss) == pytest.approx(1.0 + 0.0 + 1.0)  # -(1*-1 + 0*-2 + 2*-0.5)


def test_importance_sampling_weights_advantages_by_the_ratio():
    inputs = {"logprobs": torch.tensor([-1.0, -1.5, -0.5]),
              "advantages": torch.tensor([2.0, -1.0, 0.5])}
    # r = exp(lp - q) = (1, e^-0.5, 1): -(2 - e^-0.5 + 0.5)
    expected = -(2.0 - math.exp(-0.5) + 0.5)
    assert float(LOSSES["importance_sampling"](LP, inputs, {})) == pytest.approx(expected)


def test_ppo_clips_the_ratio_at_its_thresholds():
    lp = torch.tensor([0.0, 0.0, 0.0], dtype=torch.float64)
    q = torch.tensor([math.log(2.0), -math.log(2.0), -math.log(1.1)])  # r = 0.5, 2, 1.1
    adv = torch.tensor([1.0, 1.0, -1.0])
    inputs = {"logprobs": q, "advantages": adv}
    # min(r A, clip(r, .8, 1.2) A): min(.5, .8) = .5; min(2, 1.2) = 1.2; min(-1.1, -1.1)
    assert float(LOSSES["ppo"](lp, inputs, {})) == pytest.approx(-(0.5 + 1.2 - 1.1))
    wide = {"clip_low_threshold": 0.1, "clip_high_threshold": 3.0}
    assert float(LOSSES["ppo"](lp, inputs, wide)) == pytest.approx(-(0.5 + 2.0 - 1.1))


def test_cispo_weights_the_logprob_by_the_clipped_ratio_as_a_constant():
    lp = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    q = torch.tensor([math.log(8.0), -math.log(8.0), 0.0])  # r = 1/8, 8, 1
    adv = torch.tensor([1.0, 2.0, -1.0])
    inputs = {"logprobs": q, "advantages": adv}
    shifted = lp - torch.tensor([0.0, 0.0, 0.5], dtype=torch.float64)  # lp = 0, 0, -0.5
    loss = LOSSES["cispo"](shifted, inputs, {})
    # clip(r, 0, 4) = 1/8, 4, e^-0.5 (r of the third: exp(-0.5 - 0)); -sum c lp A
    assert float(loss) == pytest.approx(-(math.exp(-0.5) * -0.5 * -1.0))
    loss.backward()
    # d/dlp = -c A, the coefficient held constant: no token's gradient is zeroed
    assert lp.grad.tolist() == pytest.approx([-0.125, -8.0, math.exp(-0.5)])


def test_dro_penalises_the_squared_log_ratio_and_needs_its_beta():
    inputs = {"logprobs": torch.tensor([-1.0, -1.5, -0.5]),
              "advantages": torch.tensor([2.0, -1.0, 0.5])}
    # -(sum lp A - beta/2 sum (lp - q)^2) = -((-2 + 2 - 0.25) - 0.05 (0 + 0.25 + 0))
    assert float(LOSSES["dro"](LP, inputs, {"beta": 0.1})) == pytest.approx(0.25 + 0.0125)
    with pytest.raises(BadRequest, match="beta"):
        LOSSES["dro"](LP, inputs, {})


def test_a_loss_without_its_inputs_is_refused():
    with pytest.raises(BadRequest, match="advantages"):
        LOSSES["ppo"](LP, {"logprobs": LP}, {})


def test_a_training_clients_requests_run_in_seq_id_order():
    requests, ran, done = Requests(), [], threading.Event()
    late = requests.submit_ordered("m", 3, lambda: ran.append(3) or done.set())
    second = requests.submit_ordered("m", 2, lambda: ran.append(2))
    assert requests.submit_ordered("m", 2, lambda: ran.append(-1)) == second  # resubmitted
    assert not ran
    requests.submit_ordered("m", 1, lambda: ran.append(1))
    assert done.wait(10) and ran == [1, 2, 3]
    assert requests.results[late].result(10) is None
    with pytest.raises(ValueError, match="already ran"):
        requests.submit_ordered("m", 0, lambda: None)
    requests.close()
