"""Cross-tokenizer alignment (issue 39; as TRL's GOLD and ULD align a teacher with another
tokenizer): two tokenizations of one text are cut into the shortest spans whose boundaries
both share, and a log-probability summed over a span is the same event for both models
(``log P(span | text before it)``, by the chain rule), whatever the tokens inside.

A token's end is a boundary when the text decoded up to it is a prefix of the whole text
(a token that ends inside a multi-byte character is not one; it joins the next span).
"""

from __future__ import annotations

from collections.abc import Sequence


def token_ends(tokenizer, ids: Sequence[int], text: str) -> list[int | None]:
    """Each token's end in ``text`` (characters), None where it ends inside a character or
    the decoded prefix is not ``text``'s."""
    ends = []
    for i in range(1, len(ids) + 1):
        prefix = tokenizer.decode(ids[:i], clean_up_tokenization_spaces=False)
        ends.append(len(prefix) if text.startswith(prefix) else None)
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
