"""Re-render recorded episodes and check that their tokens, masks and segments agree.

An episode is consistent when every per-token list has the token list's length, only sampled
tokens train (weight version set, nothing before the first token), every trained token lies in
a step span, and — for an agent episode that recorded its conversation — the tokens decode to
the chat template's rendering of that conversation.
"""

from __future__ import annotations

from posttrain.types import Episode


def episode_problems(episode: Episode, tokenizer=None) -> list[str]:
    """What is wrong with ``episode`` (empty when it is consistent)."""
    problems = []
    for k, seg in enumerate(episode.segments):
        n = len(seg.token_ids)
        where = f"segment {k}"
        if len(seg.loss_mask) != n or len(seg.logprobs) != n or len(seg.versions) != n:
            problems.append(f"{where}: per-token lists differ in length from token_ids ({n})")
            continue
        for t, (m, lp, v) in enumerate(zip(seg.loss_mask, seg.logprobs, seg.versions)):
            if m and v < 0:
                problems.append(f"{where}: token {t} trains but has no weight version")
                break
            if not m and lp != 0.0:
                problems.append(f"{where}: token {t} is not trained but carries a log-prob")
                break
        covered = {t for s in seg.steps for t in range(s.start, s.end)}
        if seg.steps and any(m and t not in covered for t, m in enumerate(seg.loss_mask)):
            problems.append(f"{where}: a trained token lies outside every step span")
    messages = episode.meta.get("messages")
    if tokenizer is not None and messages and len(episode.segments) == 1:
        rendered = tokenizer.apply_chat_template(
            messages, tools=episode.meta.get("tools") or None, tokenize=False)
        decoded = tokenizer.decode(episode.segments[0].token_ids, skip_special_tokens=False)
        if not rendered.startswith(decoded) or rendered[len(decoded):] not in ("", "\n"):
            problems.append("tokens do not decode to the recorded conversation's rendering")
    return problems
