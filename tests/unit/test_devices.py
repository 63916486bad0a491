"""Device keys: auto resolves to the CPU on a machine without CUDA, and a CUDA device that is
not there (or fp16 without one) is a config error naming the key, before any model loads."""

import pytest
import torch

from posttrain.config import ConfigError, load_config
from posttrain.models.devices import resolve_device

no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without CUDA")


@no_cuda
def test_auto_is_the_cpu_without_cuda_and_cuda_is_refused():
    assert resolve_device("auto") == torch.device("cpu")
    assert resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(ValueError, match="engine.device: cuda:1 needs a CUDA GPU"):
        resolve_device("cuda:1", "engine.device")


@no_cuda
@pytest.mark.parametrize("overrides,message", [
    (["trainer.device=cuda"], "trainer.device: cuda needs a CUDA GPU"),
    (["engine.device=cuda:0"], "engine.device: cuda:0 needs a CUDA GPU"),
    (["trainer.precision=fp16"], "trainer.precision fp16 needs a CUDA device"),
    # every helper model is placed on its own, and each key is checked by name
    (["stages=[opd]", "opd.teachers=[{path: /t}, {path: /u, device: cuda}]"],
     r"opd.teachers.1.device: cuda needs a CUDA GPU"),
    (["stages=[distill]", "distill.teacher=/t", "distill.teacher_device=cuda:0"],
     "distill.teacher_device: cuda:0 needs a CUDA GPU"),
    (["reward.parts={correct: {verifier: numeric}, j: {verifier: judge, weight: 0.1}}",
      "reward.judges={j: {kind: reward_model, model: /rm, device: cuda}}"],
     "reward.judges.j.device: cuda needs a CUDA GPU"),
])
def test_a_device_this_machine_lacks_is_a_config_error(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)


def test_a_device_key_takes_auto_cpu_cuda_or_cuda_n():
    assert load_config(None, ["trainer.device=cpu"]).trainer.device == "cpu"
    with pytest.raises(ConfigError, match="trainer.device"):
        load_config(None, ["trainer.device=tpu"])
    with pytest.raises(ValueError, match="is not auto, cpu, cuda or cuda:N"):
        resolve_device("mps")


def test_a_device_for_an_endpoint_is_refused():
    with pytest.raises(ConfigError, match="device places a local model; this one is served by "
                                          "endpoint http://judge/v1"):
        load_config(None, [
            "reward.parts={correct: {verifier: numeric}, j: {verifier: judge, weight: 0.1}}",
            "reward.judges={j: {kind: score, endpoint: 'http://judge/v1', device: cpu}}"])


def test_helper_models_take_inputs_on_the_callers_device_and_answer_there(tiny_dir):
    """On one CPU the moves are identities, so this checks the wiring: each helper's answer is
    what its model computes on the batch (GPU placement: benchmarks/gpu_check.py helpers)."""
    from posttrain.models import load_model, load_value_model, sequence_scores
    from posttrain.models.devices import model_device, placed
    from posttrain.rollout.judged import RewardModelJudge
    from posttrain.types import Batch, Episode, Segment

    rm = placed(load_value_model(tiny_dir), "cpu")
    assert model_device(rm) == torch.device("cpu")
    episodes = [Episode([Segment.from_prompt_completion([5, 6, 7], [8, 9 + i])])
                for i in range(3)]
    batch = Batch.from_episodes(episodes, 0)
    with torch.no_grad():
        direct = sequence_scores(rm.eval(), batch.input_ids, batch.attention_mask).tolist()
    assert RewardModelJudge(rm, 0)(episodes, [None] * 3) == direct
    assert model_device(load_model(tiny_dir)) == torch.device("cpu")
