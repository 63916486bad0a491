"""Offline distillation from a live teacher: the step's divergence is the catalogue's on the two
models' full next-token distributions, training closes the gap, and tokenizers must match."""

import copy
import json
import random

import pytest
import torch

from posttrain.algos import get
from posttrain.config import OptimConfig, TrainerConfig
from posttrain.data.conversations import conversation_segment
from posttrain.engines import TorchEngine, weights_checksum
from posttrain.envs import ArithmeticTasks
from posttrain.models import build_tiny, load_model
from posttrain.recipes.distillation.offline import DIVERGENCES, check_same_vocabulary, run_distill
from posttrain.recipes.distillation.teacher_logits import StoredLogits, write_teacher_logits
from posttrain.recipes.distillation.teachers import model_targets
from posttrain.reporting import Reporter
from posttrain.train import Trainer, distill_step
from posttrain.types import Batch, Episode

TASKS = ArithmeticTasks(("+",), 2, 0, 0.1)


def conversations(n, seed=0):
    rng = random.Random(seed)
    return [TASKS.sft_conversation(p, 0.0, rng) for p in TASKS.sample(n, rng)]


@pytest.fixture
def teacher(tiny_dir, tmp_path):
    return load_model(build_tiny(tmp_path / "teacher", "nano", seed=7))  # other weights


def full_distributions(model, batch):
    """Independent path: the model's own forward, all positions, then the masked ones."""
    with torch.no_grad():
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
    logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    return logp[batch.loss_mask[:, 1:] > 0]


@pytest.mark.parametrize("divergence", DIVERGENCES)
def test_the_step_divergence_is_the_catalogues_on_full_distributions(
        divergence, model, teacher, tokenizer):
    batch = Batch.from_episodes(
        [Episode([conversation_segment(tokenizer, c)]) for c in conversations(3)], 0)
    want = get("divergence", divergence)(teacher_logp=full_distributions(teacher, batch),
                                         student_logp=full_distributions(model, batch))
    trainer = Trainer(model, OptimConfig(lr=1e-3), 1, TrainerConfig(micro_batch_size=2))
    got = distill_step(trainer, batch, model_targets(teacher), divergence, {})["divergence"]
    # both score the same float32 models on the same tokens, batched differently: the rounding
    # differences sit in each row's logsumexp (|log Z| ~ 6.3, 1 ulp = 4.8e-7), which shifts a
    # divergence by as much: ~1e-6 for teacher and student, 4e-5 of the smallest (0.025)
    assert want.mean().item() > 0 and got == pytest.approx(want.mean().item(), rel=1e-4)


def test_the_ce_term_is_the_tokens_own_negative_log_likelihood(model, teacher, tokenizer):
    """``ce_weight`` adds SFT's loss: the mean ``-log Q(y_t)`` over the trained tokens, on the
    independent full forward (same rounding bound as above)."""
    batch = Batch.from_episodes(
        [Episode([conversation_segment(tokenizer, c)]) for c in conversations(3)], 0)
    logp = full_distributions(model, batch)
    tokens = batch.input_ids[:, 1:][batch.loss_mask[:, 1:] > 0]
    want = -logp.gather(-1, tokens[:, None]).mean().item()
    trainer = Trainer(model, OptimConfig(lr=1e-3), 1, TrainerConfig(micro_batch_size=2))
    stats = distill_step(trainer, batch, model_targets(teacher), "forward_kl", {},
                         ce_weight=0.5)
    assert stats["ce"] == pytest.approx(want, rel=1e-4)
    assert stats["loss"] == pytest.approx(stats["divergence"] + 0.5 * want, rel=1e-4)


def test_distillation_closes_the_gap_to_the_teacher(model, teacher, tokenizer, tmp_path):
    data = conversations(64)
    trainer = Trainer(model, OptimConfig(lr=3e-3, warmup_steps=0), 30)
    run_distill(trainer, teacher, tokenizer, tokenizer, data, 30, 16,
                Reporter(tmp_path, quiet=True))
    rows = [json.loads(line) for line in open(tmp_path / "metrics.jsonl")]
    first, last = rows[0]["divergence"], rows[-1]["divergence"]
    assert last < 0.5 * first


def test_teacher_and_student_tokenizers_must_match(tokenizer):
    other = copy.deepcopy(tokenizer)
    other.add_tokens(["<extra_token>"])
    check_same_vocabulary(tokenizer, copy.deepcopy(tokenizer))
    with pytest.raises(ValueError, match="the tokenizers differ"):
        run_distill(None, None, tokenizer, other, [], 1, 1, None)
    with pytest.raises(ValueError, match="offline distillation takes"):
        run_distill(None, None, tokenizer, tokenizer, [], 1, 1, None, divergence="opd_sampled")


def test_gkd_mixing_trains_on_the_students_own_samples(model, teacher, tokenizer, tmp_path):
    engine = TorchEngine(model, tokenizer.pad_token_id, tokenizer.eos_token_id)
    trainer = Trainer(model, OptimConfig(lr=3e-3, warmup_steps=0), 6)
    run_distill(trainer, teacher, tokenizer, tokenizer, conversations(32), 6, 8,
                Reporter(tmp_path, quiet=True), lam=0.5, engine=engine, max_new_tokens=8)
    rows = [json.loads(line) for line in open(tmp_path / "metrics.jsonl")]
    draws = [random.Random(f"0:gkd:{s}") for s in range(6)]  # the loop's per-step draws
    expected = [sum(rng.random() < 0.5 for _ in range(8)) / 8 for rng in draws]
    assert [r["on_policy"] for r in rows] == expected and 0 < sum(expected) < 6
    assert engine.version == 6 and engine.weights_checksum() == weights_checksum(
        trainer.named_weights())  # the sampler follows the student
    with pytest.raises(ValueError, match="needs an engine"):
        run_distill(trainer, teacher, tokenizer, tokenizer, [], 1, 1, None, lam=0.5)


def test_stored_full_logits_train_exactly_like_the_live_teacher(model, teacher, tokenizer,
                                                                 tmp_path):
    """With k = V the stored distribution is the teacher's own: the same parameters after
    three steps (up to the float rounding of batching the teacher differently)."""
    # float64: in float32 the rounding of batching the teacher differently is ~eps32 in its
    # log-probs, which Adam's m / (sqrt(v) + eps) amplifies by up to lr / eps_adam on
    # near-zero gradients (processor-dependent, ~1e-6 after 3 steps)
    teacher, model = teacher.to(torch.float64), model.to(torch.float64)
    data = conversations(24)
    path = write_teacher_logits(teacher, tokenizer, data, tmp_path / "t.safetensors",
                                topk=len(tokenizer), batch_size=5)
    finals = []
    for source in (teacher, StoredLogits(path)):
        student = copy.deepcopy(model)
        trainer = Trainer(student, OptimConfig(lr=3e-3, warmup_steps=0), 3)
        run_distill(trainer, source, tokenizer, tokenizer, data, 3, 8,
                    Reporter(tmp_path / str(len(finals)), quiet=True), divergence="jsd")
        finals.append(torch.cat([p.detach().flatten() for p in student.parameters()]))
    # The teacher's log-probs are float32 (token_distributions casts the logits) of float64
    # logits that the two batchings give to within a few eps64 (2.2e-16): equal after rounding
    # (unless a logit sits that close to a float32 rounding boundary, ~1e-9 a logit), so the
    # runs are the same float64 arithmetic. atol allows a reordered float64 sum in a gradient
    # entry (< 1000 terms, each < 1: < 1000 * 2.2e-16 = 2.2e-13), which Adam turns into at most
    # lr * 2.2e-13 / eps_adam = 3e-3 * 2.2e-13 / 1e-8 = 6.6e-8 a step: 2e-7 over 3 steps.
    torch.testing.assert_close(finals[0], finals[1], atol=2e-7, rtol=0)
    assert (finals[0] - torch.cat([p.flatten() for p in model.parameters()])).abs().max() > 1e-4


def test_stored_top_k_keeps_the_top_and_spreads_the_tail(teacher, tokenizer, tmp_path):
    data = conversations(3)
    stored = StoredLogits(write_teacher_logits(teacher, tokenizer, data,
                                               tmp_path / "t.safetensors", topk=4))
    batch = Batch.from_episodes([Episode([conversation_segment(tokenizer, c)]) for c in data],
                                0)
    full = full_distributions(teacher, batch)
    dense = torch.cat([stored.dense(i) for i in range(3)])
    top = full.topk(4, dim=-1)
    # stored (decoder + head on the loss rows) and full forward: two float32 computations of
    # the same log-probs, within 16 eps32 of the largest (~8 chained reductions, ~2 eps32 each)
    eps32 = torch.finfo(torch.float32).eps
    torch.testing.assert_close(dense.gather(-1, top.indices), top.values,
                               atol=16 * eps32 * float(top.values.abs().max()), rtol=0)
    # 512 probabilities summed in float32: rounding ~sqrt(512) = 23 eps32, any order; 64 eps32
    torch.testing.assert_close(dense.exp().sum(-1), torch.ones(len(dense)), atol=64 * eps32,
                               rtol=0)
    rest = dense.scatter(-1, top.indices, float("inf"))
    assert (rest.min(-1).values == rest.masked_fill(rest == float("inf"), -1e9).max(-1).values
            ).all()  # one tail value a position


def test_stored_logits_refuse_other_data_and_bad_files(teacher, model, tokenizer, tmp_path):
    path = write_teacher_logits(teacher, tokenizer, conversations(4), tmp_path / "t.st", 8)
    trainer = Trainer(model, OptimConfig(), 1)
    with pytest.raises(ValueError, match="written for other data"):
        run_distill(trainer, StoredLogits(path), tokenizer, None, conversations(4, seed=1), 1,
                    2, Reporter(tmp_path, quiet=True))
    with pytest.raises(ValueError, match="needs a live teacher"):
        run_distill(trainer, StoredLogits(path), tokenizer, None, conversations(4), 1, 2,
                    Reporter(tmp_path, quiet=True), lam=0.5, engine=object())
    with pytest.raises(FileNotFoundError, match="teacher-logits"):
        StoredLogits(tmp_path / "missing")
    assert not list(tmp_path.glob("*.tmp"))
