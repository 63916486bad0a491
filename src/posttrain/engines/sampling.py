"""Turn next-token logits into the distribution an engine samples from, and draw from it.

Draws are counter-based: the uniform behind the token at absolute position ``p`` of a row with
seed ``s`` is ``u(s, p)`` (two rounds of splitmix64). A row's completion is therefore a pure
function of its seed, its prompt and the logits: it does not depend on the other rows of the
batch, on how generation was chunked, or on where it was interrupted and resumed (partial
rollout re-prefills the sequence and continues at the next position with the same seed).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from posttrain.algos.offpolicy import keep_sampling_mask
from posttrain.types import SamplingParams

_M64 = (1 << 64) - 1
_GOLDEN, _MUL1, _MUL2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB


def mix64(x: int) -> int:
    """splitmix64's output function of ``x`` (an unsigned 64-bit value)."""
    z = (x + _GOLDEN) & _M64
    z = ((z ^ (z >> 30)) * _MUL1) & _M64
    z = ((z ^ (z >> 27)) * _MUL2) & _M64
    return z ^ (z >> 31)


def derived_seed(seed: int, i: int) -> int:
    """``mix64(seed ^ mix64(i)) >> 1``: the 63-bit seed of draw stream ``i`` of ``seed``."""
    return mix64((seed & _M64) ^ mix64(i)) >> 1


def row_seeds(seed: int, n: int) -> list[int]:
    """Per-row seeds ``derived_seed(seed, i)`` of a call seeded with ``seed``."""
    return [derived_seed(seed, i) for i in range(n)]


def _signed(c: int) -> int:
    return c - (1 << 64) if c >= 1 << 63 else c


def _shr(z: torch.Tensor, k: int) -> torch.Tensor:
    """Logical right shift of int64 bit patterns."""
    return (z >> k) & ((1 << (64 - k)) - 1)


def _mix64(z: torch.Tensor) -> torch.Tensor:
    """``mix64`` on int64 tensors (wrapping arithmetic on the same bit patterns)."""
    z = z + _signed(_GOLDEN)
    z = (z ^ _shr(z, 30)) * _signed(_MUL1)
    z = (z ^ _shr(z, 27)) * _signed(_MUL2)
    return z ^ _shr(z, 31)


def counter_uniforms(seeds: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """``u(s, p) = top 53 bits of mix64(mix64(s) ^ p) / 2**53``, in ``[0, 1)``, float64."""
    z = _mix64(_mix64(seeds.long()) ^ positions.long())
    return _shr(z, 11).double() * 2.0**-53


def resolve_seeds(n: int, sampling: SamplingParams, seeds: Sequence[int] | None) -> list[int]:
    """The row seeds of a ``generate`` call: ``seeds`` if given, else ``row_seeds`` of
    ``sampling.seed`` (or of a seed drawn from the global RNG)."""
    if seeds is not None:
        if len(seeds) != n:
            raise ValueError(f"{len(seeds)} seeds for {n} prompts")
        return [int(s) for s in seeds]
    base = sampling.seed if sampling.seed is not None else int(torch.randint(2**62, ()).item())
    return row_seeds(base, n)


def processed_logprobs(logits: torch.Tensor, sampling: SamplingParams) -> torch.Tensor:
    """Log-probs ``[B, V]`` after temperature, top-k and top-p (truncated entries are -inf):
    ``keep_sampling_mask`` (in the catalogue too), so engine and trainer truncate the same way."""
    return keep_sampling_mask(logits=logits, temperature=sampling.temperature,
                              top_k=sampling.top_k, top_p=sampling.top_p)


def sample_tokens(
    logits: torch.Tensor, sampling: SamplingParams, uniforms: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one token a row from ``uniforms [B]`` in ``[0, 1)``; returns
    ``(tokens [B], logprobs [B])``.

    Inverse CDF: token = first index whose cumulative probability exceeds ``u`` (zero-probability
    tokens are never chosen). Greedy decoding (temperature 0) returns log-prob 0: the sampled
    distribution is a point mass.
    """
    if sampling.greedy:
        tokens = logits.argmax(dim=-1)
        return tokens, torch.zeros(tokens.shape, dtype=torch.float32, device=tokens.device)
    logp = processed_logprobs(logits, sampling)
    tokens = inverse_cdf(logp.exp(), uniforms)
    return tokens, logp.gather(-1, tokens[:, None]).squeeze(-1)


def inverse_cdf(probs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """``[B]``: per row of ``probs [B, V]`` (non-negative, not necessarily normalised), the
    first index whose cumulative probability exceeds ``u`` times the total; a zero-probability
    index is never chosen."""
    cdf = probs.cumsum(dim=-1)
    u = (uniforms.to(cdf.dtype)[:, None] * cdf[:, -1:]).contiguous()
    tokens = torch.searchsorted(cdf, u, right=True).squeeze(-1)
    over = tokens >= probs.shape[-1]  # u rounded up to the total: take the last possible token
    if bool(over.any()):
        last_possible = (probs[over].flip(-1) > 0).float().argmax(-1)
        tokens[over] = probs.shape[-1] - 1 - last_possible
    return tokens
