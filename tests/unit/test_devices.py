"""Device keys: auto resolves to the CPU on a machine without CUDA, and a CUDA device that is
not there (or fp16 without one) is a config error naming the key, before any model loads; the
helper models (reward-model judge, teacher) answer what their models compute."""

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


def test_helper_models_answer_what_their_models_compute(tiny_dir):
    """A reward-model judge's scores, a teacher's token scores and its full distributions on a
    right-padded batch, each against its model's float64 forward of every sequence alone. On
    one CPU the device moves are identities, so this checks the values, not the placement;
    the placement (model on the GPU, batch on the CPU) is benchmarks/gpu_check.py's
    ``helpers`` section, run on a GPU."""
    import copy

    from posttrain.models import load_model, load_value_model
    from posttrain.models.devices import model_device, placed
    from posttrain.recipes.distillation.teachers import Teacher, model_targets
    from posttrain.rollout.wrappers.judged import RewardModelJudge
    from posttrain.types import Batch, Episode, Segment

    rm = placed(load_value_model(tiny_dir), "cpu")
    assert model_device(rm) == torch.device("cpu")
    policy = load_model(tiny_dir)
    assert model_device(policy) == torch.device("cpu")
    # lengths 5, 4 and 7: the batch pads two rows
    episodes = [Episode([Segment.from_prompt_completion(prompt, completion)])
                for prompt, completion in [([5, 6, 7], [8, 9]), ([5, 6], [8, 10]),
                                           ([4, 5, 6, 7], [8, 9, 11])]]
    sequences = [e.segments[0].token_ids for e in episodes]
    rm64, policy64 = copy.deepcopy(rm).double().eval(), copy.deepcopy(policy).double().eval()
    with torch.no_grad():
        scores = [float(rm64(input_ids=torch.tensor([s])).logits[0, -1, 0]) for s in sequences]
        logits = [policy64(input_ids=torch.tensor([s])).logits[0] for s in sequences]
    logps = [torch.log_softmax(z, dim=-1) for z in logits]
    eps32 = torch.finfo(torch.float32).eps
    # float32 against float64 (docs/testing.md): 2 eps32 a chained reduction; the nano Llama's
    # chain is 2 layers x 9, the final norm and the head (tests/integration/test_decoders.py)
    chain = 2 * 9 + 2
    # the scalar head sums ~64 products of O(1) normalised hidden states and small weights:
    # its terms are O(1) whatever the score's own size
    rm_bound = 2 * eps32 * chain * max(1.0, *map(abs, scores))
    judged = RewardModelJudge(rm, 0)(episodes, [None] * 3)
    assert max(abs(a - b) for a, b in zip(judged, scores)) <= rm_bound
    # a log-prob is a logit minus a logsumexp: twice the logits' error, plus the float32
    # log-softmax's own rounding (2 eps32 of the largest |log-prob|)
    lp_bound = (2 * (2 * eps32 * chain * max(float(z.abs().max()) for z in logits))
                + 2 * eps32 * max(float(lp.abs().max()) for lp in logps))
    teacher = Teacher("t", model=policy)
    for got, s, lp in zip(teacher.score(sequences, 0), sequences, logps):
        want = [0.0] + [float(lp[t - 1, s[t]]) for t in range(1, len(s))]
        assert len(got) == len(s) and max(abs(a - b) for a, b in zip(got, want)) <= lp_bound
    batch = Batch.from_episodes(episodes, 0)
    distributions = model_targets(policy)(batch)[0][2]
    # the next-token distribution before every completion token, row by row
    want = torch.cat([lp[[t - 1 for t, m in enumerate(e.segments[0].loss_mask) if m]]
                      for e, lp in zip(episodes, logps)])
    assert distributions.shape == want.shape
    assert float((distributions.double() - want).abs().max()) <= lp_bound
