"""One base model and a LoRA adapter a training client (PEFT's named adapters on one
``PeftModel``): each request activates its client's adapter, so the base weights are held once.
Gradients accumulate in the adapter across ``forward_backward`` calls; ``optim_step`` applies
them with the client's ``Trainer`` (posttrain's optimiser step: AdamW, with the call's own
hyperparameters), made at its first step, and zeroes them. Adapters start as PEFT draws them
(``B = 0``) from the client's ``seed``, with ``lora_alpha = ALPHA``. A model whose output head
is its input embedding (``tie_word_embeddings``) trains no adapter on the head
(``train_unembed`` has no effect there): merged for sampling, it would change the embedding
too."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import torch

from posttrain.config import OptimConfig, TrainerConfig
from posttrain.models.logprobs import sequence_logprobs
from posttrain.models.lora import merged_weights
from posttrain.tinker_api.losses import LOSSES, BadRequest
from posttrain.tinker_api.wire import Datum
from posttrain.train import Trainer

ALPHA = 32.0
TARGETS = {"attn": ("q_proj", "k_proj", "v_proj", "o_proj"),
           "mlp": ("gate_proj", "up_proj", "down_proj"), "unembed": ("lm_head",)}


MICRO_TOKENS = 8192  # padded tokens a forward holds at once


def micro_batches(data: Sequence[Datum]) -> Iterator[list[Datum]]:
    """Consecutive datums, at most ``MICRO_TOKENS`` padded tokens together (one at least)."""
    part: list[Datum] = []
    for d in data:
        if part and (len(part) + 1) * max(len(x.tokens) for x in (*part, d)) > MICRO_TOKENS:
            yield part
            part = []
        part.append(d)
    if part:
        yield part


@dataclass
class LoraSpec:
    rank: int = 32
    seed: int | None = None
    train_attn: bool = True
    train_mlp: bool = True
    train_unembed: bool = True

    def targets(self) -> list[str]:
        chosen = [TARGETS[k] for k in ("attn", "mlp", "unembed") if getattr(self, f"train_{k}")]
        if not chosen:
            raise BadRequest("lora_config trains nothing (train_attn, train_mlp and "
                             "train_unembed are all false)")
        return [m for group in chosen for m in group]


@dataclass
class Slot:
    name: str  # the PEFT adapter's name
    spec: LoraSpec
    params: dict[str, torch.nn.Parameter]  # the adapter's, by their names in the model
    trainer: Trainer | None = None  # its optimiser step and AdamW state, from its first step


class AdapterPool:
    def __init__(self, base: torch.nn.Module) -> None:
        self.model = base
        self.slots: dict[str, Slot] = {}
        self._names = (f"adapter{i}" for i in itertools.count())

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def create(self, model_id: str, spec: LoraSpec) -> None:
        from peft import LoraConfig, get_peft_model

        targets = spec.targets()
        if getattr(self.model.config, "tie_word_embeddings", False):
            # the output head is the input embedding: its merged delta would change both
            targets = [t for t in targets if t not in TARGETS["unembed"]]
            if not targets:
                raise BadRequest("this model ties its output head to its input embedding: "
                                 "train_unembed alone trains nothing here")
        config = LoraConfig(r=spec.rank, lora_alpha=ALPHA, lora_dropout=0.0,
                            target_modules=targets, bias="none")
        name = next(self._names)
        with torch.random.fork_rng(devices=[]):
            if spec.seed is not None:
                torch.manual_seed(spec.seed)
            if self.slots:
                self.model.add_adapter(name, config)
            else:
                self.model = get_peft_model(self.model, config, adapter_name=name)
        self.slots[model_id] = Slot(name, spec, {
            n: p for n, p in self.model.named_parameters() if f".{name}." in n})

    def delete(self, model_id: str) -> None:
        """Drop a client's adapter and optimizer state (PEFT keeps the model when the last
        adapter goes)."""
        self.model.delete_adapter(self.slots.pop(model_id).name)

    def slot(self, model_id: str) -> Slot:
        if model_id not in self.slots:
            raise KeyError(f"no model {model_id!r} on this server")
        return self.slots[model_id]

    @contextlib.contextmanager
    def active(self, model_id: str) -> Iterator[Slot]:
        slot = self.slot(model_id)
        self.model.set_adapter(slot.name)
        yield slot

    def forward_backward(self, model_id: str, data: Sequence[Datum], loss_fn: str,
                         config: Mapping[str, float | str], forward_only: bool
                         ) -> tuple[list[torch.Tensor], dict[str, float]]:
        """Each datum's log-probs of its ``target_tokens`` and ``loss:sum``; unless
        ``forward_only``, the loss's gradient added to the adapter's."""
        if loss_fn not in LOSSES:
            raise BadRequest(f"loss_fn {loss_fn!r}: this server has {sorted(LOSSES)}")
        logprobs, total = [], 0.0
        with self.active(model_id), torch.set_grad_enabled(not forward_only):
            for part in micro_batches(data):  # the loss is a sum: its gradient is theirs
                lps = self._logprobs(part)
                loss = sum((LOSSES[loss_fn](lp, d.inputs, config) for lp, d in zip(lps, part)),
                           torch.zeros((), device=self.device))
                if not forward_only and loss.requires_grad:
                    loss.backward()
                logprobs += [lp.detach() for lp in lps]
                total += float(loss.detach())
        return logprobs, {"loss:sum": total}

    def _logprobs(self, data: Sequence[Datum]) -> list[torch.Tensor]:
        """Each datum's log-probs of its ``target_tokens``: ``[T]``, or ``[T, K]`` for K
        tokens a position (a top-K distillation target); its other inputs have that shape."""
        lengths, widths = [len(d.tokens) for d in data], []
        for i, d in enumerate(data):
            if "target_tokens" not in d.inputs:
                raise BadRequest(f"datum {i}: loss_fn_inputs lacks target_tokens")
            shape = tuple(d.inputs["target_tokens"].shape)
            if shape[:1] != (lengths[i],) or len(shape) > 2:
                raise BadRequest(f"datum {i}: target_tokens has shape {shape}, the model "
                                 f"input {lengths[i]} tokens (one or K targets each)")
            odd = sorted(k for k, v in d.inputs.items() if tuple(v.shape) != shape)
            if odd:
                raise BadRequest(f"datum {i}: loss_fn_inputs {odd} differ in shape from "
                                 f"target_tokens {shape}")
            widths.append(shape[1] if len(shape) == 2 else 0)
        # position t scores target_tokens[t] from tokens[:t + 1]: in sequence_logprobs'
        # alignment (logits at t - 1 score position t) the targets move one place right and
        # the inputs get a dummy last token whose own logits are never read
        ids = torch.zeros((len(data), max(lengths) + 1), dtype=torch.long)
        attention, scored = torch.zeros_like(ids), torch.zeros_like(ids)
        wide = any(widths)  # K targets a position somewhere: [B, T, max K] targets
        targets = torch.zeros((*ids.shape, max(widths)), dtype=torch.long) if wide \
            else torch.zeros_like(ids)
        for i, (d, n, k) in enumerate(zip(data, lengths, widths)):
            ids[i, :n] = torch.tensor(d.tokens)
            wanted = d.inputs["target_tokens"].long().reshape(n, -1)  # [n, K or 1]
            targets[i, 1:n + 1] = torch.nn.functional.pad(
                wanted, (0, targets.shape[2] - wanted.shape[1])) if wide else wanted[:, 0]
            attention[i, :n + 1] = 1
            scored[i, 1:n + 1] = 1
        ids, targets, attention, scored = (t.to(self.device)
                                           for t in (ids, targets, attention, scored))
        lp, _ = sequence_logprobs(self.model, ids, attention, with_entropy=False,
                                  score_mask=scored, targets=targets)
        rows = [lp[i, 1:n + 1] for i, n in enumerate(lengths)]
        return [row[:, :k] if k else row[:, 0] if row.dim() == 2 else row
                for row, k in zip(rows, widths)]

    def optim_step(self, model_id: str, learning_rate: float, beta1: float = 0.9,
                   beta2: float = 0.95, eps: float = 1e-12, weight_decay: float = 0.0,
                   grad_clip_norm: float = 0.0) -> dict[str, float]:
        """The client's trainer steps on the gradients its adapter holds, clipped to
        ``grad_clip_norm`` (0: not clipped); a step whose gradient norm is not finite is
        skipped, as every posttrain step is (``Trainer.apply_gradients``)."""
        with self.active(model_id) as slot:
            if slot.trainer is None:
                slot.trainer = self._trainer()
            trainer = slot.trainer
            trainer.optim_cfg = trainer.optim_cfg.model_copy(
                update={"grad_clip": grad_clip_norm if grad_clip_norm > 0 else None})
            for group in trainer.optimizer.param_groups:
                group.update(lr=learning_rate, betas=(beta1, beta2), eps=eps,
                             weight_decay=weight_decay)
            norm = trainer.apply_gradients({})["grad_norm"]
            trainer.optimizer.zero_grad(set_to_none=True)
        return {"grad_norm:mean": norm}

    def _trainer(self) -> Trainer:
        """A trainer of the active adapter (the model's only trainable parameters); the
        learning rate and the rest are set at each step, so the schedule is constant."""
        return Trainer(self.model, OptimConfig(schedule="constant"), 0,
                       TrainerConfig(device=str(self.device)))

    def optimizer_state(self, model_id: str) -> dict | None:
        """The client's AdamW state (None before its first step)."""
        trainer = self.slot(model_id).trainer
        return None if trainer is None else trainer.optimizer.state_dict()

    def load_optimizer_state(self, model_id: str, state: dict | None) -> None:
        """``optimizer_state``'s into the client (None: AdamW starts afresh at its next
        step)."""
        with self.active(model_id) as slot:
            slot.trainer = None if state is None else self._trainer()
            if state is not None:
                slot.trainer.optimizer.load_state_dict(state)

    def adapter_state(self, model_id: str) -> dict[str, torch.Tensor]:
        """The client's adapter as PEFT saves it (names without the adapter's), on the CPU."""
        from peft import get_peft_model_state_dict

        state = get_peft_model_state_dict(self.model, adapter_name=self.slot(model_id).name)
        return {n: t.detach().cpu().clone() for n, t in state.items()}

    def load_adapter_state(self, model_id: str, state: Mapping[str, torch.Tensor]) -> None:
        """``adapter_state``'s tensors into the client's adapter, in place (its optimizer keeps
        pointing at them)."""
        from peft import get_peft_model_state_dict, set_peft_model_state_dict

        name = self.slot(model_id).name
        own = get_peft_model_state_dict(self.model, adapter_name=name)
        if {n: t.shape for n, t in own.items()} != {n: t.shape for n, t in state.items()}:
            raise BadRequest("the checkpoint's adapter does not fit this model's (rank or "
                             "trained layers differ)")
        set_peft_model_state_dict(self.model, dict(state), adapter_name=name)

    def plain_weights(self, model_id: str | None) -> Iterator[tuple[str, torch.Tensor]]:
        """The plain model's weights: the base's (``None``), or with the adapter merged."""
        return merged_weights(self.model, () if model_id is None else (self.slot(model_id).name,))
