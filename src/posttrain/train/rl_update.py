"""One RL update from scored episodes, for the RL loop (sync and async alike): batch -> old /
reference log-probs -> critic values -> advantages -> the actor's optimiser steps with its
entropy and KL controllers (``policy_steps``, run where the trainer lives, as ``PolicySteps``
says; the controllers' state is the update's, checkpointed with the trainer) -> the critic's.

Advantages: KL in the reward, the configured estimator, then the per-token modifiers. Group
estimators count episodes, not segments (docs/agents.md): one row per episode, its mask
holding the episode's trainable-token count; the episode's advantage reaches every trainable
token of its segments. ``gae`` runs per segment on the critic's values; ``gigpo`` gives each
step's tokens their own advantage. Each estimator declares its inputs and output in the
catalogue; none is named here.
"""
from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from posttrain.algos import (
    AdaptiveEntropyCoef,
    LazyInputs,
    StepNorm,
    adaptive_kl_coef,
    entry,
    get,
    group_index,
)
from posttrain.config import (
    ActorConfig,
    AlgoConfig,
    CriticConfig,
    KLConfig,
    OffPolicyConfig,
    RLConfig,
)
from posttrain.config.sections.trainer import COVARIANCE_LOSSES
from posttrain.hooks import NO_SETTINGS, UpdateView, hooked
from posttrain.models.routing import load_balancing_loss, router_logits
from posttrain.train.critic import critic_values, update_critic
from posttrain.train.protocol import PolicyTrainer
from posttrain.train.staleness import fresh_tokens
from posttrain.train.token_stats import old_token_stats, record_token_stats
from posttrain.train.trainer import Trainer, mean_metrics
from posttrain.types import Batch, Episode


def token_kl(batch: Batch, estimator: str) -> torch.Tensor:
    """``KL_t(old, ref)`` with ``estimator`` on the loss-mask tokens."""
    kl = get("kl", estimator)(logp=batch.old_logprobs, ref_logp=batch.ref_logprobs)
    return kl * batch.loss_mask


def episode_rows(episodes: Sequence[Episode]) -> torch.Tensor:
    """``[B]``: the episode of every batch row (one row per segment)."""
    return torch.tensor([i for i, ep in enumerate(episodes) for _ in ep.segments], dtype=torch.long)


def per_episode(values: torch.Tensor, rows: torch.Tensor, n: int) -> torch.Tensor:
    """Sum per-row ``values`` over each episode's rows."""
    return values.new_zeros(n).index_add_(0, rows.to(values.device), values)


def _episode_mask(batch: Batch, rows: torch.Tensor, n: int) -> torch.Tensor:
    """``[E, max n_e]``: row ``e`` holds ``n_e`` ones, ``n_e`` the episode's trainable tokens."""
    counts = per_episode(batch.loss_mask.sum(dim=1), rows, n).long()
    width = max(int(counts.max()), 1)
    steps = torch.arange(width, device=counts.device)
    return (steps[None, :] < counts[:, None]).to(batch.loss_mask.dtype)


def step_tokens(step_values: Sequence[torch.Tensor], episodes: Sequence[Episode],
                batch: Batch) -> torch.Tensor:
    """``[B, T]``: value ``k`` of an episode on the tokens of its ``k``-th step (steps counted
    over its segments in order), masked to trainable tokens."""
    out = torch.zeros_like(batch.loss_mask)
    row = 0
    for ep, values in zip(episodes, step_values):
        k = 0
        for seg in ep.segments:
            for span in seg.steps:
                out[row, span.start:span.end] = float(values[k])
                k += 1
            row += 1
    return out * batch.loss_mask


def advantage_inputs(batch: Batch, episodes: Sequence[Episode], algo: AlgoConfig,
                     part_weights: dict[str, float],
                     features: Mapping[str, Any] = NO_SETTINGS) -> LazyInputs:
    """What the pipeline can feed an estimator, by input name. Per episode: ``rewards``
    (through the features' ``rewards`` hooks, then minus ``coef sum_t KL_t(old, ref)`` with
    the KL in the reward), ``group_ids``, ``mask`` (``[E, max n_e]``, ``n_e`` ones),
    ``reward_parts`` ``[E, K]`` and ``part_weights``, ``tree_ids``, ``step_states``,
    ``baseline_rewards`` (its prompt's greedy decode: ``GreedyBaseline``), ``grader_quality``
    (the reward part ``algo.quality_part``); per row: ``outcome_rewards`` (its episode's
    reward, no KL: estimators that take ``kl`` per token add it themselves); per token:
    ``token_rewards``, ``values``, ``loss_mask``, ``kl`` (in the reward only) and ``kl_coef``."""
    rows, n = episode_rows(episodes), len(episodes)
    in_reward = algo.kl.coef > 0 and algo.kl.placement == "in_reward"
    names = list(part_weights)

    def rewards() -> torch.Tensor:
        r = torch.tensor([ep.reward for ep in episodes], dtype=torch.float32)
        for reshape in hooked("rewards"):
            r = reshape(r, UpdateView(batch, episodes, algo, features))
        if in_reward:
            kl = token_kl(batch, algo.kl.estimator).sum(dim=1)
            r = r - algo.kl.coef * per_episode(kl, rows, n)
        return r

    return LazyInputs(
        rewards=rewards,
        group_ids=lambda: group_index(ep.group_id for ep in episodes),
        mask=lambda: _episode_mask(batch, rows, n),
        reward_parts=lambda: torch.tensor([[ep.score(k) for k in names] for ep in episodes],
                                          dtype=torch.float64),
        part_weights=lambda: [part_weights[k] for k in names],
        tree_ids=lambda: group_index(ep.meta["tree_id"] for ep in episodes),
        step_states=lambda: [ep.meta["state_keys"] for ep in episodes],
        outcome_rewards=lambda: torch.tensor([ep.reward for ep in episodes],
                                             dtype=torch.float32)[rows],
        baseline_rewards=lambda: torch.tensor([ep.meta["baseline_reward"] for ep in episodes],
                                              dtype=torch.float32),
        grader_quality=lambda: torch.tensor([ep.score(algo.quality_part) for ep in episodes],
                                            dtype=torch.float64),
        token_rewards=lambda: batch.rewards,
        values=lambda: batch.old_values,
        loss_mask=lambda: batch.loss_mask,
        kl=lambda: token_kl(batch, algo.kl.estimator) if in_reward else None,
        kl_coef=lambda: algo.kl.coef,
    )


def _episode_tokens(adv: torch.Tensor, inputs: LazyInputs, episodes: Sequence[Episode],
                    batch: Batch) -> torch.Tensor:
    """An episode's advantage (the mean over its row of ``adv [E, max n_e]``) on every
    trainable token of its segments."""
    mask = inputs["mask"]
    scalar = (adv.sum(dim=1) / mask.sum(dim=1).clamp(min=1)).to(batch.loss_mask.dtype)
    return scalar[episode_rows(episodes)][:, None] * batch.loss_mask


# an estimator's result, by its declared output, as [B, T] token advantages
TO_TOKENS = {
    "token": lambda adv, inputs, episodes, batch: adv,
    "step": lambda adv, inputs, episodes, batch: step_tokens(adv, episodes, batch),
    "episode": _episode_tokens,
}


def estimator_options(algo: AlgoConfig) -> dict[str, Any]:
    """The estimator's options ``algo`` sets (``algo.advantage``, filled by the flat keys), by
    the estimator's parameter names; the others keep the function's defaults."""
    return algo.advantage.given_options()


def compute_advantages(batch: Batch, episodes: Sequence[Episode], algo: AlgoConfig,
                       part_weights: dict[str, float],
                       features: Mapping[str, Any] = NO_SETTINGS) -> torch.Tensor:
    """``[B, T]`` advantages of ``batch`` (built from ``episodes``) under ``algo`` (and the
    ``features``' own settings): the estimator takes what it asks for from
    ``advantage_inputs`` and its declared output says how its result reaches the tokens."""
    estimator = entry("advantage", algo.adv_estimator)
    inputs = advantage_inputs(batch, episodes, algo, part_weights, features)
    adv = estimator.call(inputs, **estimator_options(algo))
    return _modified(TO_TOKENS[estimator.output](adv, inputs, episodes, batch),
                     UpdateView(batch, episodes, algo, features))


def _modified(adv: torch.Tensor, view: UpdateView) -> torch.Tensor:
    """``adv`` through the features' ``advantages`` hooks, in their order."""
    for modify in hooked("advantages"):
        adv = modify(adv, view)
    return adv


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


def rl_loss(t: RLTokens, norm: StepNorm, actor: ActorConfig, kl: KLConfig | None = None,
            offpolicy: OffPolicyConfig | None = None, entropy_coef: float = 0.0
            ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``agg(w * policy loss) + [kl in loss] coef agg(KL) - entropy_coef agg(H)``.

    ``w`` is the off-policy correction weight (1 without one); ``opsm`` removes drifted
    negative sequences from the policy term, ``m2po`` and ``kpop`` drifted tokens. Returns
    the loss and step-normalised (``token_mean``) statistics whose sums over the
    micro-batches of a step are the step's values; with behaviour log-probs,
    ``mismatch = mean |old_logp - behaviour_logp|``.
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
        for name, value, key in (("m2po", offpolicy.m2po_tau, "tau"),
                                 ("kpop", offpolicy.kpop_phi, "phi")):
            if value is not None:
                policy_mask = get("offpolicy", name)(
                    old_logp=t.old_logp, behaviour_logp=t.behaviour_logp, mask=policy_mask,
                    **{key: value})
        if offpolicy.correction is not None:
            weight = get("offpolicy", offpolicy.correction)(
                old_logp=t.old_logp, behaviour_logp=t.behaviour_logp, mask=mask,
                **offpolicy.weight_options())
    per_tok, stats = entry("policy_loss", actor.policy_loss.name).call(
        {"logp": t.logp, "old_logp": t.old_logp, "advantages": t.advantages,
         "mask": policy_mask}, **actor.policy_loss.hyperparameters())
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
    """``plan.epochs`` passes over ``batch`` (which carries advantages) in ``plan.mini_batches``
    optimiser steps each, all against the stored ``old_logprobs``, then the adaptive KL
    controller's update of ``kl_coef`` from the measured KL; mean metrics. The adaptive entropy
    bonus applies the coefficient the previous step set and sets the next one.

    Without ``batch.old_logprobs`` the update is on-policy: the policy's own log-probs (no
    gradient) stand in for them, so the ratio is exactly 1 and no separate log-prob pass is
    needed. That is only right for a single optimiser step after the rollout.
    """
    kl = plan.kl
    if batch.advantages is None:
        raise ValueError("policy_steps needs batch.advantages")
    if kl is not None and kl.coef > 0 and kl.placement == "in_loss" and batch.ref_logprobs is None:
        raise ValueError("kl.coef > 0 needs batch.ref_logprobs")
    if batch.old_logprobs is None and plan.epochs * plan.mini_batches > 1:
        raise ValueError(
            f"{plan.epochs} epochs x {plan.mini_batches} mini-batches need batch.old_logprobs: "
            "after the first optimiser step the policy is no longer the rollout policy")
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
        if len(mb) == 1 and actor.policy_loss.name in COVARIANCE_LOSSES:
            warnings.warn(f"{actor.policy_loss.name}: a micro-batch of one sequence; its token "
                          "covariances are 0 under an episode-level advantage, so its token "
                          "selection is arbitrary (docs/estimators.md)", stacklevel=1)
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
    token_stats: int = 0  # episodes a step that get ``meta["token_stats"]``
    features: Mapping[str, Any] = field(default_factory=dict)  # their own settings, by name

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
        batch, metrics = (batch, {}) if version is None else fresh_tokens(batch, version,
                                                                          max_staleness)
        if any(needs(algo) for needs in hooked("needs_old_entropy")):
            old, entropy = trainer.apply(old_token_stats, batch, steps.temperature, steps.top_k,
                                         steps.top_p)
            batch = batch.replace(old_logprobs=old, old_entropy=entropy)
        elif need_old:
            batch = batch.replace(old_logprobs=trainer.compute_logprobs(
                batch, steps.temperature, False, steps.top_k, steps.top_p))
        if kl:
            batch = batch.replace(ref_logprobs=trainer.compute_logprobs(
                batch, steps.temperature, True, steps.top_k, steps.top_p))
        if critic is not None:
            batch = batch.replace(old_values=critic_values(critic, batch))
        adv = compute_advantages(batch, episodes, step_algo, self.part_weights, self.features)
        batch = batch.replace(advantages=adv)
        if self.token_stats:
            record_token_stats(trainer, episodes, batch, self.token_stats, steps.temperature,
                               steps.top_k, steps.top_p)
        if critic is not None:
            batch = batch.replace(returns=(adv + batch.old_values) * batch.loss_mask)
        metrics |= trainer.apply(policy_steps, batch, plan)
        if critic is not None:
            metrics |= update_critic(critic, batch, steps.epochs, steps.mini_batches,
                                     self.critic_cfg.cliprange_value, steps.actor.loss_agg_mode,
                                     steps.max_len)
        return metrics
