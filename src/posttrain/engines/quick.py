"""Quick instructions (ALGORITHMS.md §14; DeepSeek V4): after a completion ends, each of a few
instruction tokens (``<action>``, ``<query>``, ``<domain>``, ...) continues the sequence's KV
cache and the model answers it greedily, without prefilling the conversation again.

A finished row's cache is parked as generation goes (``LlamaDecoder.park``); afterwards the
parked rows come back as one batch (``restore``), each repeated once per instruction, take
their last token and the instruction in one forward, and decode up to ``max_new_tokens``.
The answer is what a separate request for ``prompt + completion + [instruction]`` would
decode greedily, at the cost of two tokens instead of that prefill."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from posttrain.engines.base import GenerationOutput
from posttrain.engines.decoders import LlamaDecoder, drop_finished

Parked = tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor]  # requests, cache, last


@dataclass
class QuickOutput:
    """A completion and, per instruction, the greedy answer (its stop token included)."""

    output: GenerationOutput
    answers: list[list[int]]

    @property
    def prefill_saved(self) -> int:
        """Tokens a separate request per instruction would prefill beyond the two this one
        feeds (the completion's last token and the instruction)."""
        return len(self.answers) * (len(self.output.prompt_ids) + len(self.output.token_ids) - 1)


def answer(decoder: LlamaDecoder, parked: Sequence[Parked], quick: Sequence[int],
           max_new_tokens: int, stop_ids: torch.Tensor) -> dict[int, list[list[int]]]:
    """Request index -> its answers, one per token of ``quick`` (module docstring)."""
    requests = torch.cat([r for r, _, _ in parked])
    last = torch.cat([t for _, _, t in parked])
    decoder.restore([cache for _, cache, _ in parked], 2 + max_new_tokens)
    n, m = len(requests), len(quick)
    rows = torch.arange(n, device=last.device).repeat_interleave(m)
    decoder.select(rows)
    asked = torch.tensor(list(quick), device=last.device).repeat(n)
    logits, _ = decoder.extend(torch.stack([last[rows], asked], dim=1))
    decoder.commit(torch.ones(n * m, dtype=torch.long, device=last.device))
    logits = logits[:, -1]
    answers: list[list[int]] = [[] for _ in range(n * m)]
    active = torch.arange(n * m, device=last.device)
    for t in range(max_new_tokens):
        tok = logits.argmax(dim=-1)
        for row, token in zip(active.tolist(), tok.tolist()):
            answers[row].append(token)
        hit = torch.isin(tok, stop_ids)
        if bool(hit.any()):
            left = drop_finished(decoder, hit, active, tok)
            if left is None:
                break
            active, tok = left
        if t + 1 < max_new_tokens:
            logits = decoder.step(tok)
    return {int(r): answers[i * m : (i + 1) * m] for i, r in enumerate(requests.tolist())}
