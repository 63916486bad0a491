"""Speculative decoding with an MTP head as the draft (``mtp_self_distill``).

Each round, per row: the head drafts ``k`` tokens ``d_1..d_k`` from ``q`` (chained on its own
state), the main model scores the last emitted token and the drafts in one forward
(``LlamaDecoder.extend``), and draft ``d_i`` is accepted with probability
``min(1, p(d_i) / q(d_i))``; at the first rejection the token is drawn from
``norm(max(0, p - q))`` and the round ends; with every draft accepted, one more token comes
from ``p``. The tokens then follow ``p`` exactly (the standard speculative-sampling theorem),
and greedy decoding accepts a draft only when it is ``p``'s argmax. ``p`` and ``q`` are the
processed distributions (temperature, top-k, top-p) of ``sampling``.

Draws stay counter-based: the token at completion index ``c`` of a row with seed ``s`` uses
``u(s, start + c)`` for a resampled or extra token (plain decoding's stream) and
``u(s_draft, start + c)``, ``u(s_accept, start + c)`` (``derived_seed(s, 1)``, ``(s, 2)``) to
draft and to accept, each once: a row's completion depends on its seed, prompt and ``k`` only.
Behaviour log-probs are ``p``'s."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import torch

from posttrain.engines.decoders import LlamaDecoder
from posttrain.engines.sampling import (
    counter_uniforms,
    derived_seed,
    inverse_cdf,
    processed_logprobs,
    sample_tokens,
)
from posttrain.models.mtp import MTPHead
from posttrain.types import SamplingParams


@dataclass
class SpeculativeStats:
    """Counts over an engine's life: ``drafted`` and ``accepted`` draft tokens, main-model
    ``forwards`` of a row (its prefill, then one a round), draft-and-verify ``rounds`` of a
    row and ``tokens`` emitted: plain decoding makes one token a forward."""

    drafted: int = 0
    accepted: int = 0
    forwards: int = 0
    tokens: int = 0
    rounds: int = 0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def tokens_per_forward(self) -> float:
        return self.tokens / self.forwards if self.forwards else 0.0

    def snapshot(self) -> SpeculativeStats:
        """A copy of the counts now (``metrics_since``'s ``before``)."""
        return replace(self)

    def metrics_since(self, before: SpeculativeStats) -> dict[str, float]:
        """The counts since ``before`` as metrics (none when nothing was drafted):
        ``spec/acceptance`` (accepted / drafted draft tokens), ``spec/accepted_per_round``
        (accepted drafts a draft-and-verify round of a row), ``spec/tokens_per_forward``
        (tokens emitted a forward of the model, the prefill's counted) and ``spec/drafted``."""
        d = SpeculativeStats(**{f.name: getattr(self, f.name) - getattr(before, f.name)
                                for f in fields(self)})
        if not d.drafted:
            return {}
        return {"spec/acceptance": d.acceptance_rate,
                "spec/accepted_per_round": d.accepted / d.rounds,
                "spec/tokens_per_forward": d.tokens_per_forward,
                "spec/drafted": float(d.drafted)}


@dataclass
class Decoded:
    """Per request: ``tokens``, ``logps`` ``[B, >= max_new]``, ``lengths`` and ``stopped``."""

    tokens: torch.Tensor
    logps: torch.Tensor
    lengths: torch.Tensor
    stopped: torch.Tensor


class SpeculativeDecoder:
    """Drafts with ``head`` and verifies with ``decoder`` (module docstring)."""

    def __init__(self, decoder: LlamaDecoder, head: MTPHead, k: int, stats: SpeculativeStats
                 ) -> None:
        if k < 1:
            raise ValueError(f"speculative decoding drafts k >= 1 tokens, not {k}")
        self.decoder, self.head, self.k, self.stats = decoder, head, k, stats
        self.embed = decoder.base.embed_tokens

    def decode(self, n_rows: int, sampling: SamplingParams, seeds: torch.Tensor,
               ids: torch.Tensor, valid: torch.Tensor, group: torch.Tensor,
               start: torch.Tensor, stop_ids: torch.Tensor, pad_token_id: int) -> Decoded:
        """Prefill the distinct prompts ``ids`` (left-padded, ``valid``; request ``i`` is
        prompt ``group[i]``, its first new token at position ``start[i]``) and decode."""
        max_new, k, dev = sampling.max_new_tokens, self.k, ids.device
        streams = [torch.tensor([derived_seed(int(s), j) for s in seeds.tolist()],
                                dtype=torch.long, device=dev) for j in (1, 2)]
        self.seeds, self.draft_seeds, self.accept_seeds = seeds, *streams
        logits = self.decoder.prefill(ids, valid, max_new * (k + 1))[group]
        hidden = self.decoder.last_hidden[group]
        self.decoder.select(group)
        self.stats.forwards += n_rows
        out = Decoded(torch.full((n_rows, max_new + k + 1), pad_token_id, dtype=torch.long,
                                 device=dev),
                      torch.zeros((n_rows, max_new + k + 1), dtype=torch.float32, device=dev),
                      torch.full((n_rows,), max_new, dtype=torch.long, device=dev),
                      torch.zeros(n_rows, dtype=torch.bool, device=dev))
        count = torch.zeros(n_rows, dtype=torch.long, device=dev)
        active = torch.arange(n_rows, device=dev)
        tok, lp = sample_tokens(logits, sampling, counter_uniforms(seeds, start))
        new = (tok[:, None], lp[:, None], torch.ones_like(tok))
        while True:
            done = self._emit(out, count, active, start, stop_ids, max_new, *new)
            if bool(done.all()):
                return out
            keep = (~done).nonzero().squeeze(-1)
            if len(keep) < len(active):
                self.decoder.select(keep)
                active, hidden, tok = active[keep], hidden[keep], new[0][keep, new[2][keep] - 1]
            else:
                tok = new[0][torch.arange(len(active)), new[2] - 1]
            new, hidden = self._round(sampling, active, start[active] + count[active], tok,
                                      hidden)

    def _round(self, sampling: SamplingParams, active: torch.Tensor, at: torch.Tensor,
               tok: torch.Tensor, hidden: torch.Tensor):
        """One draft-and-verify round for the ``active`` requests, whose next token goes to
        absolute position ``at``; ``tok``: each one's last emitted token, ``hidden``: the
        main model's state before it. Returns ``((tokens, logps, n) [n, k+1], hidden)``."""
        k, n = self.k, len(active)
        rows = torch.arange(n, device=tok.device)
        drafts, q_logps, state, last = [], [], hidden, tok
        for i in range(k):
            state = self.head(state, self.embed(last))
            q_logits = self.head.logits(state, self.decoder.head.weight).float()
            last, _ = sample_tokens(q_logits, sampling,
                                    counter_uniforms(self.draft_seeds[active], at + i))
            drafts.append(last)
            q_logps.append(processed_logprobs(q_logits, sampling))
        p_logits, p_hidden = self.decoder.extend(torch.stack([tok, *drafts], dim=1))
        tokens = torch.stack(drafts + [drafts[-1]], dim=1)  # the last column is replaced
        logps = torch.zeros(tokens.shape, dtype=torch.float32, device=tok.device)
        kept = torch.zeros(n, dtype=torch.long, device=tok.device)
        alive = torch.ones(n, dtype=torch.bool, device=tok.device)
        for i in range(k + 1):
            p_logits_i = p_logits[:, i].float()
            p_logp = processed_logprobs(p_logits_i, sampling)
            if i < k:
                d = drafts[i]
                if sampling.greedy:
                    ok = d == p_logits_i.argmax(dim=-1)
                else:
                    ratio = (p_logp.gather(-1, d[:, None]) - q_logps[i].gather(-1, d[:, None])
                             ).squeeze(-1).exp()
                    ok = counter_uniforms(self.accept_seeds[active], at + i) < ratio
                logps[:, i] = 0.0 if sampling.greedy else p_logp.gather(-1, d[:, None])[:, 0]
                stop_here = alive & ~ok
            else:
                stop_here = alive
            if bool(stop_here.any()):
                r = stop_here.nonzero().squeeze(-1)
                chosen = self._correction(p_logits_i[r], p_logp[r],
                                          q_logps[i][r] if i < k else None, sampling,
                                          self.seeds[active[r]], at[r] + i)
                tokens[r, i] = chosen
                logps[r, i] = 0.0 if sampling.greedy else p_logp[r].gather(
                    -1, chosen[:, None])[:, 0]
                kept[r] = i
            alive &= ~stop_here
        self.decoder.commit(kept)
        self.stats.drafted += n * k
        self.stats.accepted += int(kept.sum())
        self.stats.forwards += n
        self.stats.rounds += n
        return (tokens, logps, kept + 1), p_hidden[rows, kept]

    @staticmethod
    def _correction(p_logits: torch.Tensor, p_logp: torch.Tensor, q_logp: torch.Tensor | None,
                    sampling: SamplingParams, seeds: torch.Tensor, at: torch.Tensor
                    ) -> torch.Tensor:
        """The token after a rejection (``norm(max(0, p - q))``) or after every draft was
        accepted (``q`` None: ``p``); greedy: ``p``'s argmax."""
        if sampling.greedy:
            return p_logits.argmax(dim=-1)
        p = p_logp.exp()
        weights = p if q_logp is None else (p - q_logp.exp()).clamp(min=0)
        empty = weights.sum(dim=-1) <= 0  # p = q up to rounding: p itself
        weights = torch.where(empty[:, None], p, weights)
        return inverse_cdf(weights, counter_uniforms(seeds, at))

    def _emit(self, out: Decoded, count: torch.Tensor, active: torch.Tensor,
              start: torch.Tensor, stop_ids: torch.Tensor, max_new: int, tokens: torch.Tensor,
              logps: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        """Write the first ``n[j]`` of ``tokens[j]`` to request ``active[j]``, up to its first
        stop token and ``max_new``; returns which requests are done."""
        width = tokens.shape[1]
        cols = torch.arange(width, device=tokens.device)[None]
        slots = count[active][:, None] + cols
        valid = (cols < n[:, None]) & (slots < max_new)
        hit = valid & torch.isin(tokens, stop_ids)
        first = torch.where(hit.any(dim=1), hit.float().argmax(dim=1), width)
        valid &= cols <= first[:, None]
        r, c = valid.nonzero(as_tuple=True)
        out.tokens[active[r], slots[r, c]] = tokens[r, c]
        out.logps[active[r], slots[r, c]] = logps[r, c]
        emitted = valid.sum(dim=1)
        self.stats.tokens += int(emitted.sum())
        count[active] += emitted
        stopped = first < width
        out.stopped[active[stopped]] = True
        out.lengths[active[stopped]] = count[active[stopped]]
        return stopped | (count[active] >= max_new)
