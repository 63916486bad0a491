"""On-policy distillation: routing by domain and effort, teacher log-probs and distributions
of the student's own samples checked against the models' plain forward, the multi-teacher
full-vocabulary step against a hand-built mixture, self-distillation's privileged context, and
runs that close the gap to the teacher."""

import json
import random

import pytest
import torch

from posttrain.algos import get
from posttrain.config import ActorConfig, EvalConfig, OPDConfig, OptimConfig, TrainerConfig
from posttrain.engines import TorchEngine
from posttrain.envs import ArithmeticTasks
from posttrain.features.effort.task import EffortTask
from posttrain.models import build_tiny, load_model
from posttrain.recipes.distillation.opd import OPDRun, run_opd
from posttrain.recipes.distillation.self_distill import self_teacher
from posttrain.recipes.distillation.teachers import (
    Samples,
    Teacher,
    distribution_targets,
    route,
    sampled_logprobs,
    teacher_sequences,
)
from posttrain.reporting import Reporter
from posttrain.rewards import RewardFunction
from posttrain.rollout import evaluate
from posttrain.rollout.single_turn import rollout
from posttrain.train import Trainer, distill_step
from posttrain.types import Batch, SamplingParams

TASKS = ArithmeticTasks(("+", "-"), 2, 0, 0.1)
REWARD = RewardFunction({"correct": ("numeric", 1.0), "format": ("format", 0.1)})


@pytest.fixture
def teachers(tmp_path):
    return [load_model(build_tiny(tmp_path / f"t{s}", "nano", seed=s)) for s in (7, 8)]


def samples(model, tokenizer, n=4, group_size=2, efforts=None, seed=0):
    problems = TASKS.sample(n, random.Random(seed))
    if efforts:
        problems = [EffortTask(p, e) for p in problems for e in efforts]
    engine = TorchEngine(model, tokenizer.pad_token_id, tokenizer.eos_token_id)
    sampling = SamplingParams(max_new_tokens=8, temperature=1.0, seed=seed,
                              stop_token_ids=(tokenizer.eos_token_id,))
    episodes = rollout(engine, tokenizer, problems, REWARD, sampling, group_size)
    keep = [j for j, e in enumerate(episodes) if e.segments[0].num_trainable]
    return Samples([episodes[j] for j in keep], [problems[j // group_size] for j in keep])


def forward_logp(model, ids):
    """Independent path: the model's plain forward over one sequence, ``[len - 1, V]``."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0, :-1].float()
    return torch.log_softmax(logits, dim=-1)


def test_routing_by_domain_and_effort_with_weights(model, tokenizer):
    eps = samples(model, tokenizer, 6, 1, efforts=(10, 90)).episodes
    ts = [Teacher("add", model, domains=("addition",)),
          Teacher("sub-low", model, domains=("subtraction",), efforts=(10,)),
          Teacher("any-high", model, efforts=(90,), weight=3.0)]
    w = route(ts, [e for e in eps if e.meta["domain"] == "addition" or e.meta["effort"] == 90])
    for ep, row in zip([e for e in eps if e.meta["domain"] == "addition"
                        or e.meta["effort"] == 90], w.tolist()):
        add, high = ep.meta["domain"] == "addition", ep.meta["effort"] == 90
        want = [0.25, 0, 0.75] if add and high else [1, 0, 0] if add else [0, 0, 1]
        assert row == pytest.approx(want)
    with pytest.raises(ValueError, match="no teacher serves domain 'subtraction' at effort 90"):
        route(ts[:2], [e for e in eps if e.meta["domain"] == "subtraction"])
    with pytest.raises(ValueError, match="exactly one of model and engine"):
        Teacher("none")


def test_sampled_logprobs_are_the_routed_teachers_own(model, tokenizer, teachers):
    s = samples(model, tokenizer, 4, 2)
    batch = Batch.from_episodes(list(s.episodes), tokenizer.pad_token_id)
    engine = TorchEngine(teachers[1], tokenizer.pad_token_id, tokenizer.eos_token_id)
    ts = [Teacher("a", teachers[0], domains=("addition",)), Teacher("b", engine=engine)]
    w = route(ts, s.episodes)
    got = sampled_logprobs(ts, w, s, batch, tokenizer)
    for r, ep in enumerate(s.episodes):
        ids = ep.segments[0].token_ids
        start = ep.segments[0].loss_mask.index(1)
        want = sum(float(w[r, k]) * forward_logp(t, ids)[start - 1:].gather(
            -1, torch.tensor(ids[start:])[:, None])[:, 0] for k, t in enumerate(teachers))
        # teacher scoring and plain forward: two float32 computations of the same log-probs,
        # within 16 eps32 of the largest (~8 chained reductions, ~2 eps32 each)
        eps32 = torch.finfo(torch.float32).eps
        assert got[r, start:len(ids)] == pytest.approx(
            want.tolist(), abs=16 * eps32 * float(want.abs().max()))
        assert got[r, :start].abs().sum() == 0


def test_multi_teacher_step_is_the_weighted_reverse_kl_mixture(model, tokenizer, teachers):
    s = samples(model, tokenizer, 4, 2)
    batch = Batch.from_episodes(list(s.episodes), tokenizer.pad_token_id)
    ts = [Teacher("a", teachers[0], domains=("addition",)),
          Teacher("b", teachers[1], weight=1.0)]
    w = route(ts, s.episodes)
    assert set(w[:, 0].tolist()) <= {0.0, 0.5} and (w.sum(1) == 1).all()
    per_token = []
    for r, ep in enumerate(s.episodes):
        ids, start = ep.segments[0].token_ids, ep.segments[0].loss_mask.index(1)
        q = forward_logp(model, ids)[start - 1:]
        for k, t in enumerate(teachers):
            kl = get("divergence", "reverse_kl")(teacher_logp=forward_logp(t, ids)[start - 1:],
                                                 student_logp=q)
            per_token.append(float(w[r, k]) * kl)
    want = torch.cat([p[None] if p.dim() == 0 else p for p in per_token])
    tokens = int(batch.loss_mask.sum())
    trainer = Trainer(model, OptimConfig(lr=1e-3), 1, TrainerConfig(micro_batch_size=3))
    targets = distribution_targets(ts, w, s, tokenizer)
    got = distill_step(trainer, batch, targets, "full_vocab_rkl", {"topk": None})["divergence"]
    assert float(want.sum()) / tokens > 0
    # the same float32 models on the same tokens, batched differently: the rounding
    # differences sit in each row's logsumexp (|log Z| ~ 6.3, 1 ulp = 4.8e-7), which shifts a
    # reverse KL by as much: ~1e-6, 4e-5 of the mixture (~0.025)
    assert got == pytest.approx(float(want.sum()) / tokens, rel=1e-4)


def test_self_distillation_teacher_sees_z_and_the_student_does_not(model, tokenizer):
    s = samples(model, tokenizer, 3, 2)
    for preset, marker in (("opsd", "The verified answer is"),
                           ("sdft", "A worked solution to this problem"),
                           ("sdpo", "attempt")):
        teacher = self_teacher(preset, model)
        for r, (prompt, completion) in enumerate(teacher_sequences(teacher, s, range(3),
                                                                   tokenizer)):
            student_prompt = s.episodes[r].segments[0].token_ids[:len(prompt)]
            assert marker in tokenizer.decode(prompt)
            assert completion == s.episodes[r].segments[0].token_ids[-len(completion):]
            assert prompt != student_prompt
    batch = Batch.from_episodes(list(s.episodes), tokenizer.pad_token_id)
    completions = sum(len(teacher_sequences(teacher, s, [r], tokenizer)[0][1])
                      for r in range(len(s.episodes)))
    assert int(batch.loss_mask.sum()) == completions  # z never enters the student's loss


def opd_run(model, tokenizer, teachers, tmp_path, loss, steps=12, **opd):
    cfg = OPDConfig(steps=steps, prompts_per_step=8, group_size=2, max_new_tokens=12,
                    loss=loss, eval_every=0, optim=OptimConfig(lr=3e-3, warmup_steps=0), **opd)
    trainer = Trainer(model, cfg.optim, steps, TrainerConfig(micro_batch_size=8))
    run = OPDRun(trainer, tokenizer, TASKS, TASKS.eval_set(4), REWARD, EvalConfig(num_problems=4),
                 "correct", Reporter(tmp_path, quiet=True), cfg=cfg, actor=ActorConfig(),
                 teachers=teachers)
    engine = TorchEngine(model, tokenizer.pad_token_id, tokenizer.eos_token_id)
    run_opd(run, engine)
    return [json.loads(line) for line in open(tmp_path / "metrics.jsonl")]


@pytest.mark.parametrize("loss,opts", [("full_vocab_rkl", {}), ("full_vocab_rkl", {"topk": 8}),
                                       ("opd_sampled", {}), ("opd_clip", {"r_max": 2.0}),
                                       ("mopd", {"alpha": 0.5})])
def test_on_policy_distillation_closes_the_gap(loss, opts, model, tokenizer, teachers,
                                                 tmp_path):
    rows = opd_run(model, tokenizer, [Teacher("t", teachers[0])], tmp_path, loss, **opts)
    key = "divergence" if loss == "full_vocab_rkl" else "sampled_rkl"
    first = sum(r[key] for r in rows[:3]) / 3
    last = sum(r[key] for r in rows[-3:]) / 3
    assert last < 0.7 * first, (first, last)


def test_evaluation_reports_accuracy_per_domain(model, tokenizer):
    tasks = TASKS.eval_set(40)
    engine = TorchEngine(model, tokenizer.pad_token_id, tokenizer.eos_token_id)
    _, result = evaluate(engine, tokenizer, tasks, REWARD, EvalConfig(temperature=1.0),
                          "correct")
    n = {d: sum(t.domain == d for t in tasks) for d in ("addition", "subtraction")}
    assert min(n.values()) > 0
    mixed = sum(n[d] * result[f"accuracy/{d}"] for d in n) / len(tasks)
    assert mixed == pytest.approx(result["accuracy"])


def test_a_self_teacher_without_privileged_context_is_the_student(model, tokenizer):
    """Alignment check: the student as its own teacher with its own prompt as the 'context'
    gives divergence 0 — teacher and student positions line up token for token."""
    s = samples(model, tokenizer, 4, 2)
    batch = Batch.from_episodes(list(s.episodes), tokenizer.pad_token_id)
    same = Teacher("self", model, context=lambda task, episode, group: task.messages())
    targets = distribution_targets([same], route([same], s.episodes), s, tokenizer)
    trainer = Trainer(model, OptimConfig(lr=1e-3), 1, TrainerConfig(micro_batch_size=3))
    got = distill_step(trainer, batch, targets, "full_vocab_rkl", {"topk": None})
    # equal log-probs give exactly 0; a batching that rounds a row's logsumexp (|log Z| ~ 6.3)
    # differently shifts the KL by that much: 2 ulp = 9.5e-7 < 1e-6
    assert abs(got["divergence"]) < 1e-6 and int(batch.loss_mask.sum()) > 0
