"""Settings of the RL loop (sync and async), its advantages, reward shaping and evaluation."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import ConfigDict, Field, model_validator

from posttrain.algos.registry import Facts, facts
from posttrain.config.rules import unread
from posttrain.config.section import (
    Count,
    NamedLoss,
    OptimConfig,
    SampledStageConfig,
    SamplingConfig,
    Section,
    Steps,
    Usable,
    check_hyperparameters,
    registered,
    samples_differ,
    unsupplied,
)
from posttrain.config.sections.features.actor_as_grm import ActorAsGRM
from posttrain.config.sections.trainer import KLConfig, OffPolicyConfig


class EvalConfig(SamplingConfig):
    """Held-out evaluation of ``num_problems`` problems, ``samples`` samples each
    (``temperature == 0`` is greedy: one sample). With several samples it reports ``pass@k``
    and ``maj@k`` for each of ``ks`` (null: 1 and ``samples``) and ``mean@samples``, with
    standard errors; ``group_by`` columns of the dataset rows (or task attributes such as
    ``domain``) split the accuracy by value."""

    num_problems: Count = Field(200, description="held-out problems evaluated")
    temperature: float = Field(0.0, ge=0,
                               description="sampling temperature of evaluation (0: greedy)")
    samples: Count = Field(1, description="samples a problem (more than 1 needs temperature > 0)")
    ks: list[Annotated[int, Field(ge=1)]] | None = Field(
        None, description="the k of pass@k and maj@k (null: 1 and samples)")
    group_by: list[str] = Field(
        default_factory=list,
        description="dataset columns or task attributes that split the accuracy by value")

    @model_validator(mode="after")
    def _samples(self) -> EvalConfig:
        samples_differ("eval.samples", self.samples, "eval.temperature", self.temperature)
        if self.ks is not None and max(self.ks) > self.samples:
            raise ValueError(f"eval.ks: k={max(self.ks)} needs at least that many "
                             f"eval.samples (there are {self.samples})")
        return self

    def pass_ks(self) -> list[int]:
        """The ``k`` of ``pass@k`` and ``maj@k``."""
        return sorted(set(self.ks or [1, self.samples]))


# the sync probes' default tolerance by trainer.precision: an fp32 engine matches the trainer
# to rounding (~1e-7 a token); a bf16 one differs by ~1e-3 (docs/config.md)
SYNC_TOLERANCE = {"fp32": 1e-3, "bf16": 2e-2, "fp16": 2e-2}


class SyncConfig(Section):
    """``timeout_s`` per sync; ``probes`` sequences (taken from the step's rollouts) scored by
    both sides; above ``tolerance`` (mean |trainer - engine| log-prob; null: the default of
    ``trainer.precision``, ``SYNC_TOLERANCE``, which a run's config fills in; fp32's for a
    ``SyncConfig`` of its own) the run stops."""

    timeout_s: float = Field(120.0, gt=0,
                             description="seconds a weight sync may take before the run stops")
    probes: int = Field(
        4, ge=0,
        description="sequences of the step's rollouts both sides score after a sync (0: none)")
    tolerance: float | None = Field(
        None, gt=0,
        description="most mean |trainer - engine| log-prob of the probes (null: by "
                    "trainer.precision)")


class AsyncConfig(Section):
    """Asynchronous RL (``rl.mode: async``, docs/async.md). Pacing keeps at most
    ``(max_staleness + 1) * prompts_per_step`` groups started and not yet trained on; tokens
    older than ``max_staleness`` policy versions are masked out of the loss (``stale: mask``) or
    their groups dropped and replaced (``stale: drop``). The rollout thread generates
    ``capacity`` samples at once (null: one step's ``prompts_per_step x group_size``),
    ``chunk_tokens`` at a time (null: whole completions; each chunk re-prefills what a sample
    has so far); at a weight update a ``partial_rollout`` (needs ``chunk_tokens``) resumes its
    in-flight samples under the new weights at the next chunk boundary, otherwise the update
    waits for them to finish. An external agent's samples are sessions: not chunked, and a
    partial rollout resumes them at their next call. Length-bias control:
    ``max_inflight_per_group`` samples of a group at once (null: all), and a finished group is
    held back while more than ``max_overtake`` older groups are unfinished (null: never)."""

    max_staleness: int = Field(1, ge=0,
                               description="policy versions a trained-on token may lag the trainer")
    stale: Literal["mask", "drop"] = Field(
        "mask",
        description="tokens staler than max_staleness: mask them, or drop and replace their groups")
    capacity: int | None = Field(
        None, ge=1, description="samples the rollout thread generates at once (null: one step's)")
    chunk_tokens: int | None = Field(
        None, ge=1, description="tokens generated at a time (null: whole completions)")
    partial_rollout: bool = Field(
        False, description="at a weight update, resume in-flight samples under the new weights")
    max_inflight_per_group: int | None = Field(
        None, ge=1, description="most samples of a group generated at once (null: all)")
    max_overtake: int | None = Field(
        None, ge=0,
        description="hold a finished group while more older groups are unfinished (null: never)")


# the judge kinds that give a score per response
ABSOLUTE_JUDGES = ("score", "pgenrm", "prototypes", "reward_model", "function")


class RMWinRateMonitor(Section):
    """At every evaluation, the share of held-out prompts whose response the judge of
    ``part`` (a judge of kind score, pgenrm, prototypes, reward_model or function; null:
    the run's only such part) scores above the reference model's (the stage's starting
    policy), ties half; above ``warn_above`` the run warns of reward-model over-optimisation."""

    part: str | None = Field(
        None,
        description="the judged part whose scores are compared (null: the run's only such part)")
    warn_above: float = Field(
        0.65, gt=0.5, lt=1,
        description="warn of reward-model over-optimisation above this win rate, in (0.5, 1)")

    def part_of(self, cfg) -> str:
        """The judged part the monitor reads (config errors when there is none to read)."""
        scored = [p for p, j in cfg.reward.judges.items() if j.kind in ABSOLUTE_JUDGES]
        if not scored:
            raise ValueError("rl.rm_win_rate_monitor compares the scores of a reward model or "
                             "judge: it needs a reward part with verifier judge of kind "
                             f"{', '.join(ABSOLUTE_JUDGES)} (a comparison judge scores "
                             "within a group, not against the reference)")
        if self.part is None and len(scored) > 1:
            raise ValueError(f"rl.rm_win_rate_monitor.part: name one of {', '.join(scored)}")
        if self.part is not None and self.part not in scored:
            raise ValueError(f"rl.rm_win_rate_monitor.part {self.part!r} is not a part scored "
                             f"by a judge of kind {', '.join(ABSOLUTE_JUDGES)} "
                             f"({', '.join(scored)})")
        return self.part or scored[0]


class RLConfig(SampledStageConfig):
    """GRPO-style RL: ``prompts_per_step`` prompts x ``group_size`` samples (x the task's
    effort levels, if any), ``sync`` or ``async`` (the ``async`` section, ``AsyncConfig``).
    ``save_episodes`` appends every step's episodes to ``episodes.jsonl`` in the run directory
    (``posttrain replay`` checks them; ``posttrain view`` shows them), ``token_stats`` of them a
    step with each token's advantage, trainer log-prob and entropy; ``sync`` verifies every
    weight sync (``recipes.sampling_loop.sync_weights``). ``rm_win_rate_monitor`` and
    ``actor_as_grm`` are the reward-model monitor (CharacterFlywheel, arXiv 2603.01973) and
    the grading prompts (DeepSeek-V4's actor as generative reward model; docs/reward_models.md)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, validate_by_name=True,
                              serialize_by_alias=True)

    steps: Steps = Field(
        60, description="rollout steps of the stage, each epochs x mini_batches optimiser steps")
    epochs: Count = Field(1, description="passes over each step's rollouts (PPO's mu)")
    mini_batches: Count = Field(
        1, description="optimiser steps a pass splits the step's rollouts into")
    mismatch_tolerance: float = Field(
        0.05, gt=0,
        description="most mean |engine - trainer| log-prob of sampled tokens (sync mode)")
    save_episodes: bool = Field(
        False, description="append every step's episodes to episodes.jsonl in the run directory")
    token_stats: int = Field(
        4, ge=0,
        description="saved episodes a step that carry each token's advantage, log-prob, entropy")
    optim: OptimConfig = Field(OptimConfig(lr=1e-4, warmup_steps=0, schedule="constant"),
                               description="the policy's optimiser and learning-rate schedule")
    sync: SyncConfig = Field(SyncConfig(),
                             description="verification of every weight sync to the engines")
    mode: Literal["sync", "async"] = Field(
        "sync",
        description="sync (sample, then train) or async (sampling overlaps training; "
                    "docs/async.md)")
    async_: AsyncConfig = Field(
        AsyncConfig(), alias="async",
        description="asynchronous RL's pacing, staleness and chunking (rl.mode=async)")
    rm_win_rate_monitor: RMWinRateMonitor | None = Field(
        None,
        description="the policy's win rate over the starting policy under a judge (null: off)")
    actor_as_grm: ActorAsGRM | None = Field(
        None, description="the policy grades episodes as a generative reward model (null: off)")

    @model_validator(mode="after")
    def _async_options_act(self) -> RLConfig:
        if self.mode == "sync" and self.async_ != AsyncConfig():
            raise ValueError("rl.async options are set but rl.mode is sync")
        return self

    def check(self, cfg) -> None:
        """The loop with the engines, the task and the agent; options that act only in one
        mode or with a switch on."""
        agent, async_ = cfg.agent, self.async_
        if self.actor_as_grm is not None:
            self.actor_as_grm.check(cfg)
        if self.rm_win_rate_monitor is not None:
            self.rm_win_rate_monitor.part_of(cfg)
            if cfg.dist.trainer_processes > 1:
                raise ValueError("rl.rm_win_rate_monitor evaluates in one trainer process: "
                                 "set dist.trainer_processes=1")
        if "rl" in cfg.stages:
            if cfg.dist.engines > 1 and self.mode == "sync":
                raise ValueError("dist.engines > 1 feeds several rollout threads: it needs "
                                 "rl.mode=async")
            if self.mini_batches > self.prompts_per_step * self.group_size:
                raise ValueError("rl.mini_batches exceeds the number of rollouts per step")
        if self.mode == "async" and not (cfg.single_turn or agent.plays_externally):
            raise ValueError(f"rl.mode=async generates single-turn samples or an external "
                             f"agent's sessions; task.name={cfg.task.name} is played by "
                             "posttrain's agent loop (use rl.mode=sync)")
        if agent.plays_externally and async_.chunk_tokens is not None:
            raise ValueError("rl.async.chunk_tokens: an external agent's calls are not cut "
                             "into chunks (a partial rollout goes on at a session's next call)")
        if async_.partial_rollout and async_.chunk_tokens is None and not agent.plays_externally:
            raise ValueError("rl.async.partial_rollout interrupts generation between chunks: "
                             "it needs rl.async.chunk_tokens")
        if self.mode == "async":
            unread(self, "rl", ["mismatch_tolerance"],
                   "the engine/trainer log-prob mismatch is checked on synchronous samples "
                   "(rl.mode=sync)")
        if self.sync.probes == 0:
            unread(self.sync, "rl.sync", ["tolerance"],
                   "it bounds the probes' log-prob difference, and rl.sync.probes is 0")
        if not self.save_episodes:
            unread(self, "rl", ["token_stats"], "they are recorded on saved episodes, and "
                   "rl.save_episodes is false")


# What the RL update supplies an advantage estimator, by input name (train.rl_update's
# advantage_inputs). An estimator's parameters name the inputs it reads (its registration's
# ``feeds`` rename them), and what it needs of the run follows from those: AlgoConfig.check
# states each input's needs (the critic's values need a critic, group_ids groups, ...), so
# no rule names an estimator. Its other parameters are its options.
ADVANTAGE_INPUTS = ("rewards", "group_ids", "mask", "reward_parts", "part_weights", "tree_ids",
                    "step_states", "outcome_rewards", "baseline_rewards", "grader_quality",
                    "token_rewards", "values", "loss_mask", "kl", "kl_coef")
AGENT_INPUTS = ("step_states", "tree_ids")  # only agent episodes have them: state keys, trees


def _not_an_estimator(estimator: Facts) -> str:
    """Why ``estimator`` is not one the RL update can feed: it declares no output (an advantage
    per episode, step or token: how its result reaches the tokens), or it requires an input
    the update does not supply."""
    if not estimator.output:
        return "it does not declare its output: an advantage per episode, step or token"
    return unsupplied(estimator, ADVANTAGE_INPUTS, "the RL update")


ADV_ESTIMATORS = Usable("advantage", _not_an_estimator)


class DynamicSamplingConfig(Section):
    """DAPO dynamic sampling: a group whose rewards are all equal carries no signal. ``drop``
    trains on the other groups; ``resample`` draws fresh prompts (at most ``max_rounds`` extra
    rounds) until ``rl.prompts_per_step`` groups carry signal."""

    enabled: bool = Field(
        False, description="drop groups whose rewards are all equal (DAPO dynamic sampling)")
    mode: Literal["drop", "resample"] = Field(
        "resample",
        description="drop: train on the others; resample: draw fresh prompts to refill the step")
    max_rounds: int = Field(3, ge=1, description="most extra rounds of resampling a step")

    def check(self, cfg) -> None:
        """Synchronous RL reads ``mode`` with ``enabled`` and ``max_rounds`` with
        ``mode=resample``; asynchronous RL always replaces the groups it drops (no ``mode``),
        at most ``max_rounds`` times ``prompts_per_step`` of them."""
        sync, prefix = cfg.rl.mode == "sync", "algo.dynamic_sampling"
        if sync and not self.enabled:
            unread(self, prefix, ["mode", "max_rounds"], f"{prefix}.enabled is false")
        if sync and self.mode == "drop":
            unread(self, prefix, ["max_rounds"], "mode=drop draws no extra rounds")
        if not sync:
            unread(self, prefix, ["mode"], "rl.mode=async replaces every dropped group (mode "
                   "chooses for rl.mode=sync)")
        if not sync and not self.enabled and cfg.rl.async_.stale == "mask":
            unread(self, prefix, ["max_rounds"], "it bounds the groups rl.mode=async drops, "
                   "and none are dropped (dynamic sampling off, rl.async.stale=mask)")


class BehaviourRegConfig(Section):
    """``behaviour_reg``'s token rule on the tokens of steps whose tool calls were malformed
    (format, unknown tool, bad arguments): they lose positive credit and get ``k_err`` times the
    blame; other tokens scale by ``1 + up`` (A > 0) or ``1 - down`` (A < 0). Its reward rule
    (``long_success_penalty``, with ``c_long``, ``l_thr`` and ``s_min`` set together): a success
    longer than ``l_thr`` trainable tokens loses ``c_long`` while its group's success rate is at
    least ``s_min``."""

    k_err: float = Field(gt=1,
                         description="times the blame on tokens of malformed tool calls (> 1)")
    up: float = Field(0.0, ge=0, description="other tokens' positive advantages scale by 1 + up")
    down: float = Field(
        0.0, ge=0, le=1,
        description="other tokens' negative advantages scale by 1 - down, in [0, 1]")
    c_long: float | None = Field(
        None, ge=0,
        description="reward lost by a long success (the long_success_penalty rule; null: off)")
    l_thr: int | None = Field(None, ge=0,
                              description="trainable tokens above which a success is long")
    s_min: float | None = Field(
        None, ge=0, le=1,
        description="the group success rate at or above which long successes are penalised, in "
                    "[0, 1]")

    @model_validator(mode="after")
    def _reward_rule_whole(self) -> BehaviourRegConfig:
        rule = {k: getattr(self, k) for k in ("c_long", "l_thr", "s_min")}
        if None in rule.values() and any(v is not None for v in rule.values()):
            raise ValueError("algo.behaviour_reg's reward rule takes c_long, l_thr and s_min "
                             "together (the source gives no values); set: "
                             + ", ".join(k for k, v in rule.items() if v is not None))
        return self

    def token_rule(self) -> dict[str, float]:
        return {"k_err": self.k_err, "up": self.up, "down": self.down}

    def reward_rule(self) -> dict[str, float] | None:
        """``long_success_penalty``'s hyperparameters, or None when the rule is off."""
        return None if self.c_long is None else {
            "c_long": self.c_long, "l_thr": self.l_thr, "s_min": self.s_min}


class TacoConfig(Section):
    """``taco`` (docs/algorithms.md): positive advantages of tail tokens (``pi_old(y_t) <
    alpha exp(-H_t)``) shrink by up to ``lam``. The source gives no values: both are set."""

    alpha: float = Field(gt=0, description="tail tokens: pi_old(y_t) < alpha exp(-H_t) (> 0)")
    lam: float = Field(
        ge=0, le=1,
        description="how much tail tokens' positive advantages shrink, at most, in [0, 1]")


class TopEntropyConfig(Section):
    """``top_entropy`` (issue 39; arXiv 2506.01939): only the highest-entropy share ``rho``
    of a step's tokens (the rollout policy's entropy) keeps its advantage; the paper keeps
    20 %."""

    rho: float = Field(
        0.2, gt=0, le=1,
        description="the share of a step's tokens, highest entropy first, that keeps its advantage")


class AdvantageConfig(NamedLoss):
    """The advantage estimator (a built-in, or a function of yours by dotted path:
    docs/extending.md) and its options as the other keys, checked against its signature: an
    option not given holds the function's default. ``algo.adv_estimator`` and the flat option
    keys (``FLAT_OPTIONS``) fill it (``AlgoConfig``)."""

    KIND: ClassVar[str] = "advantage"
    LABEL: ClassVar[str] = "advantage estimator"
    INPUTS: ClassVar[tuple[str, ...]] = ADVANTAGE_INPUTS
    name: Annotated[str, registered("advantage", ADV_ESTIMATORS)] = Field(
        "grpo", description="the advantage estimator (grpo, rloo, gae, ..., or a dotted path); "
                            "its options are the other keys")

    def given_options(self) -> dict[str, Any]:
        """The options the config gives; the function's defaults do the rest."""
        return {k: v for k, v in self.hyperparameters().items() if k in self.model_fields_set}


# algo key -> the estimator option it sets: the established flat spelling of these options
# (algo.advantage holds every estimator's options, a new estimator's only there)
FLAT_OPTIONS = {"gamma": "gamma", "lam": "lam", "omega": "omega", "conflict_filter": "filter",
                "tau": "tau", "query_weight": "query_weight"}


def _taking(option: str) -> tuple[str, ...]:
    """The estimators that take ``option``."""
    return tuple(n for n in ADV_ESTIMATORS
                 if option in facts("advantage", n).hyperparameters(ADVANTAGE_INPUTS))


class AlgoConfig(Section):
    """How rewards become advantages (docs/algorithms.md). A multi-reward estimator
    (``gdpo``, ``gd2po``, ``dvao``) combines ``reward.parts`` with their weights; ``gae`` needs
    the critic (``critic.enabled``) and takes ``gamma``/``lam`` (null: 1.0 and 0.95); ``gigpo``
    (step credit over the environment's state keys) takes ``gamma``/``omega`` (null: 0.95 and
    1.0); ``tree_grpo`` needs ``agent.tree``; ``reinforce_plus_plus`` (single-turn tasks; per-token
    returns, KL in the reward when ``kl.placement: in_reward``) takes ``gamma`` (null: 1.0);
    ``remax`` (single-turn tasks, sync loop) subtracts the reward of each prompt's greedy decode
    (one extra completion a prompt); ``gar`` redistributes a mixed group's positive advantage
    by grader quality, the reward part ``quality_part`` (weight 0: the reward stays pass/fail);
    ``gd2po`` takes ``conflict_filter`` (``hard`` or ``snr``), ``tau`` (the ``snr`` threshold)
    and ``query_weight`` (null: hard, 0.8, true). ``advantage`` is the estimator and all its
    options in one section: the flat keys fill it, a value given both ways must agree
    (``_one_estimator``). Per-token modifiers, in this order: ``taco``
    shrinks the positive advantages of tail tokens (it adds a no-gradient pass for the rollout
    policy's entropies); ``top_entropy`` keeps only the highest-entropy tokens' (the same
    pass); ``behaviour_reg`` those of agent episodes' malformed tool calls."""

    adv_estimator: Annotated[str, registered("advantage", ADV_ESTIMATORS)] = Field(
        "grpo",
        description="the advantage estimator (grpo, rloo, gae, gigpo, ...; null: advantage.name; "
                    "docs/estimators.md)")
    gamma: float | None = Field(
        None, gt=0, le=1,
        description="discount of gae, gigpo, reinforce_plus_plus (null: the estimator's default)")
    lam: float | None = Field(None, ge=0, le=1, description="gae's lambda, in [0, 1] (null: 0.95)")
    omega: float | None = Field(
        None, ge=0, description="gigpo's weight of the step-level advantage (null: 1.0)")
    conflict_filter: Literal["hard", "snr"] | None = Field(
        None, description="gd2po's conflict filter: hard or snr (null: hard)")
    tau: float | None = Field(None, ge=0, le=1,
                              description="gd2po's snr threshold, in [0, 1] (null: 0.8)")
    query_weight: bool | None = Field(None, description="gd2po's per-query weighting (null: true)")
    advantage: AdvantageConfig = Field(
        AdvantageConfig(),
        description="the estimator and its options in one section (the keys above fill it)")
    quality_part: str | None = Field(
        None, description="gar's reward part (weight 0) grading a passing sample's quality")
    kl: KLConfig = Field(KLConfig(), description="the KL penalty to the frozen reference")
    offpolicy: OffPolicyConfig = Field(
        OffPolicyConfig(),
        description="train/inference mismatch corrections and masks of drifted tokens")
    dynamic_sampling: DynamicSamplingConfig = Field(
        DynamicSamplingConfig(), description="drop or refill groups without reward spread")
    taco: TacoConfig | None = Field(
        None, description="shrink tail tokens' positive advantages (null: off)")
    top_entropy: TopEntropyConfig | None = Field(
        None, description="only the highest-entropy tokens keep their advantages (null: off)")
    behaviour_reg: BehaviourRegConfig | None = Field(
        None,
        description="reweight agent episodes' advantages around malformed tool calls (null: off)")

    def estimator(self) -> Facts:
        """What the chosen estimator reads, returns and takes, without importing it."""
        return facts("advantage", self.adv_estimator)

    def _who(self, input_name: str) -> str:
        """The estimator, if it takes ``input_name``, else those that do (a rule's subject)."""
        if self.estimator().takes(input_name):
            return self.adv_estimator
        return " or ".join(n for n in ADV_ESTIMATORS if facts("advantage", n).takes(input_name))

    def _set_options(self) -> list[str]:
        return [k for k in FLAT_OPTIONS if getattr(self, k) is not None]

    @model_validator(mode="before")
    @classmethod
    def _one_estimator(cls, data: Any) -> Any:
        """``adv_estimator`` and the flat options, and a given ``advantage``, name one
        estimator: each spelling gets what the other gives and it leaves out (``advantage``'s
        name and options reach the flat keys here, within their bounds; the flat keys reach
        ``advantage`` in ``_options_act``, once it is known that the estimator takes them). A
        null is not given; an option given both ways must agree (the names, once canonical:
        ``_options_act``)."""
        if not isinstance(data, dict):
            return data
        data = {k: v for k, v in data.items() if k != "adv_estimator" or v is not None}
        if "advantage" not in data:
            return data
        section = data["advantage"] or {}
        built = isinstance(section, AdvantageConfig)  # (as an assignment to a key sees it)
        advantage = {"name": section.name, **section.given_options()} if built else \
            {k: v for k, v in section.items() if v is not None}
        for key, option in FLAT_OPTIONS.items():
            if option not in advantage:
                continue
            if data.get(key) is None:
                data[key] = advantage[option]
            elif data[key] != advantage[option]:
                raise ValueError(f"algo.{key}={data[key]} and algo.advantage.{option}="
                                 f"{advantage[option]} differ: give the option once")
        if data.get("adv_estimator") is None and "name" in advantage:
            data["adv_estimator"] = advantage["name"]
        elif data.get("adv_estimator") is not None:
            advantage.setdefault("name", data["adv_estimator"])
        return data if built else data | {"advantage": advantage}

    @model_validator(mode="after")
    def _options_act(self) -> AlgoConfig:
        if "advantage" in self.model_fields_set and self.adv_estimator != self.advantage.name:
            raise ValueError(f"algo.adv_estimator={self.adv_estimator} and algo.advantage.name="
                             f"{self.advantage.name} differ: name the estimator once (a saved "
                             "config.yaml gives both: change both, or set one to null)")
        if self.estimator().takes("grader_quality") != (self.quality_part is not None):
            raise ValueError(f"algo.adv_estimator={self._who('grader_quality')} and "
                             "algo.quality_part (the reward part that grades a passing "
                             "sample's quality) go together")
        options = self.estimator().hyperparameters(ADVANTAGE_INPUTS)
        for key in self._set_options():
            if FLAT_OPTIONS[key] not in options:
                raise ValueError(f"algo.{key} only acts with adv_estimator in "
                                 f"{_taking(FLAT_OPTIONS[key])}, not {self.adv_estimator}")
        flat = {FLAT_OPTIONS[k]: getattr(self, k) for k in self._set_options()}
        given = self.advantage.given_options()
        if self.advantage.name != self.adv_estimator or set(flat) - set(given):
            self.__dict__["advantage"] = AdvantageConfig(name=self.adv_estimator, **given | flat)
        return self

    def resolved(self) -> AlgoConfig:
        """With the values ``advantage`` holds in the flat option keys left null that its
        estimator takes, so they show the values used."""
        held = self.advantage.hyperparameters()
        return self.model_copy(update={key: held[option] for key, option in FLAT_OPTIONS.items()
                                       if getattr(self, key) is None and option in held})

    def check(self, cfg) -> None:
        """What the estimator's inputs need of the critic, the group, the reward and the
        rollout: ``values`` the critic (and only they use one); ``group_ids`` groups of 2 or
        more; ``reward_parts`` (a multi-reward estimator) several parts and their own values
        (no shaping, KL in the reward or synthesised total); ``reward_parts`` and
        ``grader_quality`` the task's own episodes; ``baseline_rewards`` (each prompt's
        greedy decode) a synchronous single-turn rollout; ``grader_quality`` a part outside
        the pass/fail total; ``outcome_rewards`` (per-token returns of one row) one
        completion; ``tree_ids`` trees (``AGENT_INPUTS`` an agent task: ``AgentConfig``)."""
        est, reward, takes = self.adv_estimator, cfg.reward, self.estimator().takes
        multi = takes("reward_parts")
        if "rl" in cfg.stages:
            if takes("values") != cfg.critic.enabled:
                who = self._who("values")
                raise ValueError(f"algo.adv_estimator={who} and critic.enabled go together: "
                                 f"{who} needs the critic's values, and only an estimator that "
                                 "reads them uses a critic")
            if cfg.rl.group_size == 1 and takes("group_ids"):
                raise ValueError(f"rl.group_size: {est} needs group_size >= 2 (a group of 1 "
                                 "has advantage 0, so nothing would be learned)")
            if multi and len(reward.parts) < 2:
                raise ValueError(f"algo.adv_estimator: {est} combines several reward.parts; "
                                 "there is only one")
            if multi and reward.shaping:
                raise ValueError(f"reward.shaping reshapes the scalar reward, which {est} "
                                 "does not use")
            if (multi or takes("grader_quality")) and cfg.rl.actor_as_grm is not None:
                raise ValueError(f"algo.adv_estimator={est} reads the task's reward parts, "
                                 "which rl.actor_as_grm's grading episodes do not have")
            if multi and self.kl.coef > 0 and self.kl.placement == "in_reward":
                raise ValueError("algo.kl.placement: in_reward applies to one scalar reward, "
                                 f"not to {est}'s reward parts; use in_loss")
        if takes("baseline_rewards"):
            if not cfg.single_turn:
                raise ValueError(f"algo.adv_estimator={est}'s baseline is a greedy single-turn "
                                 f"decode; task.name={cfg.task.name} is an agent task")
            if cfg.rl.mode == "async":
                raise ValueError(f"algo.adv_estimator={est} decodes each prompt greedily "
                                 "beside its group: use rl.mode=sync")
        if self.quality_part is not None:
            part = reward.parts.get(self.quality_part)
            if part is None:
                raise ValueError(f"algo.quality_part {self.quality_part!r} is not one of "
                                 f"reward.parts ({', '.join(reward.parts)})")
            if part.weight != 0 and reward.synthesis is None:
                raise ValueError(f"algo.quality_part {self.quality_part!r} has weight "
                                 f"{part.weight}: gar's reward must stay pass/fail, give the "
                                 "part weight 0")
        if reward.synthesis is not None and multi:
            raise ValueError(f"reward.synthesis is set but cannot take effect: "
                             f"algo.adv_estimator={est} reads the reward parts, not their "
                             "synthesised total")
        if takes("outcome_rewards") and not cfg.single_turn:
            raise ValueError(f"algo.adv_estimator={est} computes returns over one "
                             f"completion's tokens; task.name={cfg.task.name} is an agent task")
        if takes("tree_ids") != (cfg.agent.tree is not None):
            raise ValueError(f"algo.adv_estimator={self._who('tree_ids')} and agent.tree go "
                             "together")


SHAPING_RULES = Usable("shaping", lambda rule: "" if rule.output else (
    "it declares no output, a bonus, a cost or the new reward: it is a filter, not a rule"))
SUPPLIED = {"step"}  # inputs the pipeline supplies that are not tensors


class ShapingRule(Section):
    """One reward-shaping rule (docs/algorithms.md) with its hyperparameters as keys; lengths
    are completion tokens. ``budget_penalty`` and ``toggle`` take a token ``budget`` (``b_0``,
    ``B``): one number for all prompts, or ``auto``, each prompt's own, the ``rho``-th
    percentile (default 50) of the correct lengths of its first sampled group, then fixed
    (``rollout.prompt_budgets``); ``concave_length_penalty`` a ``coef`` (``R -= coef C``)."""

    model_config = ConfigDict(extra="allow", validate_assignment=True)

    name: Annotated[str, registered("shaping", SHAPING_RULES)] = Field(
        description="the shaping rule; its hyperparameters are the other keys")

    def options(self) -> dict[str, Any]:
        return dict(self.model_extra or {})

    @model_validator(mode="after")
    def _takes_effect(self) -> ShapingRule:
        rule = facts("shaping", self.name)
        accepted = {k: r for k, r in rule.hyperparameters().items() if k not in SUPPLIED}
        if "budgets" in rule.parameter_names():  # one config budget, or each prompt's own
            accepted["budget"] = True
            budget = self.options().get("budget")
            if budget == "auto":
                accepted["rho"] = False
            elif budget is not None and (isinstance(budget, bool | str) or budget <= 0):
                raise ValueError(f"shaping {self.name!r}: budget is a token count > 0 or "
                                 f"auto, not {budget!r}")
            rho = self.options().get("rho", 50)
            if isinstance(rho, bool) or not isinstance(rho, int | float) or not 0 <= rho <= 100:
                raise ValueError(f"shaping {self.name!r}: rho is a percentile in [0, 100], "
                                 f"not {rho!r}")
        if rule.output == "cost":  # subtracted coef times
            accepted["coef"] = True
        check_hyperparameters(f"shaping {self.name!r}", accepted, set(self.options()))
        return self


