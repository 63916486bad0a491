"""``Trainer``: one policy (plus an optional frozen reference), one optimiser, exact steps of
any micro-batch loss (each objective's step is a function over it: ``objective_steps``,
``rl_update``), and the features' add-ons (``hooks.TrainerAddon``: modules trained after each
step, checkpointed with the trainer).

An optimiser step may span many micro-batches; losses use step-global normalisers, so the
update is the same for any micro-batch size (up to float rounding). A step whose loss or
gradient norm is not finite is skipped (weights and optimiser untouched) and counted; more
than ``max_bad_steps`` such steps in a row raise ``TrainingDivergedError``. Parameters and
optimiser state are fp32; ``trainer.precision`` sets the compute dtype.

Mixed precision (``Precision``): forward passes run under ``torch.autocast`` in bf16 or fp16
over the fp32 master weights, and log-softmax and losses are computed in fp32 on top
(``models.logprobs`` upcasts the logits). fp16 scales the loss (``GradScaler``): an
overflowing step is skipped and the scale lowered, without counting as a bad step. fp32
parameters under autocast rather than bf16 parameters with a separate fp32 copy: one copy of
the weights, no custom optimiser step, every gradient reaching the fp32 weights unrounded; the
price is that the matmuls cast the weights to bf16 on every forward, cheap next to the matmul.
The optimiser is AdamW with linear warmup then cosine decay (``lr_factor``).
"""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import torch

from posttrain.algos import StepNorm
from posttrain.config import OptimConfig, TrainerConfig
from posttrain.config.sections.trainer import COMPUTE_DTYPES
from posttrain.hooks import TrainerAddon
from posttrain.models import frozen, prefix_lengths
from posttrain.models.devices import full, resolve_device
from posttrain.models.logprobs import Scorer
from posttrain.models.lora import (
    adapter_export,
    adapter_state,
    add_lora,
    is_lora,
    load_adapter_state,
    merged_copy,
    merged_weights,
)
from posttrain.models.routing import replay
from posttrain.train.parallel import (
    DataParallel,
    full_optimizer_state,
    gathered_copy,
    load_full_optimizer_state,
)
from posttrain.types import Batch

R = TypeVar("R")
MicroLoss = Callable[[Batch, StepNorm], tuple[torch.Tensor, dict[str, torch.Tensor]]]


def mean_metrics(history: list[dict[str, float]]) -> dict[str, float]:
    """Per-key mean over optimiser steps (a key a step lacks counts as 0)."""
    keys = {k for h in history for k in h}
    return {k: sum(h[k] for h in history if k in h) / len(history) for k in sorted(keys)}


class Precision:
    """The compute precision ``name`` (``fp32``, ``bf16``, ``fp16``) on ``device_type``."""

    def __init__(self, name: str, device_type: str) -> None:
        if name not in COMPUTE_DTYPES:
            raise ValueError(f"unknown precision {name!r}; known: {', '.join(COMPUTE_DTYPES)}")
        if name == "fp16" and device_type != "cuda":
            raise ValueError("trainer.precision fp16 needs a CUDA device (loss scaling for "
                             f"fp16 runs there); on {device_type} use bf16")
        self.name, self.device_type = name, device_type
        self.dtype = getattr(torch, COMPUTE_DTYPES[name])
        self.scaler = torch.amp.GradScaler(device_type) if name == "fp16" else None

    def autocast(self) -> contextlib.AbstractContextManager:
        """Forward passes in the compute dtype (nothing for fp32)."""
        if self.name == "fp32":
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.dtype)

    def backward(self, loss: torch.Tensor) -> None:
        (loss if self.scaler is None else self.scaler.scale(loss)).backward()

    def unscale(self, optimizer: torch.optim.Optimizer) -> None:
        """Gradients back to their true size before clipping (fp16)."""
        if self.scaler is not None:
            self.scaler.unscale_(optimizer)

    def overflowed(self, loss: float, grad_norm: float) -> bool:
        """An fp16 step whose loss is finite but whose scaled gradients overflowed: the scale
        is lowered and the step skipped (not a sign of divergence)."""
        if self.scaler is None or not math.isfinite(loss) or math.isfinite(grad_norm):
            return False
        self.scaler.update()
        return True

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        if self.scaler is None:
            optimizer.step()
            return
        self.scaler.step(optimizer)
        self.scaler.update()

    def state_dict(self) -> dict:
        return {} if self.scaler is None else {"scaler": self.scaler.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        if self.scaler is not None and "scaler" in state:
            self.scaler.load_state_dict(state["scaler"])


def lr_factor(step: int, total_steps: int, cfg: OptimConfig) -> float:
    """Multiplier of ``cfg.lr`` at optimiser step ``step`` (0-based).

    Warmup: ``(step + 1) / warmup_steps``. Then cosine from 1 to ``min_lr_ratio`` over the
    remaining steps (``constant`` keeps 1).
    """
    if step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    if cfg.schedule == "constant":
        return 1.0
    span = max(1, total_steps - cfg.warmup_steps)
    progress = min(1.0, (step - cfg.warmup_steps) / span)
    return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def build_optimizer(model: torch.nn.Module, cfg: OptimConfig, total_steps: int
                    ) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, betas=cfg.betas, eps=cfg.eps,
                            weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, total_steps, cfg))
    return opt, sched


class TrainingDivergedError(RuntimeError):
    """Too many consecutive non-finite steps."""


class Trainer:
    def __init__(self, model: torch.nn.Module, optim: OptimConfig, total_steps: int,
                 settings: TrainerConfig | None = None,
                 ref_model: torch.nn.Module | None = None,
                 addons: Sequence[TrainerAddon] = ()) -> None:
        self.settings = settings or TrainerConfig()
        self.device = resolve_device(self.settings.device, "trainer.device")
        if any(p.dtype in (torch.bfloat16, torch.float16) for p in model.parameters()):
            model.float()  # master weights (and so the optimiser state) are at least fp32
        self.model = model.to(self.device)
        self.precision = Precision(self.settings.precision, self.device.type)
        self.ref_model = ref_model.to(self.device).eval() if ref_model is not None else None
        if self.ref_model is not None:
            self.ref_model.requires_grad_(False)
        self.optim_cfg = optim
        if self.settings.gradient_checkpointing:
            model.activation_checkpointing_enable({"use_reentrant": False})
        # inside a process group: data parallel (replicated, or sharded with FSDP2)
        self.parallel = DataParallel.current(sharded=self.settings.shard,
                                             offload=self.settings.offload)
        lora = self.settings.lora
        if lora is not None:
            if self.parallel is not None and self.parallel.sharded:
                raise ValueError("trainer.lora trains replicated adapters (trainer.shard=false)")
            model = self.model = add_lora(model, lora.r, lora.alpha, lora.dropout,
                                          tuple(lora.target_modules))
            if self.parallel is not None:
                self.parallel.same_start([p for p in model.parameters() if p.requires_grad])
        self.scorer = self.parallel.wrap(model) if self.parallel else Scorer(model)
        self.optimizer, self.scheduler = build_optimizer(model, optim, total_steps)
        self.step = 0
        self.optimizer_steps = self.micro_batches = 0  # attempted, skipped ones too
        self.bad_steps = self.consecutive_bad = 0
        # what an objective keeps from step to step where the trainer lives, checkpointed
        # with it (the RL controllers: ``rl_update.controllers``)
        self.objective_state: dict[str, dict] = {}
        # modules the features train after each step (hook ``trainer_addon``), checkpointed
        self.addons = tuple(addons)
        for addon in self.addons:
            addon.attach(self.device)

    @property
    def sharded(self) -> bool:
        return self.parallel is not None and self.parallel.sharded

    # -- log-probs ---------------------------------------------------------------------------
    def token_logprobs(self, model, mb: Batch, temperature: float, entropy: bool,
                       top_k: int = 0, top_p: float = 1.0, whole: bool = False):
        """``(log-probs, entropies)`` ``[b, T]`` of ``mb``'s loss-mask tokens under ``model``
        (the policy through its data-parallel wrapper), with gradient; over the ``top_k`` /
        ``top_p`` support the engine sampled from (``sequence_logprobs``); with
        ``trainer.routing_replay``, through the experts the engine used (``mb.routing``).
        ``whole``: encode every row whole (no shared prefix), each token once."""
        replaying = self.settings.routing_replay and mb.routing is not None
        shared = None
        if self.settings.share_prefix and not (replaying or whole):  # every token's experts
            shared = prefix_lengths(mb.loss_mask, mb.attention_mask)
        score = self.scorer if model is self.model else Scorer(model)
        with replay(model, mb.routing) if replaying else contextlib.nullcontext():
            return score(mb.input_ids, mb.attention_mask, temperature=temperature,
                         chunk_size=self.settings.logprob_chunk_size, with_entropy=entropy,
                         prefix_lens=shared, score_mask=mb.loss_mask, top_k=top_k, top_p=top_p)

    def score_tokens(self, batch: Batch, model: torch.nn.Module,
                     fn: Callable[[Batch], torch.Tensor]) -> torch.Tensor:
        """``[B, T, ...]`` of ``fn(micro_batch)`` (``[b, t, ...]``, ``t <= T``) over
        micro-batches on the trainer's device, in eval mode, no gradient; on ``batch``'s device."""
        out: torch.Tensor | None = None
        i = 0
        with frozen(model), self.precision.autocast():
            for mb in batch.split(self.settings.micro_batch_size):
                values = fn(mb.to(self.device)).to(batch.input_ids.device)
                if out is None:
                    out = values.new_zeros((*batch.input_ids.shape, *values.shape[2:]),
                                           dtype=torch.float32)
                out[i : i + len(mb), : values.shape[1]] = values
                i += len(mb)
        return out

    def compute_logprobs(self, batch: Batch, temperature: float = 1.0, reference: bool = False,
                         top_k: int = 0, top_p: float = 1.0):
        """``[B, T]`` log-probs of ``batch``'s loss-mask tokens (0 elsewhere) under the policy
        (or the reference), no gradient; ``top_k``/``top_p`` as in ``token_logprobs``."""
        model = self.ref_model if reference else self.model
        if model is None:
            raise ValueError("no reference model was given to the Trainer")
        return self.score_tokens(batch, model, lambda mb: self.token_logprobs(
            model, mb, temperature, False, top_k, top_p)[0])

    def apply(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        """``fn(self, *args, **kwargs)``: an objective's steps (``train.objective_steps``,
        ``train.rl_update``) run where the trainer lives (``cluster.RayTrainer`` ships ``fn``
        to its actor)."""
        return fn(self, *args, **kwargs)

    # -- the optimiser step ------------------------------------------------------------------
    def optimizer_step(self, batch: Batch, micro: MicroLoss, max_len: int | None = None,
                       micro_size: int | None = None) -> dict[str, float]:
        """One optimiser step of any loss given per micro-batch: ``micro(mb, norm)`` returns the
        micro-batch's share of the step loss and its statistics (normalised by ``norm``);
        micro-batches of ``micro_size`` rows (default ``trainer.micro_batch_size``), each
        moved to the trainer's device."""
        self.model.train()
        norm = StepNorm.from_mask(batch.loss_mask, max_len)
        self.optimizer.zero_grad(set_to_none=True)
        sums: dict[str, float] = {}
        parts = batch.split(micro_size or self.settings.micro_batch_size)
        self.optimizer_steps += 1
        self.micro_batches += len(parts)  # over all processes
        mine = [(p, True) for p in parts] if self.parallel is None else self.parallel.shard(parts)
        for mb, live in mine:
            with self.precision.autocast():
                loss, stats = micro(mb.to(self.device), norm)
            self.precision.backward(loss if live else loss * 0)
            for k, v in {"loss": loss.detach(), **stats}.items() if live else ():
                sums[k] = sums.get(k, 0.0) + float(v)
        out = self.apply_gradients(sums)
        for addon in self.addons if not out["skipped"] else ():
            out |= addon.step(self.model, batch, micro_size or self.settings.micro_batch_size,
                              self.precision.autocast)
        return out

    def apply_gradients(self, sums: dict[str, float]) -> dict[str, float]:
        """The step on the gradients the trainable parameters hold (``optimizer_step``'s
        backward passes, or a caller's own: tinker-serve's clients accumulate theirs over
        requests), clipped; skipped on an fp16 overflow or when the loss (``sums["loss"]``;
        ``sums``: the step's summed statistics) or the gradient norm is not finite."""
        params = [p for p in self.model.parameters() if p.requires_grad]
        if self.parallel is not None:
            self.parallel.sum_gradients(params)
            sums = self.parallel.sum_stats(sums)
        total = sums.pop("loss", 0.0)
        self.precision.unscale(self.optimizer)
        grad_norm = float(full(torch.nn.utils.clip_grad_norm_(
            params, self.optim_cfg.grad_clip or float("inf"))))
        lr = self.scheduler.get_last_lr()[0]
        if self.precision.overflowed(total, grad_norm):  # fp16: a lower scale, a retry
            self.optimizer.zero_grad(set_to_none=True)
            return {"loss": total, "grad_norm": grad_norm, "lr": lr, "skipped": 1.0,
                    "bad_steps": float(self.bad_steps), "overflow": 1.0}
        if not (math.isfinite(total) and math.isfinite(grad_norm)):
            self.optimizer.zero_grad(set_to_none=True)
            self.bad_steps += 1
            self.consecutive_bad += 1
            if self.consecutive_bad > self.settings.max_bad_steps:
                raise TrainingDivergedError(
                    f"{self.consecutive_bad} consecutive non-finite steps "
                    f"(trainer.max_bad_steps={self.settings.max_bad_steps})")
            return {"loss": total, "grad_norm": grad_norm, "lr": lr, "skipped": 1.0,
                    "bad_steps": float(self.bad_steps)}
        self.precision.step(self.optimizer)
        self.scheduler.step()
        self.step += 1
        self.consecutive_bad = 0
        return {"loss": total, "grad_norm": grad_norm, "lr": lr, "skipped": 0.0,
                "bad_steps": float(self.bad_steps), **sums}

    def counters(self) -> dict[str, int]:
        """Optimiser steps and micro-batches run so far (``posttrain config explain``'s)."""
        return {"optimizer_steps": self.optimizer_steps, "micro_batches": self.micro_batches}

    # -- weights and state -------------------------------------------------------------------
    def named_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """Parameters for an engine's ``update_weights`` (LoRA: merged, under the plain
        model's names)."""
        if is_lora(self.model):
            yield from merged_weights(self.model)
            return
        for name, p in self.model.named_parameters():
            yield name, full(p.detach())

    def adapter(self) -> tuple[dict, list[tuple[str, torch.Tensor]]] | None:
        """The LoRA adapter alone (``models.lora.adapter_export``; None without LoRA): what an
        engine serving adapters gets instead of the merged weights."""
        return adapter_export(self.model) if is_lora(self.model) else None

    def export_model(self) -> torch.nn.Module:
        """The model with whole (unsharded) weights: the model itself, for LoRA a merged plain
        copy, or for a sharded trainer a CPU copy filled with the gathered weights (every rank
        must call it; no process keeps a whole copy between exports)."""
        if is_lora(self.model):
            return merged_copy(self.model)
        return gathered_copy(self.model) if self.sharded else self.model

    def state_dict(self, optimizer: bool = True) -> dict:
        """Scheduler, counters and (with ``optimizer``) the optimiser's state, whole also when
        sharded (every rank must call it then)."""
        whole = full_optimizer_state(self.scorer, self.optimizer, self.sharded) if optimizer \
            else None
        return {**({"optimizer": whole} if optimizer else {}),
                "scheduler": self.scheduler.state_dict(), "step": self.step,
                "optimizer_steps": self.optimizer_steps, "micro_batches": self.micro_batches,
                "bad_steps": self.bad_steps, "consecutive_bad": self.consecutive_bad,
                "objective_state": copy.deepcopy(self.objective_state),
                "precision": self.precision.state_dict(),
                **({"adapter": adapter_state(self.model)} if is_lora(self.model) else {}),
                **{addon.name: addon.state_dict() for addon in self.addons}}

    def load_state_dict(self, state: dict) -> None:
        """``state_dict``'s; without an optimiser state, the optimiser is left as it is."""
        if "optimizer" in state:
            load_full_optimizer_state(self.scorer, self.optimizer, state["optimizer"], self.sharded)
        self.scheduler.load_state_dict(state["scheduler"])
        self.step = state["step"]
        self.optimizer_steps = state.get("optimizer_steps", self.step)  # (older checkpoints)
        self.micro_batches = state.get("micro_batches", 0)
        self.bad_steps = state["bad_steps"]
        self.consecutive_bad = state["consecutive_bad"]
        older = {k: state[k] for k in ("entropy_alpha", "entropy_next", "kl_coef") if k in state}
        self.objective_state = copy.deepcopy(state.get("objective_state", {"rl": older}))
        self.precision.load_state_dict(state.get("precision", {}))
        if "adapter" in state:
            load_adapter_state(self.model, state["adapter"])
        for addon in self.addons:
            if addon.name in state:
                addon.load_state_dict(state[addon.name])
