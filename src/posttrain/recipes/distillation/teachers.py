"""Teachers of on-policy distillation (``multi_teacher``, docs/algorithms.md): which teachers
score which sample (routing by task domain and effort, with weights) and what they return for
the student's sampled tokens — their log-probs (any ``Engine``: in-process or a Ray actor) or
their full next-token distributions (in-process models)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from posttrain.engines import Engine
from posttrain.envs import Task
from posttrain.models import encode_prompt, frozen, sequence_logprobs, token_distributions
from posttrain.models.devices import model_device
from posttrain.recipes.distillation.token_alignment import teacher_logprobs_on, turn_end
from posttrain.types import Batch, Episode, Segment, TeacherMismatchError

# per teacher: (positions among a micro-batch's distillation positions, their weights, [n, V])
Targets = list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]


@dataclass
class Teacher:
    """An in-process ``model`` (sampled-token log-probs and full distributions) or an
    ``engine`` (sampled-token log-probs through ``Engine.score``: a Ray actor). The teacher
    serves samples whose domain is in ``domains`` and whose effort is in ``efforts`` (empty:
    any). ``context(task, episode, group)`` is the teacher's own prompt for a sample of
    ``task`` (``group``: the episodes of its group) — the privileged context of
    self-distillation; None: the student's prompt. ``tokenizer``: the teacher's own, when it
    is not the student's (cross-tokenizer: sampled-token losses only)."""

    name: str
    model: torch.nn.Module | None = None
    engine: Engine | None = None
    domains: tuple[str, ...] = ()
    efforts: tuple[int, ...] = ()
    weight: float = 1.0
    context: Callable[[Task, Episode, list[Episode]], list[dict]] | None = None
    tokenizer: Any = None

    def __post_init__(self) -> None:
        if (self.model is None) == (self.engine is None):
            raise ValueError(f"teacher {self.name}: give exactly one of model and engine")

    def score(self, sequences: list[list[int]], pad_token_id: int) -> list[list[float]]:
        """Log-prob of every token of each sequence given the ones before it (0.0 first)."""
        if self.model is None:
            return self.engine.score(sequences)
        batch = Batch.from_episodes([Episode([Segment.from_prompt_completion(s[:1], s[1:])])
                                     for s in sequences], pad_token_id).to(model_device(self.model))
        with frozen(self.model) as model:
            logp, _ = sequence_logprobs(model, batch.input_ids, batch.attention_mask,
                                        with_entropy=False, score_mask=batch.loss_mask)
        return [logp[i, : len(s)].tolist() for i, s in enumerate(sequences)]

    def serves(self, episode: Episode) -> bool:
        domain, effort = episode.meta.get("domain"), episode.meta.get("effort")
        return ((not self.domains or domain in self.domains)
                and (not self.efforts or effort in self.efforts))


def route(teachers: Sequence[Teacher], episodes: Sequence[Episode]) -> torch.Tensor:
    """``[E, K]``: episode ``e``'s weight on teacher ``k`` — the teachers serving it, in
    proportion to their weights (each row sums to 1). A sample no teacher serves is an error."""
    raw = torch.tensor([[t.weight if t.serves(ep) else 0.0 for t in teachers]
                        for ep in episodes], dtype=torch.float32)
    total = raw.sum(dim=1, keepdim=True)
    if (total == 0).any():
        ep = episodes[int((total[:, 0] == 0).nonzero()[0])]
        served = ", ".join(f"{t.name} {list(t.domains)} {list(t.efforts)}" for t in teachers)
        raise TeacherMismatchError(f"no teacher serves domain {ep.meta.get('domain')!r} at "
                                   f"effort {ep.meta.get('effort')!r}; teachers: {served}")
    return raw / total


def prompt_and_completion(episode: Episode) -> tuple[list[int], list[int]]:
    """The single-turn sample's prompt and completion ids."""
    if len(episode.segments) != 1:
        raise ValueError("on-policy distillation takes single-turn samples (one segment)")
    seg = episode.segments[0]
    n = seg.loss_mask.index(1) if 1 in seg.loss_mask else len(seg.token_ids)
    return seg.token_ids[:n], seg.token_ids[n:]


@dataclass
class Samples:
    """The student's scored single-turn samples of one step and the task of each."""

    episodes: Sequence[Episode]
    tasks: Sequence[Task]

    def group(self, i: int) -> list[Episode]:
        return [e for e in self.episodes if e.group_id == self.episodes[i].group_id]


def teacher_sequences(teacher: Teacher, samples: Samples, rows: Sequence[int], tokenizer
                      ) -> list[tuple[list[int], list[int]]]:
    """``(teacher prompt, completion)`` of samples ``rows``: the student's completion after the
    student's prompt or after the teacher's own ``context``."""
    out = []
    for r in rows:
        prompt, completion = prompt_and_completion(samples.episodes[r])
        if teacher.context is not None:
            prompt = encode_prompt(tokenizer, teacher.context(
                samples.tasks[r], samples.episodes[r], samples.group(r)))
        out.append((prompt, completion))
    return out


def sampled_logprobs(teachers: Sequence[Teacher], weights: torch.Tensor, samples: Samples,
                     batch: Batch, tokenizer) -> torch.Tensor:
    """``[B, T]``: ``sum_k w_k log P_k(y_t)`` at every completion token of ``batch`` (built
    from ``samples``, one row each), each teacher asked only for the samples routed to it (a
    teacher with its own tokenizer: ``cross_tokenizer_logprobs``)."""
    out = torch.zeros_like(batch.loss_mask)
    for k, teacher in enumerate(teachers):
        rows = (weights[:, k] > 0).nonzero().squeeze(-1).tolist()
        if not rows:
            continue
        if teacher.tokenizer is not None:
            per_row = cross_tokenizer_logprobs(teacher, samples, rows, tokenizer)
        else:
            seqs = teacher_sequences(teacher, samples, rows, tokenizer)
            scores = teacher.score([p + c for p, c in seqs], tokenizer.pad_token_id)
            per_row = [score[len(prompt):] for (prompt, _), score in zip(seqs, scores)]
        for r, values in zip(rows, per_row):
            start = len(prompt_and_completion(samples.episodes[r])[0])
            out[r, start:start + len(values)] += weights[r, k] * torch.tensor(
                values, dtype=out.dtype)
    return out * batch.loss_mask


def cross_tokenizer_logprobs(teacher: Teacher, samples: Samples, rows: Sequence[int],
                             tokenizer) -> list[list[float]]:
    """Teacher log-probs on the student's completion tokens of samples ``rows``, the teacher
    having its own tokenizer: the task rendered with the teacher's chat template, the
    completion's text encoded by the teacher (and its end of turn for the student's), scored,
    and spread over the student's tokens span by span (``token_alignment``); the student's
    end of turn gets the teacher's whole end of turn (``turn_end``)."""
    tok = teacher.tokenizer
    closing = turn_end(tok)
    plans = []  # (teacher prompt, student body, teacher body, text, ended)
    for r in rows:
        completion = prompt_and_completion(samples.episodes[r])[1]
        ended = bool(completion) and completion[-1] == tokenizer.eos_token_id
        body = completion[:-1] if ended else completion
        text = tokenizer.decode(body, clean_up_tokenization_spaces=False)
        messages = samples.tasks[r].messages() if teacher.context is None else \
            teacher.context(samples.tasks[r], samples.episodes[r], samples.group(r))
        plans.append((encode_prompt(tok, messages), body,
                      tok.encode(text, add_special_tokens=False), text, ended))
    scores = teacher.score([p + t + (closing if ended else [])
                            for p, _, t, _, ended in plans], tok.pad_token_id)
    out = []
    for (prompt, body, teacher_body, text, ended), score in zip(plans, scores):
        lp = score[len(prompt):]
        try:
            values = teacher_logprobs_on(tokenizer, body, tok, teacher_body,
                                         lp[:len(teacher_body)], text) if body else []
        except ValueError as e:
            raise TeacherMismatchError(f"teacher {teacher.name}: {e} (its tokenizer does not "
                                       f"reproduce the student's text {text[:60]!r})") from None
        out.append(values + ([sum(lp[len(teacher_body):])] if ended else []))
    return out


def distribution_targets(teachers: Sequence[Teacher], weights: torch.Tensor, samples: Samples,
                         tokenizer, temperature: float = 1.0) -> Callable[[Batch], Targets]:
    """For ``distill_step``: a micro-batch's teacher distributions at its completion
    positions (row-major, as ``token_distributions`` orders them), per routed teacher."""
    for t in teachers:
        if t.model is None:
            raise ValueError(f"teacher {t.name} is a remote engine: full-vocabulary targets "
                             "need an in-process teacher model")

    def targets(mb: Batch) -> Targets:
        position_rows = mb.rows[mb.loss_mask[:, 1:].nonzero()[:, 0]]
        routed = weights.to(mb.rows.device)
        out: Targets = []
        for k, teacher in enumerate(teachers):
            rows = mb.rows[routed[mb.rows, k] > 0]
            if not len(rows):
                continue
            seqs = teacher_sequences(teacher, samples, rows.tolist(), tokenizer)
            tb = Batch.from_episodes(
                [Episode([Segment.from_prompt_completion(p, c)]) for p, c in seqs],
                pad_token_id=tokenizer.pad_token_id).to(model_device(teacher.model))
            with frozen(teacher.model) as model:
                logp = token_distributions(model, tb.input_ids, tb.attention_mask,
                                           tb.loss_mask, temperature).to(position_rows.device)
            index = torch.isin(position_rows, rows).nonzero().squeeze(-1)
            if len(index) != len(logp):
                raise RuntimeError("teacher and student completion positions differ")
            out.append((index, routed[position_rows[index], k], logp))
        return out

    return targets


def model_targets(model: torch.nn.Module, temperature: float = 1.0) -> Callable[[Batch], Targets]:
    """One teacher on every loss-mask position of the micro-batch itself (offline KD)."""

    def targets(mb: Batch) -> Targets:
        there = mb.to(model_device(model))
        with frozen(model):
            logp = token_distributions(model, there.input_ids, there.attention_mask,
                                       there.loss_mask, temperature).to(mb.input_ids.device)
        return [(torch.arange(len(logp), device=logp.device),
                 torch.ones(len(logp), device=logp.device), logp)]

    return targets
