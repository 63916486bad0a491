"""Re-render recorded episodes and check that their tokens, masks and segments agree.

An episode is consistent when every per-token list has the token list's length, only sampled
tokens train (weight version set, nothing before the first token), every trained token lies in
a step span, and — for an agent episode that recorded its conversations — each segment's tokens
decode to the chat template's rendering of that segment's conversation.
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
    conversations = episode.meta.get("segment_messages") or (
        [episode.meta["messages"]] if episode.meta.get("messages") else [])
    if tokenizer is None or not conversations:
        return problems
    if len(conversations) != len(episode.segments):
        return [*problems, f"{len(conversations)} recorded conversations for "
                           f"{len(episode.segments)} segments"]
    for k, (seg, messages) in enumerate(zip(episode.segments, conversations)):
        if not _renders_as(tokenizer, seg.token_ids, messages, episode.meta.get("tools")):
            problems.append(f"segment {k}: tokens do not decode to the recorded "
                            "conversation's rendering")
    return problems


def _renders_as(tokenizer, ids: list[int], messages: list[dict], tools) -> bool:
    """The tokens are the conversation rendered: whole (up to the template's closing of the
    last turn, which a truncated turn lacks) or followed by the next generation prompt."""
    def render(prompt: bool) -> str:
        return tokenizer.apply_chat_template(messages, tools=tools or None, tokenize=False,
                                             add_generation_prompt=prompt)

    decoded = tokenizer.decode(ids, skip_special_tokens=False)
    rendered = render(False)
    closing = ("", "\n", f"{tokenizer.eos_token}\n")
    return (rendered.startswith(decoded) and rendered[len(decoded):] in closing) or (
        decoded == render(True))
