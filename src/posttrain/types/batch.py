"""``Batch``: padded tensors built from segments, the unit the trainer consumes.

Every per-token tensor is ``[B, T]`` and aligned with ``input_ids``: entry ``t`` describes token
``t`` (which the model predicts from tokens ``< t``). Rows are right-padded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields, replace

import torch

from posttrain.types.episode import Episode, Segment


@dataclass
class Batch:
    """Padded training tensors.

    ``input_ids``/``attention_mask``/``loss_mask``/``behaviour_logprobs``/``versions``: ``[B, T]``.
    ``rewards``/``group_index``/``rows``: ``[B]`` (``rows``: a row's index in the batch it
    was built as, kept through ``select`` and ``split``). Optional per-token fields filled in
    by a pipeline: ``old_logprobs`` (trainer recompute at rollout weights), ``old_entropy``
    (the entropy there, for ``taco``), ``ref_logprobs``, ``advantages``, and for a critic
    ``old_values`` (at rollout) and ``returns`` (its targets). ``routing`` ``[B, T, L, k]``:
    the engine's experts of each token (-1: none recorded), when its segments carry them.

    Packed rows (``Batch.packed``) hold several samples: ``attention_mask`` then numbers each
    token's sample within its row (1, 2, ...; 0 is padding) and the model attends within a
    sample only.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    loss_mask: torch.Tensor
    behaviour_logprobs: torch.Tensor
    versions: torch.Tensor
    rewards: torch.Tensor
    group_index: torch.Tensor
    rows: torch.Tensor | None = None
    old_logprobs: torch.Tensor | None = None
    old_entropy: torch.Tensor | None = None
    ref_logprobs: torch.Tensor | None = None
    advantages: torch.Tensor | None = None
    old_values: torch.Tensor | None = None
    returns: torch.Tensor | None = None
    routing: torch.Tensor | None = None

    @classmethod
    def from_episodes(cls, episodes: Sequence[Episode], pad_token_id: int) -> Batch:
        """One row per segment; segments of an episode share its reward and group."""
        if not episodes:
            raise ValueError("cannot build a Batch from zero episodes")
        group_ids: dict[str, int] = {}
        flat = [(seg, ep.reward, group_ids.setdefault(ep.group_id, len(group_ids)))
                for ep in episodes for seg in ep.segments]
        segs, rewards, groups = zip(*flat)
        b, t = len(segs), max(len(s.token_ids) for s in segs)
        ids = torch.full((b, t), pad_token_id, dtype=torch.long)
        attn = torch.zeros((b, t), dtype=torch.long)
        mask = torch.zeros((b, t), dtype=torch.float32)
        logp = torch.zeros((b, t), dtype=torch.float32)
        vers = torch.full((b, t), -1, dtype=torch.long)
        for i, s in enumerate(segs):
            n = len(s.token_ids)
            ids[i, :n] = torch.tensor(s.token_ids, dtype=torch.long)
            attn[i, :n] = 1
            mask[i, :n] = torch.tensor(s.loss_mask, dtype=torch.float32)
            logp[i, :n] = torch.tensor(s.logprobs, dtype=torch.float32)
            vers[i, :n] = torch.tensor(s.versions, dtype=torch.long)
        return cls(input_ids=ids, attention_mask=attn, loss_mask=mask, behaviour_logprobs=logp,
                   versions=vers, rewards=torch.tensor(rewards, dtype=torch.float32),
                   group_index=torch.tensor(groups, dtype=torch.long), rows=torch.arange(b),
                   routing=_routing(segs, t))

    @classmethod
    def packed(cls, segments: Sequence[Segment], max_tokens: int, pad_token_id: int) -> Batch:
        """``segments`` packed into rows of at most ``max_tokens`` tokens (first fit, longest
        first; a longer segment gets a row of its own)."""
        order = sorted(range(len(segments)), key=lambda i: -len(segments[i].token_ids))
        rows: list[list[int]] = []
        used: list[int] = []  # tokens in each row so far
        for i in order:
            n = len(segments[i].token_ids)
            k = next((k for k, u in enumerate(used) if u + n <= max_tokens), len(rows))
            if k == len(rows):
                rows.append([])
                used.append(0)
            rows[k].append(i)
            used[k] += n
        packed = [Segment([t for j in r for t in segments[j].token_ids],
                          [m for j in r for m in segments[j].loss_mask],
                          [x for j in r for x in segments[j].logprobs],
                          [v for j in r for v in segments[j].versions]) for r in rows]
        batch = cls.from_episodes([Episode([s]) for s in packed], pad_token_id)
        sample = torch.tensor([k + 1 for r in rows for k, j in enumerate(r)
                               for _ in segments[j].token_ids])
        batch.attention_mask[batch.attention_mask > 0] = sample
        return batch

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def to(self, device: torch.device | str) -> Batch:
        """The batch with every tensor on ``device`` (itself when they are there already)."""
        if self.input_ids.device == torch.device(device):
            return self
        return self._map(lambda v: v.to(device))

    def replace(self, **changes: torch.Tensor | None) -> Batch:
        return replace(self, **changes)

    def select(self, index: torch.Tensor | Sequence[int]) -> Batch:
        """Rows ``index``, the per-token fields trimmed to their longest row."""
        idx = torch.as_tensor(index, dtype=torch.long)
        length = int((self.attention_mask[idx] > 0).sum(dim=1).max().item()) if len(idx) else 0
        return self._map(lambda v: v[idx, :length] if v.dim() >= 2 else v[idx])

    def _map(self, fn) -> Batch:
        """A batch of ``fn`` of every tensor field (None stays None)."""
        return Batch(**{f.name: None if (v := getattr(self, f.name)) is None else fn(v)
                        for f in fields(self)})

    def split(self, micro_batch_size: int) -> list[Batch]:
        """Consecutive micro-batches of at most ``micro_batch_size`` rows."""
        if micro_batch_size < 1:
            raise ValueError(f"micro_batch_size must be >= 1, got {micro_batch_size}")
        n = len(self)
        return [self.select(range(i, min(i + micro_batch_size, n)))
                for i in range(0, n, micro_batch_size)]


def _routing(segments: Sequence[Segment], width: int) -> torch.Tensor | None:
    """``[B, width, L, k]`` of the segments' routing (-1 where a segment has none)."""
    known = [s.routing for s in segments if s.routing is not None]
    if not known:
        return None
    out = torch.full((len(segments), width, *known[0].shape[1:]), -1, dtype=torch.long)
    for i, s in enumerate(segments):
        if s.routing is not None:
            out[i, : len(s.routing)] = s.routing
    return out
