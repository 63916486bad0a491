"""Offline distillation from a teacher with another tokenizer: each conversation is rendered
twice, by the student's template and tokenizer and by the teacher's, and the teacher's next-
token distribution reaches a student position where the two tokenizations align one token to
one token (``token_alignment``: a span of one student and one teacher token). There
the two distributions predict the same text, over different vocabularies, which a
vocabulary-free divergence (``uld``) compares. Positions inside longer spans get no target.

Each assistant turn is aligned on its text; a turn's trailing special tokens (the end of
turn, which the two templates may spell differently) are paired one to one from the end.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from posttrain.models import frozen, token_distributions
from posttrain.models.devices import model_device
from posttrain.recipes.distillation.teachers import Targets
from posttrain.recipes.distillation.token_alignment import (
    aligned_spans,
    masked_runs,
    split_special,
    token_ends,
)
from posttrain.types import Batch, Episode, Segment, TeacherMismatchError


def aligned_positions(student_tok, student: Segment, teacher_tok, teacher: Segment
                      ) -> list[tuple[int, int]]:
    """``(student position, teacher position)`` of every one-to-one aligned token of the
    conversation's assistant turns, in order (the module's docstring)."""
    s_runs, t_runs = masked_runs(student), masked_runs(teacher)
    if len(s_runs) != len(t_runs):
        raise TeacherMismatchError(f"the templates render {len(s_runs)} and {len(t_runs)} "
                                   "assistant turns")
    pairs = []
    for s_run, t_run in zip(s_runs, t_runs):
        (s_body, s_tail) = split_special(student_tok, student.token_ids, s_run)
        (t_body, t_tail) = split_special(teacher_tok, teacher.token_ids, t_run)
        s_ids = [student.token_ids[t] for t in s_body]
        t_ids = [teacher.token_ids[t] for t in t_body]
        text = student_tok.decode(s_ids, clean_up_tokenization_spaces=False)
        if bool(s_ids) != bool(t_ids):
            raise TeacherMismatchError(f"one template renders the turn {text[:60]!r} empty")
        if s_ids:
            try:
                spans = aligned_spans(token_ends(student_tok, s_ids, text),
                                      token_ends(teacher_tok, t_ids, text))
            except ValueError as e:
                raise TeacherMismatchError(f"{e}: the turn {text[:60]!r}") from None
            pairs += [(s_body[s[0]], t_body[t[0]]) for s, t in spans
                      if len(s) == 1 and len(t) == 1]
        pairs += list(zip(reversed(s_tail), reversed(t_tail)))[::-1]
    return [(s, t) for s, t in pairs if s > 0 and t > 0]  # the first token has no context


class AlignedConversations:
    """Conversation ``i`` rendered by the student (``student[i]``) and by the teacher
    (``teacher[i]``), with its aligned positions, computed on first use and kept (the data
    is fixed: each step's batch reuses them)."""

    def __init__(self, student_tok, teacher_tok, student: Sequence[Segment],
                 teacher: Sequence[Segment]) -> None:
        self.student_tok, self.teacher_tok = student_tok, teacher_tok
        self.student, self.teacher = student, teacher
        self._positions: dict[int, list[tuple[int, int]]] = {}

    def positions(self, i: int) -> list[tuple[int, int]]:
        if i not in self._positions:
            self._positions[i] = aligned_positions(self.student_tok, self.student[i],
                                                   self.teacher_tok, self.teacher[i])
        return self._positions[i]

    def targets(self, model: torch.nn.Module, idx: Sequence[int],
                temperature: float = 1.0) -> Callable[[Batch], Targets]:
        """For ``distill_step``: the teacher's distributions at a micro-batch's aligned
        positions, the step batch's row ``r`` being conversation ``idx[r]``."""

        def targets(mb: Batch) -> Targets:
            convs = [idx[r] for r in mb.rows.tolist()]
            pairs = [self.positions(i) for i in convs]
            order = {}  # (row in the micro-batch, position) -> its index among the positions
            for (b, t) in mb.loss_mask[:, 1:].nonzero().tolist():
                order[(b, t + 1)] = len(order)
            index = torch.tensor([order[(b, s)] for b, row in enumerate(pairs) for s, _ in row],
                                 dtype=torch.long)
            tb = Batch.from_episodes([Episode([self.teacher[i]]) for i in convs],
                                     pad_token_id=self.teacher_tok.pad_token_id)
            mask = torch.zeros_like(tb.loss_mask)
            for b, row in enumerate(pairs):
                for _, t in row:
                    mask[b, t] = 1
            tb = tb.replace(loss_mask=mask).to(model_device(model))
            with frozen(model) as m:
                logp = token_distributions(m, tb.input_ids, tb.attention_mask, tb.loss_mask,
                                           temperature).to(mb.input_ids.device)
            index = index.to(logp.device)
            return [(index, torch.ones(len(index), device=logp.device), logp)]

        return targets
