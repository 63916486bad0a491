"""Stored teacher logits for offline distillation: a teacher's top-k next-token log-probs at
every assistant position of a chat dataset, written once (``posttrain teacher-logits``) and
read back as distillation targets, so the teacher need not be loaded while the student trains.

The file is safetensors: ``indices`` and ``logprobs`` ``[N, k]`` over all positions in dataset
order, ``offsets`` ``[n + 1]`` (conversation ``i`` holds rows ``offsets[i]:offsets[i+1]``),
and metadata with ``k``, the vocabulary size and a fingerprint of the tokenised data. As a
target, each position's distribution is the stored top-k with the remaining mass spread evenly
over the other ``V - k`` tokens (``k = V`` is the exact distribution).
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from posttrain.data.conversations import conversation_segment
from posttrain.models import frozen, token_distributions
from posttrain.models.devices import model_device
from posttrain.recipes.distillation.teachers import Targets
from posttrain.reporting import Reporter
from posttrain.types import Batch, Episode, Segment, TeacherMismatchError


def data_fingerprint(segments: Sequence[Segment]) -> str:
    """sha256 over the token ids and loss masks: stored logits belong to exactly this data."""
    h = hashlib.sha256()
    for s in segments:
        h.update(repr((s.token_ids, s.loss_mask)).encode())
    return h.hexdigest()


def write_teacher_logits(teacher: torch.nn.Module, tokenizer, conversations: list[list[dict]],
                         path: str | Path, topk: int, batch_size: int = 16,
                         reporter: Reporter | None = None,
                         tools: Sequence[list[dict] | None] | None = None) -> Path:
    """Score ``conversations`` (conversation ``i`` rendered with ``tools[i]``, if given) with
    ``teacher`` and write its top-``topk`` log-probs at every assistant position to ``path``
    (atomically: a partial file never appears there)."""
    tools = tools or [None] * len(conversations)
    segments = [conversation_segment(tokenizer, c, t) for c, t in zip(conversations, tools)]
    vocab = teacher.get_output_embeddings().out_features
    if not 1 <= topk <= vocab:
        raise ValueError(f"topk must lie in 1..{vocab} (the vocabulary), got {topk}")
    indices, logprobs, offsets = [], [], [0]
    batches = range(0, len(segments), batch_size)
    if reporter is not None:
        reporter.start("teacher logits", len(batches))
    for n, i in enumerate(batches):
        part = segments[i:i + batch_size]
        batch = Batch.from_episodes([Episode([s]) for s in part], tokenizer.pad_token_id
                                    ).to(model_device(teacher))
        with frozen(teacher) as model:
            logp = token_distributions(model, batch.input_ids, batch.attention_mask,
                                       batch.loss_mask)
        top = logp.topk(topk, dim=-1)
        indices.append(top.indices.to("cpu", torch.int32))
        logprobs.append(top.values.cpu())
        for row in batch.loss_mask[:, 1:].sum(dim=1).long().tolist():
            offsets.append(offsets[-1] + row)
        if reporter is not None:
            reporter.advance(n + 1, f"{offsets[-1]} positions")
    if reporter is not None:
        reporter.finish()
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    save_file({"indices": torch.cat(indices), "logprobs": torch.cat(logprobs),
               "offsets": torch.tensor(offsets, dtype=torch.int64)}, str(tmp),
              metadata={"topk": str(topk), "vocab": str(vocab),
                        "fingerprint": data_fingerprint(segments)})
    os.replace(tmp, path)
    return path


class StoredLogits:
    """Teacher targets read from a ``write_teacher_logits`` file."""

    def __init__(self, path: str | Path) -> None:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no stored teacher logits at {str(path)!r}; write them "
                                    "with `posttrain teacher-logits`")
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
        if not {"topk", "vocab", "fingerprint"} <= set(meta):
            raise ValueError(f"{str(path)!r} is not a teacher-logits file (metadata {meta})")
        tensors = load_file(str(path))
        self.indices, self.logprobs = tensors["indices"].long(), tensors["logprobs"]
        self.offsets = tensors["offsets"]
        self.topk, self.vocab = int(meta["topk"]), int(meta["vocab"])
        self.fingerprint = meta["fingerprint"]

    def check(self, segments: Sequence[Segment], vocab: int) -> None:
        """The stored logits must belong to exactly this data and vocabulary."""
        if vocab != self.vocab:
            raise TeacherMismatchError(f"stored teacher logits cover a vocabulary of "
                                       f"{self.vocab}; the student's has {vocab}")
        if data_fingerprint(segments) != self.fingerprint:
            raise TeacherMismatchError("the stored teacher logits were written for other data "
                                       "(or another tokenizer): rewrite them for this dataset")

    def dense(self, conversation: int) -> torch.Tensor:
        """``[n, V]`` log-probs of conversation ``conversation``'s positions: the stored
        top-k, the remaining mass spread evenly over the other tokens."""
        lo, hi = int(self.offsets[conversation]), int(self.offsets[conversation + 1])
        top = self.logprobs[lo:hi]
        rest = self.vocab - self.topk
        out = torch.full((hi - lo, self.vocab), -math.inf)
        if rest:
            tail = torch.log1p(-top.exp().sum(-1).clamp(max=1 - 1e-6)) - math.log(rest)
            out = tail[:, None].expand(-1, self.vocab).clone()
        return out.scatter(1, self.indices[lo:hi], top)

    def targets(self, conversations: Sequence[int]) -> Callable[[Batch], Targets]:
        """For ``distill_step`` on a batch whose row ``r`` is conversation ``conversations[r]``."""

        def targets(mb: Batch) -> Targets:
            logp = torch.cat([self.dense(conversations[int(r)]) for r in mb.rows])
            return [(torch.arange(len(logp)), torch.ones(len(logp)), logp)]

        return targets
