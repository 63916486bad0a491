"""``TorchEngine``: in-process batched generation with a KV cache."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence

import torch
from transformers import PreTrainedModel, StaticCache

from posttrain.engines.base import GenerationOutput
from posttrain.engines.sampling import sample_tokens
from posttrain.types import SamplingParams


class TorchEngine:
    """Generates with its own copy of a Hugging Face causal LM.

    Prompts of different lengths share one batch (left padding, explicit position ids). Each
    ``generate`` call uses a ``torch.Generator`` seeded from ``sampling.seed`` (or drawn from the
    global RNG), so a seeded call is reproducible.

    Decoding a tiny model is overhead- and memory-bound, not FLOP-bound: a growing
    ``DynamicCache`` spends most of each step in ``torch.cat``, and SDPA with a padding mask is
    slower than eager attention for one query token. The engine therefore preallocates a
    ``StaticCache`` and decodes with eager attention (docs/performance.md has the figures).
    """

    def __init__(
        self,
        model: PreTrainedModel,
        pad_token_id: int,
        eos_token_id: int | None = None,
        max_batch_size: int = 256,
        version: int = 0,
    ) -> None:
        self.model = copy.deepcopy(model).eval()
        self.model.set_attn_implementation("eager")
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.pad_token_id = pad_token_id
        self.eos_token_id = eos_token_id
        self.max_batch_size = max_batch_size
        self._version = version
        self._params = dict(self.model.named_parameters())

    @property
    def version(self) -> int:
        return self._version

    def update_weights(
        self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int
    ) -> None:
        """Copy new weights in place; an unknown name or shape raises ``KeyError``/``ValueError``."""
        with torch.no_grad():
            for name, tensor in named_tensors:
                if name not in self._params:
                    raise KeyError(f"engine has no parameter {name!r}")
                target = self._params[name]
                if target.shape != tensor.shape:
                    raise ValueError(f"{name}: shape {tuple(tensor.shape)} != {tuple(target.shape)}")
                target.copy_(tensor)
        self._version = version

    @torch.no_grad()
    def generate(
        self, prompts: Sequence[Sequence[int]], sampling: SamplingParams
    ) -> list[GenerationOutput]:
        if any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token")
        seed = sampling.seed if sampling.seed is not None else int(torch.randint(2**62, ()).item())
        generator = torch.Generator().manual_seed(seed)
        outs: list[GenerationOutput] = []
        for i in range(0, len(prompts), self.max_batch_size):
            outs += self._generate_batch(prompts[i : i + self.max_batch_size], sampling, generator)
        return outs

    def _generate_batch(
        self, prompts: Sequence[Sequence[int]], sampling: SamplingParams, gen: torch.Generator
    ) -> list[GenerationOutput]:
        b, p_len = len(prompts), max(len(p) for p in prompts)
        ids = torch.full((b, p_len), self.pad_token_id, dtype=torch.long)
        attn = torch.zeros((b, p_len + sampling.max_new_tokens), dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, p_len - len(p) :] = torch.tensor(list(p), dtype=torch.long)
            attn[i, p_len - len(p) : p_len] = 1
        stops = set(sampling.stop_token_ids)
        if self.eos_token_id is not None:
            stops.add(self.eos_token_id)
        stop_ids = torch.tensor(sorted(stops), dtype=torch.long)
        positions = (attn[:, :p_len].cumsum(-1) - 1).clamp(min=0)
        cache = StaticCache(config=self.model.config, max_cache_len=attn.shape[1])
        tokens = torch.empty((b, sampling.max_new_tokens), dtype=torch.long)
        logps = torch.zeros((b, sampling.max_new_tokens), dtype=torch.float32)
        done = torch.zeros(b, dtype=torch.bool)
        lengths = torch.full((b,), sampling.max_new_tokens, dtype=torch.long)
        step_ids, next_pos, n_steps = ids, positions, 0
        for t in range(sampling.max_new_tokens):
            logits = self.model(
                input_ids=step_ids,
                attention_mask=attn[:, : p_len + t],
                position_ids=next_pos,
                cache=cache,
                use_cache=True,
                logits_to_keep=1,
            ).logits[:, -1]
            tok, lp = sample_tokens(logits, sampling, gen)
            tok = torch.where(done, self.pad_token_id, tok)
            tokens[:, t], logps[:, t] = tok, torch.where(done, 0.0, lp)
            attn[:, p_len + t] = (~done).long()
            hit = ~done & torch.isin(tok, stop_ids)
            lengths = torch.where(hit, t + 1, lengths)
            done |= hit
            n_steps = t + 1
            if bool(done.all()):
                break
            step_ids = tok[:, None]
            next_pos = next_pos[:, -1:] + 1
        outs = []
        for i, p in enumerate(prompts):
            n = min(int(lengths[i]), n_steps)
            finished = n < sampling.max_new_tokens or bool(
                torch.isin(tokens[i, n - 1], stop_ids)
            )
            outs.append(
                GenerationOutput(
                    prompt_ids=list(p),
                    token_ids=tokens[i, :n].tolist(),
                    logprobs=logps[i, :n].tolist(),
                    finish_reason="stop" if finished else "length",
                    version=self._version,
                )
            )
        return outs
