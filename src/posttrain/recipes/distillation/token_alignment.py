"""Cross-tokenizer alignment (issue 39; as TRL's GOLD and ULD align a teacher with another
tokenizer): two tokenizations of one text are cut into the shortest spans whose boundaries
both share, and a log-probability summed over a span is the same event for both models
(``log P(span | text before it)``, by the chain rule), whatever the tokens inside.

A token's end is a boundary when the text decoded up to it is a prefix of the whole text
(a token that ends inside a multi-byte character is not one; it joins the next span).
"""

from __future__ import annotations

from collections.abc import Sequence

from posttrain.data.conversations import conversation_segment
from posttrain.types import Segment


def token_ends(tokenizer, ids: Sequence[int], text: str) -> list[int | None]:
    """Each token's end in ``text`` (characters), None where it ends inside a character or
    the decoded prefix is not ``text``'s. Pieces are decoded one token at a time and
    concatenated; the prefix is decoded whole only where that does not give ``text`` (a
    character split across tokens, a tokenizer that spells a token differently alone)."""
    ends: list[int | None] = []
    prefix = ""
    for i, token in enumerate(ids):
        joined = prefix + tokenizer.decode([token], clean_up_tokenization_spaces=False)
        if not text.startswith(joined):
            joined = tokenizer.decode(ids[:i + 1], clean_up_tokenization_spaces=False)
        prefix = joined
        ends.append(len(joined) if text.startswith(joined) else None)
    return ends


def aligned_spans(student_ends: Sequence[int | None], teacher_ends: Sequence[int | None]
                  ) -> list[tuple[list[int], list[int]]]:
    """``(student token indices, teacher token indices)`` of each span (the module's
    docstring): a span closes at every end both tokenizations have, and takes the tokens of
    no width that follow it (bytes of one replacement character). Both must cover the same
    text (their last ends equal)."""
    if not student_ends or not teacher_ends or student_ends[-1] != teacher_ends[-1] or \
            student_ends[-1] is None:
        raise ValueError("the two tokenizations do not cover the same text")
    shared = set(student_ends) & set(teacher_ends) - {None}
    spans: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(student_ends):
        s_open, t_open = [], []
        while student_ends[i] not in shared:
            s_open.append(i)
            i += 1
        end = student_ends[i]
        while i < len(student_ends) and student_ends[i] == end:
            s_open.append(i)
            i += 1
        while teacher_ends[j] != end:
            t_open.append(j)
            j += 1
        while j < len(teacher_ends) and teacher_ends[j] == end:
            t_open.append(j)
            j += 1
        spans.append((s_open, t_open))
    return spans


def spread(spans: Sequence[tuple[list[int], list[int]]], teacher_logp: Sequence[float],
           n_student: int) -> list[float]:
    """The teacher's log-probs on the student's tokens: each span's sum over its teacher
    tokens, shared equally by its student tokens (so every span's sum is kept)."""
    out = [0.0] * n_student
    for students, teachers in spans:
        share = sum(teacher_logp[j] for j in teachers) / len(students)
        for i in students:
            out[i] = share
    return out


def teacher_logprobs_on(student_tok, student_ids: Sequence[int], teacher_tok,
                        teacher_ids: Sequence[int], teacher_logp: Sequence[float],
                        text: str) -> list[float]:
    """``spread`` of ``teacher_logp`` (one a token of ``teacher_ids``) over ``student_ids``,
    both tokenizations of ``text``."""
    spans = aligned_spans(token_ends(student_tok, student_ids, text),
                          token_ends(teacher_tok, teacher_ids, text))
    return spread(spans, teacher_logp, len(student_ids))


def masked_runs(segment: Segment) -> list[list[int]]:
    """The positions of each run of trained tokens (an assistant turn)."""
    runs: list[list[int]] = []
    for t, m in enumerate(segment.loss_mask):
        if m and (not runs or runs[-1][-1] != t - 1):
            runs.append([t])
        elif m:
            runs[-1].append(t)
    return runs


def split_special(tokenizer, ids: list[int], run: list[int]) -> tuple[list[int], list[int]]:
    """``run``'s positions before its trailing special tokens, and those tokens'."""
    special, end = set(tokenizer.all_special_ids), len(run)
    while end and ids[run[end - 1]] in special:
        end -= 1
    return run[:end], run[end:]


def turn_end(tokenizer) -> list[int]:
    """The special tokens that close an assistant turn in ``tokenizer``'s chat template (its
    end of turn, which need not be its ``eos_token``)."""
    segment = conversation_segment(tokenizer, [{"role": "user", "content": "a"},
                                               {"role": "assistant", "content": "b"}])
    runs = masked_runs(segment)
    tail = split_special(tokenizer, segment.token_ids, runs[-1])[1] if runs else []
    return [segment.token_ids[t] for t in tail] or [tokenizer.eos_token_id]
