"""Quick instructions (DeepSeek-V4 technical report, 2026): each of a few instruction tokens
(``<action>``, ``<query>``, ``<domain>``, ...) continues a sequence's KV cache and the model
answers it greedily, without prefilling the conversation again. The sequence is the prompt
(``at="prompt"``: asked before the answer, as DeepSeek asks whether to search) or the prompt
and its completion (``at="completion"``).

A row's cache is parked (``LlamaDecoder.park``) right after the prefill, or as its completion
ends; afterwards the parked rows come back as one batch (``restore``), each repeated once per
instruction, take the instruction (after the completion: its last token and the instruction)
in one forward, and decode up to ``max_new_tokens``. The answer is what a separate request for
``sequence + [instruction]`` would decode greedily, at the cost of one or two tokens instead
of that prefill."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from posttrain.engines.base import GenerationOutput
from posttrain.engines.decoders import LlamaDecoder, drop_finished

# requests, cache, and the token not yet in the cache (None: the cache holds the sequence)
Parked = tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor | None]
AT = ("prompt", "completion")


@dataclass
class QuickOutput:
    """A completion and, per instruction, the greedy answer (its stop token included) to the
    sequence ``at`` names."""

    output: GenerationOutput
    answers: list[list[int]]
    at: str = "completion"

    @property
    def prefill_saved(self) -> int:
        """Tokens a separate request per instruction would prefill beyond those this one
        feeds: the instruction, after a completion also its last token."""
        if self.at == "prompt":
            return len(self.answers) * len(self.output.prompt_ids)
        return len(self.answers) * (len(self.output.prompt_ids) + len(self.output.token_ids) - 1)


def answer(decoder: LlamaDecoder, parked: Sequence[Parked], quick: Sequence[int],
           max_new_tokens: int, stop_ids: torch.Tensor) -> dict[int, list[list[int]]]:
    """Request index -> its answers, one per token of ``quick`` (module docstring)."""
    requests = torch.cat([r for r, _, _ in parked])
    device = requests.device
    n, m = len(requests), len(quick)
    rows = torch.arange(n, device=device).repeat_interleave(m)
    fed = torch.tensor(list(quick), device=device).repeat(n)[:, None]
    if parked[0][2] is not None:  # after a completion: its last token, then the instruction
        fed = torch.cat([torch.cat([t for _, _, t in parked])[rows, None], fed], dim=1)
    decoder.restore([cache for _, cache, _ in parked], fed.shape[1] + max_new_tokens)
    decoder.select(rows)
    logits, _ = decoder.extend(fed)
    decoder.commit(torch.full((n * m,), fed.shape[1] - 1, dtype=torch.long, device=device))
    logits = logits[:, -1]
    answers: list[list[int]] = [[] for _ in range(n * m)]
    active = torch.arange(n * m, device=device)
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
