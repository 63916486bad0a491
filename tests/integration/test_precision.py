"""Mixed precision (trainer.precision): bf16 compute over fp32 master weights and optimiser
state, a bf16 engine, and the rollout/trainer gap that bf16 leaves."""

import copy

import pytest
import torch

from posttrain.config import OptimConfig, TrainerConfig
from posttrain.config.sections.rl import SYNC_TOLERANCE, SyncConfig
from posttrain.engines import TorchEngine
from posttrain.models.logprobs import naive_sequence_logprobs
from posttrain.recipes.sampling_loop import sync_weights
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
EPS32 = torch.finfo(torch.float32).eps  # 2**-23
EPS_BF16 = torch.finfo(torch.bfloat16).eps  # 2**-7
# the nano Llama's chained reductions: 2 layers x 9, the final norm and the head (counted as
# tests/integration/test_decoders.py counts them)
CHAIN = 2 * 9 + 2


def float64_logprobs(model, batch):
    """The reference: ``model`` in float64 (log-softmax too), its largest |logit| on the
    batch's tokens and every token's log-prob given the ones before it (0.0 first)."""
    ids, mask = batch.input_ids, batch.attention_mask
    with torch.no_grad():
        logits = copy.deepcopy(model).double()(
            input_ids=ids, attention_mask=mask,
            position_ids=(mask.cumsum(-1) - 1).clamp(min=0)).logits
    logp = torch.log_softmax(logits[:, :-1], -1).gather(-1, ids[:, 1:, None])[..., 0]
    return float(logits[mask > 0].abs().max()), torch.nn.functional.pad(logp, (1, 0))


def logprob_bound(eps, largest_logit, largest_logprob):
    """docs/testing.md, a float64 reference: 2 ``eps`` a chained reduction of the largest
    logit, twice (a log-prob is a logit minus the logsumexp of the logits), plus the float32
    log-softmax's own rounding (2 eps32 of the largest |log-prob|)."""
    return 2 * (2 * eps * CHAIN * largest_logit) + 2 * EPS32 * largest_logprob


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
    the log-probs are fp32 tensors that differ from the float64 reference by more than fp32
    rounding can (the fp32 forward stays inside that bound), and within bf16 rounding."""
    batch = batch_of(tokenizer, TEXTS)
    m = batch.loss_mask > 0
    largest_logit, ref = float64_logprobs(model, batch)
    largest_logprob = float(ref[m].abs().max())
    with torch.no_grad():
        fp32, _ = naive_sequence_logprobs(model, batch.input_ids, batch.attention_mask)
    ours = Trainer(copy.deepcopy(model), OptimConfig(), 1,
                   TrainerConfig(precision="bf16")).compute_logprobs(batch)
    assert ours.dtype == torch.float32
    # the chained-reduction rule of docs/testing.md against float64, at eps32 and at eps_bf16
    fp32_bound = logprob_bound(EPS32, largest_logit, largest_logprob)
    bf16_bound = logprob_bound(EPS_BF16, largest_logit, largest_logprob)
    assert float((fp32[m].double() - ref[m]).abs().max()) <= fp32_bound
    assert fp32_bound < float((ours[m].double() - ref[m]).abs().max()) <= bf16_bound


def test_a_bf16_engine_syncs_and_reports_the_bf16_gap(model, tokenizer):
    """The engine holds bf16 weights; the sync's checksum covers what was sent, and its probes
    measure the bf16 rollout-vs-trainer gap: more than two fp32 computations can differ by (an
    fp32 engine's gap stays inside that bound), inside the bf16 default tolerance."""
    trainer = Trainer(copy.deepcopy(model), OptimConfig(), 1, TrainerConfig(precision="bf16"))
    engine = TorchEngine(model, tokenizer.pad_token_id, tokenizer.eos_token_id,
                         dtype=torch.bfloat16)
    outs = engine.generate([tokenizer.encode(t[:12]) for t in TEXTS],
                           SamplingParams(max_new_tokens=16, seed=0))
    probes = [o.prompt_ids + o.token_ids for o in outs]
    report = sync_weights(trainer, engine, 1, probes, SyncConfig().model_copy(
        update={"tolerance": SYNC_TOLERANCE["bf16"]}))
    assert {p.dtype for p in engine.model.parameters()} == {torch.bfloat16}
    scored = probe_batch(probes)
    _, ref = float64_logprobs(model, scored)
    # two float32 forwards in different orders (docs/testing.md): 16 eps32 of the largest
    # |log-prob|; the mismatch is a mean of per-token differences, so at most their largest
    fp32_bound = 16 * EPS32 * float(ref[scored.loss_mask > 0].abs().max())
    assert fp32_bound < report.mismatch < SYNC_TOLERANCE["bf16"]
    fp32 = sync_weights(Trainer(copy.deepcopy(model), OptimConfig(), 1), TorchEngine(
        model, tokenizer.pad_token_id, tokenizer.eos_token_id), 1, probes)
    assert fp32.mismatch <= fp32_bound


def probe_batch(probes):
    """The probes as ``sync_weights`` scores them: every token but the first."""
    return Batch.from_episodes([Episode([Segment(p, [0] + [1] * (len(p) - 1), [0.0] * len(p),
                                                 [-1] * len(p))]) for p in probes], 0)


def test_fp16_needs_a_cuda_device(model):
    with pytest.raises(ValueError, match="trainer.precision fp16 needs a CUDA device"):
        Trainer(model, OptimConfig(), 1, TrainerConfig(precision="fp16"))
