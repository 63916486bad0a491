"""What a sample request asks for besides its samples (Tinker's ``SampleRequest`` fields),
scored with the sampler's weights through the model's own forward, at temperature 1:

- ``prompt_logprobs``: each prompt token's log-prob (the first has none: NaN);
- ``topk_prompt_logprobs: k``: the ``k`` likeliest tokens at each prompt position and their
  log-probs, likeliest first (row 0 has none: token 0 at ``MASK_LOGPROB``, Tinker's filler);
- ``topk_sample_logprobs: k``: the same at each sampled token's position;
- ``target_prompt_logprobs``: ``[len(prompt) - 1, K]`` token ids (dense, or sparse CSR with
  the unlisted cells ``-1``); cell ``[i, j]`` is scored at prompt position ``i + 1``, and a
  ``-1`` cell asks nothing and gets 0.0;
- ``prompt_logprobs_last_n: N``: only the last ``N`` prompt positions are scored (the rest
  have none), for the prompt's log-probs and its top-k;
- ``prompt_alt_tokens_k: k``: ``k`` tokens drawn with replacement at each prompt position
  after the first, at the request's temperature (0: the likeliest, ``k`` times) and from its
  ``seed``, with the model's log-prob of each (at temperature 1).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import torch

from posttrain.models.logprobs import next_token_logits, top_logprobs
from posttrain.tinker_api.losses import BadRequest

MASK_LOGPROB = -99999.0
TopK = tuple[np.ndarray, np.ndarray]  # int32 tokens [n, k], float32 log-probs [n, k]


def _count(body: dict, key: str) -> int:
    value = body.get(key) or 0
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise BadRequest(f"{key} must be a non-negative integer, not {value!r}")
    return value


def _targets(tensor: dict, rows: int) -> torch.Tensor:
    """The requested ids ``[rows, K]`` as a dense int64 tensor, ``-1`` where none."""
    try:
        shape, data = [int(s) for s in tensor["shape"]], tensor["data"]
        if len(shape) != 2 or shape[0] != rows:
            raise ValueError(f"shape {shape}, not [len(prompt) - 1 = {rows}, K]")
        if tensor.get("sparse_crow_indices") is None:
            return torch.tensor(data, dtype=torch.long).reshape(shape)
        crow, col = tensor["sparse_crow_indices"], tensor["sparse_col_indices"]
        dense = torch.full(shape, -1, dtype=torch.long)
        for r in range(shape[0]):
            dense[r, col[crow[r]:crow[r + 1]]] = torch.tensor(
                data[crow[r]:crow[r + 1]], dtype=torch.long)
        return dense
    except (KeyError, TypeError, ValueError, IndexError, RuntimeError) as exc:
        raise BadRequest(f"target_prompt_logprobs: {exc}") from None


@dataclass(frozen=True)
class Asked:
    prompt_logprobs: bool = False
    topk_prompt: int = 0
    topk_sample: int = 0
    targets: torch.Tensor | None = None  # [len(prompt) - 1, K], -1: none
    last_n: int | None = None
    alt_k: int = 0
    temperature: float = 1.0
    seed: int | None = None

    @classmethod
    def of(cls, body: dict, prompt_length: int) -> Asked:
        """The request's asks, checked against its prompt (``BadRequest``)."""
        last_n = body.get("prompt_logprobs_last_n")
        if last_n is not None and not (body.get("prompt_logprobs") and isinstance(last_n, int)
                                       and 1 <= last_n <= prompt_length - 1):
            raise BadRequest(f"prompt_logprobs_last_n={last_n!r} needs prompt_logprobs and "
                             f"1 <= N <= len(prompt) - 1 = {prompt_length - 1}")
        targets = body.get("target_prompt_logprobs")
        if targets is not None and prompt_length < 2:
            raise BadRequest("target_prompt_logprobs: a one-token prompt has no position")
        sampling = body.get("sampling_params") or {}
        return cls(bool(body.get("prompt_logprobs")), _count(body, "topk_prompt_logprobs"),
                   _count(body, "topk_sample_logprobs"),
                   None if targets is None else _targets(targets, prompt_length - 1), last_n,
                   _count(body, "prompt_alt_tokens_k"),
                   float(sampling.get("temperature", 1.0)), sampling.get("seed"))


@dataclass
class Scores:
    prompt_logprobs: list[float] | None = None  # one a prompt token, NaN where none
    topk_prompt: TopK | None = None  # one row a prompt token
    topk_samples: list[TopK] | None = None  # one row a sampled token, each sample
    targets: np.ndarray | None = None  # float32, the targets' shape
    alt_tokens: tuple[np.ndarray, np.ndarray] | None = None  # int64, float32 [len - 1, k]


def _masked(tokens: torch.Tensor, logp: torch.Tensor, none: int) -> TopK:
    """Top-k rows as Tinker sends them: ``none`` rows without a distribution first (token 0
    at ``MASK_LOGPROB``), then ``tokens``/``logp``."""
    k = tokens.shape[1]
    return (np.concatenate([np.zeros((none, k), np.int32), tokens.cpu().numpy()], dtype=np.int32),
            np.concatenate([np.full((none, k), MASK_LOGPROB, np.float32),
                            logp.float().cpu().numpy()], dtype=np.float32))


def _generator(device: torch.device, seed: int | None) -> torch.Generator:
    generator = torch.Generator(device)
    if seed is None:
        generator.seed()  # its own non-deterministic seed (the global one stays)
    else:
        generator.manual_seed(seed)
    return generator


def _prompt_rows(model, prompt: list[int], asked: Asked) -> dict[str, torch.Tensor]:
    """What ``asked`` asks at each prompt position after the first (row ``i``: position
    ``i + 1``), from one forward over the prompt: the prompt token's log-prob
    (``chosen``), the top-k (``top``, ``top_lp``), the targets' log-probs (``targets``) and
    the alternative draws (``alt``, ``alt_lp``)."""
    ids = torch.tensor(prompt, device=model.device)
    targets = None if asked.targets is None else asked.targets.to(model.device)
    generator = _generator(model.device, asked.seed) if asked.alt_k else None
    rows: dict[str, list[torch.Tensor]] = defaultdict(list)
    first = 0
    for logits in next_token_logits(model, ids):
        logp = torch.log_softmax(logits, dim=-1)
        here = slice(first, first + len(logp))
        first = here.stop
        if asked.prompt_logprobs:
            rows["chosen"].append(logp.gather(-1, ids[1:][here, None])[:, 0])
        if asked.topk_prompt:
            top = logp.topk(min(asked.topk_prompt, logp.shape[-1]))
            rows["top"].append(top.indices)
            rows["top_lp"].append(top.values)
        if targets is not None:
            wanted = targets[here]
            rows["targets"].append(torch.where(wanted >= 0, logp.gather(-1, wanted.clamp(min=0)),
                                               0.0))
        if asked.alt_k:
            if asked.temperature > 0:
                drawn = torch.multinomial(torch.softmax(logits / asked.temperature, dim=-1),
                                          asked.alt_k, replacement=True, generator=generator)
            else:
                drawn = logits.argmax(-1, keepdim=True).expand(-1, asked.alt_k)
            rows["alt"].append(drawn)
            rows["alt_lp"].append(logp.gather(-1, drawn))
    return {name: torch.cat(parts) for name, parts in rows.items()}


@torch.inference_mode()
def score(model: torch.nn.Module, prompt: list[int], samples: list[list[int]],
          asked: Asked) -> Scores:
    """What ``asked`` asks of ``prompt`` and its ``samples``, from ``model``."""
    out = Scores()
    none = len(prompt) - asked.last_n if asked.last_n else 1  # positions without a score
    rows = _prompt_rows(model, prompt, asked)
    if asked.prompt_logprobs:
        out.prompt_logprobs = [float("nan")] * none + rows["chosen"][none - 1:].tolist()
    if asked.topk_prompt:
        out.topk_prompt = _masked(rows["top"][none - 1:], rows["top_lp"][none - 1:], none)
    if asked.topk_sample:
        out.topk_samples = [_masked(*top_logprobs(
            model, torch.tensor(prompt + s, device=model.device), asked.topk_sample,
            start=len(prompt) - 1), 0) for s in samples]
    if asked.targets is not None:
        out.targets = rows["targets"].float().cpu().numpy()
    if asked.alt_k:
        out.alt_tokens = (rows["alt"].cpu().numpy().astype(np.int64),
                          rows["alt_lp"].float().cpu().numpy())
    return out
