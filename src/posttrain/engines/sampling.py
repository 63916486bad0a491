"""Turn next-token logits into the distribution an engine samples from."""

from __future__ import annotations

import torch

from posttrain.algos.offpolicy import keep_sampling_mask
from posttrain.types import SamplingParams


def processed_logprobs(logits: torch.Tensor, sampling: SamplingParams) -> torch.Tensor:
    """Log-probs ``[B, V]`` after temperature, top-k and top-p (truncated entries are -inf):
    the catalogue's ``keep_sampling_mask``, so engine and trainer truncate the same way."""
    return keep_sampling_mask(logits=logits, temperature=sampling.temperature,
                              top_k=sampling.top_k, top_p=sampling.top_p)


def sample_tokens(
    logits: torch.Tensor, sampling: SamplingParams, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one token a row; returns ``(tokens [B], logprobs [B])``.

    Inverse-CDF sampling: one uniform ``u`` a row, token = first index whose cumulative
    probability exceeds ``u`` (zero-probability tokens are never chosen). One draw a row instead
    of ``torch.multinomial``'s one a vocabulary entry. Greedy decoding (temperature 0) returns
    log-prob 0: the sampled distribution is a point mass.
    """
    if sampling.greedy:
        tokens = logits.argmax(dim=-1)
        return tokens, torch.zeros(tokens.shape, dtype=torch.float32)
    logp = processed_logprobs(logits, sampling)
    probs = logp.exp()
    cdf = probs.cumsum(dim=-1)
    u = torch.rand((logp.shape[0], 1), generator=generator) * cdf[:, -1:]
    tokens = torch.searchsorted(cdf, u, right=True).squeeze(-1)
    over = tokens >= logp.shape[-1]  # u rounded up to the total: take the last possible token
    if bool(over.any()):
        last_possible = (probs[over].flip(-1) > 0).float().argmax(-1)
        tokens[over] = logp.shape[-1] - 1 - last_possible
    return tokens, logp.gather(-1, tokens[:, None]).squeeze(-1)
