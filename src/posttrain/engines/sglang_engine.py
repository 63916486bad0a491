"""``SGLangEngine``: SGLang's offline engine behind the ``Engine`` protocol, for GPU machines
(its PyPI wheel is CUDA-only: ``pip install 'posttrain[gpu]'``; imported only when
constructed). Unverified on CPU; its ``gpu``-marked tests run where a GPU is lent.

Token-id prompts in (``skip_tokenizer_init``), token ids, log-probs and finish reasons out;
one seed per request; weights through ``update_weights_from_tensor`` followed by a cache flush;
``score`` from the prompt log-probs of a one-token request. As for vLLM, ``weights_checksum`` is
that of the weights last sent, and ``sync_weights``' parity probe proves what the engine
computes. ``sleep=True`` (``engine.sleep``) starts SGLang with its memory saver: ``sleep``
releases the weights, KV cache and CUDA graphs (``release_memory_occupation``) and the next
``update_weights`` resumes them (``resume_memory_occupation``) before loading. Written against
SGLang's documented API; not run here (no GPU).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import torch

from posttrain.engines.base import EngineUnavailableError, GenerationOutput
from posttrain.engines.sampling import resolve_seeds
from posttrain.engines.sleep import EngineAsleepError
from posttrain.engines.weights import weights_checksum
from posttrain.types import SamplingParams


def require_sglang():
    try:
        import sglang
    except ImportError as exc:
        raise EngineUnavailableError("engine.name=sglang needs SGLang on a CUDA machine: "
                                     "pip install 'posttrain[gpu]'") from exc
    return sglang


class SGLangEngine:
    def __init__(self, model_dir: str | Path, dtype: str = "float32",
                 mem_fraction_static: float = 0.5, version: int = 0,
                 sleep: bool = False) -> None:
        sglang = require_sglang()
        self._engine = sglang.Engine(model_path=str(model_dir), dtype=dtype,
                                     skip_tokenizer_init=True, random_seed=0,
                                     mem_fraction_static=mem_fraction_static,
                                     log_level="error", enable_memory_saver=sleep)
        self._asleep = False
        self._version = version
        self._checksum = ""

    @property
    def version(self) -> int:
        return self._version

    @staticmethod
    def _params(sampling: SamplingParams, seed: int) -> dict:
        return {"max_new_tokens": sampling.max_new_tokens, "temperature": sampling.temperature,
                "top_p": sampling.top_p, "top_k": sampling.top_k or -1,
                "stop_token_ids": list(sampling.stop_token_ids), "sampling_seed": seed}

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams,
                 seeds: Sequence[int] | None = None) -> list[GenerationOutput]:
        if any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token")
        self._check_awake()
        params = [self._params(sampling, s) for s in resolve_seeds(len(prompts), sampling, seeds)]
        outs = self._engine.generate(input_ids=[list(p) for p in prompts],
                                     sampling_params=params, return_logprob=True)
        results = []
        for prompt, out in zip(prompts, outs):
            meta = out["meta_info"]
            ids = list(out["output_ids"])
            logprobs = [0.0 if sampling.greedy else float(lp)
                        for lp, _, _ in meta["output_token_logprobs"]]
            reason = (meta.get("finish_reason") or {}).get("type")
            results.append(GenerationOutput(
                prompt_ids=list(prompt), token_ids=ids, logprobs=logprobs,
                finish_reason="stop" if reason == "stop" else "length", version=self._version))
        return results

    def score(self, sequences: Sequence[Sequence[int]]) -> list[list[float]]:
        """Log-prob of every token given the ones before it (0.0 for the first) at
        temperature 1: SGLang's input-token log-probs."""
        self._check_awake()
        params = {"max_new_tokens": 1, "temperature": 1.0}
        outs = self._engine.generate(input_ids=[list(s) for s in sequences],
                                     sampling_params=params, return_logprob=True,
                                     logprob_start_len=0)
        return [[0.0] + [float(lp) for lp, _, _ in out["meta_info"]["input_token_logprobs"][1:]]
                for out in outs]

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]],
                       version: int) -> None:
        named = [(n, t.detach()) for n, t in named_tensors]
        if self._asleep:
            self._engine.resume_memory_occupation()
            self._asleep = False
        self._engine.update_weights_from_tensor(named_tensors=named)
        self._engine.flush_cache()
        self._checksum, self._version = weights_checksum(named), version

    def sleep(self) -> None:
        """Release the weights' and the cache's GPU memory until the next
        ``update_weights``."""
        if not self._asleep:
            self._engine.release_memory_occupation()
            self._asleep = True

    def _check_awake(self) -> None:
        if self._asleep:
            raise EngineAsleepError("the SGLang engine is asleep (engine.sleep): its weights "
                                    "come back with the next weight sync")

    def weights_checksum(self) -> str:
        return self._checksum
