"""Mixed precision (trainer.precision): bf16 compute over fp32 master weights and optimiser
state, a bf16 engine, and the rollout/trainer gap that bf16 leaves."""

import copy

import pytest
import torch

from posttrain.engines import TorchEngine
from posttrain.models.logprobs import naive_sequence_logprobs
from posttrain.recipes.rl import sync_weights
from posttrain.settings import OptimConfig, TrainerConfig
from posttrain.settings.rl_config import SYNC_TOLERANCE, SyncConfig
from posttrain.train import Trainer
from posttrain.train.objective_steps import sft_step
from posttrain.types import Batch, Episode, SamplingParams, Segment


def batch_of(tokenizer, texts):
    segs = []
    for text in texts:
        ids = tokenizer.encode(text)
        segs.append(Segment(ids, [0] + [1] * (len(ids) - 1), [0.0] * len(ids), [-1] * len(ids)))
    return Batch.from_episodes([Episode([s]) for s in segs], tokenizer.pad_token_id)


TEXTS = ["What is 12+30? 42", "What is 7+8? 15", "What is 21+21? 42", "What is 3+4? 7"]


def test_bf16_keeps_fp32_master_weights_and_optimiser_state(model, tokenizer):
    """A model handed over in bf16 is trained in fp32 (the master copy); after bf16 steps the
    parameters and both Adam moments are fp32 and the loss went down."""
    trainer = Trainer(model.to(torch.bfloat16), OptimConfig(lr=1e-2, warmup_steps=0), 10,
                      TrainerConfig(precision="bf16"))
    batch = batch_of(tokenizer, TEXTS)
    losses = [trainer.apply(sft_step, batch)["loss"] for _ in range(5)]
    assert {p.dtype for p in trainer.model.parameters()} == {torch.float32}
    moments = [v for s in trainer.optimizer.state.values() for v in s.values()
               if torch.is_tensor(v) and v.dim() > 0]
    assert moments and {v.dtype for v in moments} == {torch.float32}
    assert losses[-1] < losses[0]


def test_bf16_log_probs_are_bf16_close_and_upcast(model, tokenizer):
    """Under autocast the matmuls run in bf16 (8 bits of mantissa) and log-softmax in fp32:
    the log-probs are fp32 tensors that differ from the fp32 reference by more than fp32
    rounding, by far less than a bf16 error on every logit would cause."""
    batch = batch_of(tokenizer, TEXTS)
    with torch.no_grad():
        ref, _ = naive_sequence_logprobs(model, batch.input_ids, batch.attention_mask)
    ours = Trainer(copy.deepcopy(model), OptimConfig(), 1,
                   TrainerConfig(precision="bf16")).compute_logprobs(batch)
    m = batch.loss_mask > 0
    gap = (ours[m] - ref[m]).abs()
    assert ours.dtype == torch.float32
    assert 1e-5 < float(gap.max()) < 0.1


def test_a_bf16_engine_syncs_and_reports_the_bf16_gap(model, tokenizer):
    """The engine holds bf16 weights; the sync's checksum covers what was sent, and its probes
    measure the bf16 rollout-vs-trainer gap: ~1e-3, far above fp32's ~1e-7, inside the bf16
    default tolerance and outside fp32's."""
    trainer = Trainer(copy.deepcopy(model), OptimConfig(), 1, TrainerConfig(precision="bf16"))
    engine = TorchEngine(model, tokenizer.pad_token_id, tokenizer.eos_token_id,
                         dtype=torch.bfloat16)
    outs = engine.generate([tokenizer.encode(t[:12]) for t in TEXTS],
                           SamplingParams(max_new_tokens=16, seed=0))
    probes = [o.prompt_ids + o.token_ids for o in outs]
    report = sync_weights(trainer, engine, 1, probes, SyncConfig().model_copy(
        update={"tolerance": SYNC_TOLERANCE["bf16"]}))
    assert {p.dtype for p in engine.model.parameters()} == {torch.bfloat16}
    assert 1e-5 < report.mismatch < SYNC_TOLERANCE["bf16"]
    assert report.mismatch > SYNC_TOLERANCE["fp32"] / 10
    fp32 = sync_weights(Trainer(copy.deepcopy(model), OptimConfig(), 1), TorchEngine(
        model, tokenizer.pad_token_id, tokenizer.eos_token_id), 1, probes)
    assert fp32.mismatch < 1e-5


def test_fp16_needs_a_cuda_device(model):
    with pytest.raises(ValueError, match="trainer.precision fp16 needs a CUDA device"):
        Trainer(model, OptimConfig(), 1, TrainerConfig(precision="fp16"))
