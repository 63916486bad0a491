"""One RL update from scored episodes, for the RL loop (sync and async alike):
batch -> old / reference log-probs -> critic values -> advantages -> the actor's optimiser
steps with its entropy and KL controllers (``policy_steps``, run where the trainer lives, as
``PolicySteps`` describes them; the controllers' state is the update's, kept on the trainer
with its checkpoint) -> the critic's. Tokens sampled more than ``max_staleness`` versions ago
leave the loss mask (``staleness_mask``)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import torch

from posttrain.algos import AdaptiveEntropyCoef, StepNorm, adaptive_kl_coef, entry, get
from posttrain.config import (
    ActorConfig,
    AlgoConfig,
    CriticConfig,
    KLConfig,
    OffPolicyConfig,
    RLConfig,
)
from posttrain.models.routing import load_balancing_loss, router_logits
from posttrain.train.critic import critic_step, critic_values
from posttrain.train.episode_advantages import compute_advantages, token_kl
from posttrain.train.protocol import PolicyTrainer
from posttrain.train.trainer import Trainer, mean_metrics
from posttrain.types import Batch, Episode


@dataclass
class RLTokens:
    """One micro-batch's per-token tensors ``[B, T]``: current log-probs (with gradient) and
    entropy, and the fixed ones the loss compares them with."""

    logp: torch.Tensor
    entropy: torch.Tensor | None
    old_logp: torch.Tensor
    advantages: torch.Tensor
    mask: torch.Tensor
    behaviour_logp: torch.Tensor | None = None
    ref_logp: torch.Tensor | None = None


def _policy_term(t: RLTokens, mask: torch.Tensor, actor: ActorConfig):
    inputs = {"logp": t.logp, "old_logp": t.old_logp, "advantages": t.advantages, "mask": mask}
    return entry("policy_loss", actor.policy_loss.name).call(
        inputs, **actor.policy_loss.hyperparameters())


def rl_loss(
    t: RLTokens,
    norm: StepNorm,
    actor: ActorConfig,
    kl: KLConfig | None = None,
    offpolicy: OffPolicyConfig | None = None,
    entropy_coef: float = 0.0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``agg(w * policy loss) + [kl in loss] coef agg(KL) - entropy_coef agg(H)``.

    ``w`` is the off-policy correction weight (1 without one); ``opsm`` removes drifted
    negative sequences from the policy term. Returns the loss and step-normalised
    (``token_mean``) statistics whose sums over the micro-batches of a step are the step's
    values; with behaviour log-probs, ``mismatch = mean |old_logp - behaviour_logp|``.
    """
    aggregate = get("aggregation", actor.loss_agg_mode)
    token_mean = get("aggregation", "token_mean")
    mask = t.mask

    def agg(values: torch.Tensor, m: torch.Tensor = mask) -> torch.Tensor:
        return aggregate(loss=values, mask=m, norm=norm)

    def mean(values: torch.Tensor) -> torch.Tensor:
        return token_mean(loss=values.detach(), mask=mask, norm=norm)

    policy_mask = mask
    weight = torch.ones_like(t.logp)
    if offpolicy is not None and t.behaviour_logp is not None:
        if offpolicy.opsm_delta is not None:
            policy_mask = get("offpolicy", "opsm")(
                behaviour_logp=t.behaviour_logp, logp=t.logp, advantages=t.advantages,
                mask=mask, delta=offpolicy.opsm_delta)
        if offpolicy.correction is not None:
            weight = get("offpolicy", offpolicy.correction)(
                old_logp=t.old_logp, behaviour_logp=t.behaviour_logp, mask=mask,
                **offpolicy.weight_options())
    per_tok, stats = _policy_term(t, policy_mask, actor)
    pg = agg(weight * per_tok, policy_mask)
    loss = pg
    out = {"pg_loss": pg.detach(), "approx_kl": mean(t.old_logp - t.logp)}
    if "clipped" in stats:
        out["clip_frac"] = mean(stats["clipped"])
    if t.behaviour_logp is not None:
        out["mismatch"] = mean((t.old_logp - t.behaviour_logp).abs())
    if offpolicy is not None and offpolicy.correction is not None:
        out["is_weight"] = mean(weight)
    if kl is not None and kl.coef > 0 and kl.placement == "in_loss":
        if t.ref_logp is None:
            raise ValueError("kl.coef > 0 needs reference log-probs")
        kl_t = entry("kl", kl.estimator).call(
            {"logp": t.logp, "ref_logp": t.ref_logp, "old_logp": t.old_logp})
        loss = loss + kl.coef * agg(kl_t)
        out["ref_kl"] = mean(kl_t)
    if t.entropy is not None:
        if entropy_coef > 0:
            bonus, _ = get("policy_loss", "entropy_bonus")(entropy=t.entropy, coef=entropy_coef)
            loss = loss + agg(bonus)
        out["entropy"] = mean(t.entropy)
    return loss, out


RL_STATE = "rl"  # the controllers' state, kept where the trainer lives (``objective_state``)


@dataclass(frozen=True)
class PolicySteps:
    """How an RL update's optimiser steps run, made once from the config: ``epochs`` passes
    over the batch in ``mini_batches`` steps each (PPO's mu), the ``actor``'s loss with ``kl``
    (None: no KL term) and the ``offpolicy`` correction, over the support the engine sampled
    from (``temperature``, ``top_k``, ``top_p``), lengths normalised to ``max_len`` where a
    loss does."""

    actor: ActorConfig = field(default_factory=ActorConfig)
    kl: KLConfig | None = None
    offpolicy: OffPolicyConfig | None = None
    epochs: int = 1
    mini_batches: int = 1
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    max_len: int | None = None

    @classmethod
    def of(cls, cfg: RLConfig, algo: AlgoConfig, actor: ActorConfig) -> PolicySteps:
        """The steps the ``rl`` and ``algo`` sections describe."""
        return cls(actor, algo.kl if algo.kl.coef > 0 else None, algo.offpolicy, cfg.epochs,
                   cfg.mini_batches, cfg.temperature, cfg.top_k, cfg.top_p, cfg.max_new_tokens)

    def support(self) -> dict[str, float]:
        return {"top_k": self.top_k, "top_p": self.top_p}


def controllers(trainer: Trainer) -> dict:
    """The RL controllers' state on ``trainer`` (checkpointed with it): the adaptive entropy
    bonus's ``entropy_alpha`` and the coefficient the next step applies, ``entropy_next``, and
    the adaptive KL coefficient ``kl_coef`` (None: the config's)."""
    return trainer.objective_state.setdefault(
        RL_STATE, {"entropy_alpha": 0.0, "entropy_next": 0.0, "kl_coef": None})


def kl_coefficient(trainer: Trainer) -> float | None:
    return controllers(trainer)["kl_coef"]


def policy_steps(trainer: Trainer, batch: Batch, plan: PolicySteps = PolicySteps()
                 ) -> dict[str, float]:
    """``plan.epochs`` passes over ``batch`` (which carries advantages) in
    ``plan.mini_batches`` optimiser steps each, all against the stored ``old_logprobs``, then
    the adaptive KL controller's update of ``kl_coef`` from the measured KL; mean metrics. The
    adaptive entropy bonus applies the coefficient the previous step set and sets the next
    one.

    Without ``batch.old_logprobs`` the update is on-policy: the policy's own log-probs (no
    gradient) stand in for them, so the ratio is exactly 1 and no separate log-prob pass is
    needed. That is only right for a single optimiser step after the rollout.
    """
    kl = plan.kl
    if batch.advantages is None:
        raise ValueError("policy_steps needs batch.advantages")
    if kl is not None and kl.coef > 0 and kl.placement == "in_loss" \
            and batch.ref_logprobs is None:
        raise ValueError("kl.coef > 0 needs batch.ref_logprobs")
    if batch.old_logprobs is None and plan.epochs * plan.mini_batches > 1:
        raise ValueError(
            f"{plan.epochs} epochs x {plan.mini_batches} mini-batches need "
            "batch.old_logprobs: after the first optimiser step the policy is no longer the "
            "rollout policy")
    state = controllers(trainer)
    size = math.ceil(len(batch) / plan.mini_batches)
    metrics = mean_metrics([_optimizer_step(trainer, part, plan, state)
                            for _ in range(plan.epochs) for part in batch.split(size)])
    if kl is not None and kl.coef > 0:
        metrics["kl_coef"] = kl.coef
        if kl.controller == "adaptive":
            measured = metrics["ref_kl"] if kl.placement == "in_loss" else float(
                token_kl(batch, kl.estimator).sum() / batch.loss_mask.sum().clamp(min=1))
            state["kl_coef"] = adaptive_kl_coef(kl.coef, measured, kl.target)
    return metrics


def _optimizer_step(trainer: Trainer, batch: Batch, plan: PolicySteps, state: dict
                    ) -> dict[str, float]:
    """One optimiser step of the RL loss on ``batch``, its entropy controller updated."""
    actor, bonus = plan.actor, plan.actor.entropy_bonus
    entropy_coef = state["entropy_next"] if bonus.adaptive else bonus.coef

    def micro(mb: Batch, norm: StepNorm):
        aux = actor.router_aux_coef > 0
        with router_logits(trainer.model) if aux else contextlib.nullcontext() as gates:
            logp, ent = trainer.token_logprobs(trainer.model, mb, plan.temperature, True,
                                               plan.top_k, plan.top_p, whole=aux)
        old = mb.old_logprobs if mb.old_logprobs is not None else logp.detach()
        tokens = RLTokens(logp, ent, old, mb.advantages, mb.loss_mask, mb.behaviour_logprobs,
                          mb.ref_logprobs)
        loss, stats = rl_loss(tokens, norm, actor, plan.kl, plan.offpolicy, entropy_coef)
        if aux:  # a mean over the micro-batch's tokens, weighted by its share of the rows
            balance = load_balancing_loss(trainer.model, gates, mb.attention_mask)
            share = len(mb) / norm.batch_size
            loss = loss + actor.router_aux_coef * balance * share
            stats["router_aux_loss"] = balance.detach() * share
        return loss, stats

    metrics = trainer.optimizer_step(batch, micro, plan.max_len)
    metrics["entropy_coef"] = entropy_coef
    if bonus.adaptive and "entropy" in metrics:
        ctl = AdaptiveEntropyCoef(bonus.target, bonus.delta)
        ctl.alpha = state["entropy_alpha"]
        state["entropy_next"] = ctl.step(metrics["entropy"])
        state["entropy_alpha"] = ctl.alpha
    return metrics


def update_critic(critic: Trainer, batch: Batch, plan: PolicySteps, critic_cfg: CriticConfig
                  ) -> dict[str, float]:
    """The critic's ``epochs x mini_batches`` optimiser steps on the step's returns; mean
    metrics."""
    size = math.ceil(len(batch) / plan.mini_batches)
    return mean_metrics([
        critic_step(critic, part, critic_cfg.cliprange_value, plan.actor.loss_agg_mode,
                    plan.max_len)
        for _ in range(plan.epochs) for part in batch.split(size)
    ])


def old_token_stats(trainer: Trainer, batch: Batch, plan: PolicySteps
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(log-probs, entropies)`` ``[B, T]`` of ``batch``'s loss-mask tokens at the current
    (rollout) weights over ``plan``'s support, no gradient, in one pass: ``taco``'s ``p_t``
    and ``H_t``."""
    stats = trainer.score_tokens(batch, trainer.model, lambda mb: torch.stack(
        trainer.token_logprobs(trainer.model, mb, plan.temperature, True, plan.top_k,
                               plan.top_p), dim=-1))
    return stats[..., 0], stats[..., 1]


def staleness_metrics(batch: Batch, version: int) -> dict[str, float]:
    """Mean and max ``version - v_t`` over the trainable tokens, and the share of samples whose
    tokens come from more than one version (partial rollouts that crossed a weight update)."""
    mask = batch.loss_mask > 0
    lag = (version - batch.versions)[mask].float()
    vers = batch.versions.masked_fill(~mask, -1)
    lo = vers.masked_fill(~mask, 2**62).min(dim=1).values
    mixed = ((vers.max(dim=1).values != lo) & mask.any(dim=1)).float().mean()
    return {"staleness/mean": float(lag.mean()) if lag.numel() else 0.0,
            "staleness/max": float(lag.max()) if lag.numel() else 0.0,
            "staleness/mixed_versions": float(mixed)}


@dataclass(kw_only=True)
class PolicyUpdate:
    """The update step: ``steps`` (``PolicySteps``) on the batch of scored episodes, with
    advantages by ``algo``; ``critic`` (PPO) feeds GAE and trains on the returns."""

    trainer: PolicyTrainer
    algo: AlgoConfig
    steps: PolicySteps
    pad_token_id: int
    part_weights: dict[str, float]
    critic: Trainer | None = None
    critic_cfg: CriticConfig | None = None
    token_stats: int = 0  # episodes a step that get ``meta["token_stats"]`` (``record``)

    def record(self, episodes: Sequence[Episode], batch: Batch) -> None:
        """``token_stats`` episodes of the step, evenly spaced, get ``meta["token_stats"]``:
        per segment, each token's advantage and its log-prob and entropy (of the sampling
        distribution, nats) under the trainer's weights before the update (the weights that
        sampled it, synchronous RL), 0 where the token is not trained; what ``posttrain
        view`` colours tokens by."""
        if not self.token_stats:
            return
        starts = [0]
        for episode in episodes:
            starts.append(starts[-1] + len(episode.segments))
        every = max(1, len(episodes) // self.token_stats)
        chosen = list(range(0, len(episodes), every))[: self.token_stats]
        rows = [r for i in chosen for r in range(starts[i], starts[i + 1])]
        picked = batch.select(rows)
        trainer_lp, entropy = self.trainer.apply(old_token_stats, picked, self.steps)
        at = 0
        for i in chosen:
            stats: dict[str, list[list[float]]] = {"advantage": [], "trainer_logprob": [],
                                                   "entropy": []}
            for seg in episodes[i].segments:
                n = len(seg.token_ids)
                stats["advantage"].append(picked.advantages[at, :n].tolist())
                stats["trainer_logprob"].append(trainer_lp[at, :n].tolist())
                stats["entropy"].append(entropy[at, :n].tolist())
                at += 1
            episodes[i].meta["token_stats"] = stats

    def __call__(self, episodes: Sequence[Episode], version: int | None = None,
                 max_staleness: int | None = None) -> dict[str, float]:
        """Update on ``episodes``; with ``version``, mask tokens older than ``max_staleness``
        versions and report the staleness. Returns the update's metrics."""
        algo, trainer, critic, steps = self.algo, self.trainer, self.critic, self.steps
        kl = steps.kl
        if kl is not None and (adapted := trainer.apply(kl_coefficient)) is not None:
            kl = kl.model_copy(update={"coef": adapted})  # the adaptive controller's
        plan = replace(steps, kl=kl)
        step_algo = algo.model_copy(update={"kl": kl or algo.kl})
        on_policy = steps.epochs * steps.mini_batches == 1  # one optimiser step: no old pass
        need_old = not on_policy or (kl is not None and kl.placement == "in_reward")
        batch = Batch.from_episodes(episodes, pad_token_id=self.pad_token_id)
        metrics: dict[str, float] = {}
        if version is not None:
            metrics |= staleness_metrics(batch, version)
            fresh = get("offpolicy", "staleness_mask")(
                versions=batch.versions, mask=batch.loss_mask, current_version=version,
                max_off_policy_steps=max_staleness)
            metrics["staleness/masked"] = float(1 - fresh.sum() / batch.loss_mask.sum().clamp(
                min=1))
            batch = batch.replace(loss_mask=fresh)
        if algo.taco is not None:
            old, entropy = trainer.apply(old_token_stats, batch, steps)
            batch = batch.replace(old_logprobs=old, old_entropy=entropy)
        elif need_old:
            batch = batch.replace(old_logprobs=trainer.compute_logprobs(
                batch, steps.temperature, **steps.support()))
        if kl:
            batch = batch.replace(ref_logprobs=trainer.compute_logprobs(
                batch, steps.temperature, True, **steps.support()))
        if critic is not None:
            batch = batch.replace(old_values=critic_values(critic, batch))
        adv = compute_advantages(batch, episodes, step_algo, self.part_weights)
        batch = batch.replace(advantages=adv)
        self.record(episodes, batch)
        if critic is not None:
            batch = batch.replace(returns=(adv + batch.old_values) * batch.loss_mask)
        metrics |= trainer.apply(policy_steps, batch, plan)
        if critic is not None:
            metrics |= update_critic(critic, batch, steps, self.critic_cfg)
        return metrics
