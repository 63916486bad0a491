"""The one pydantic config tree of a run. Defaults are the quickstart recipe."""

from __future__ import annotations

import importlib.util
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from posttrain.algos.registry import facts
from posttrain.config.combinations import check_combinations
from posttrain.config.family import chosen, default_member
from posttrain.config.section import Section
from posttrain.config.sections.agent import AgentConfig
from posttrain.config.sections.cluster import DistConfig
from posttrain.config.sections.distill import DistillConfig, OPDConfig
from posttrain.config.sections.engine import EngineFamily
from posttrain.config.sections.offline import PreferenceConfig, RewardModelConfig, SFTConfig
from posttrain.config.sections.reward import RewardConfig
from posttrain.config.sections.rl import (
    ESTIMATOR_OPTIONS,
    SYNC_TOLERANCE,
    AlgoConfig,
    EvalConfig,
    RLConfig,
)
from posttrain.config.sections.skills import SkillsConfig
from posttrain.config.sections.task import TaskFamily
from posttrain.config.sections.trainer import ActorConfig, CriticConfig, TrainerConfig
from posttrain.hooks import feature
from posttrain.models import PRESETS
from posttrain.models.presets import ARCHITECTURES, MOE_ARCHITECTURES
from posttrain.models.quick_tokens import NAME as QUICK_NAME
from posttrain.models.quick_tokens import QUICK_TOKENS

Task = chosen(TaskFamily, "arithmetic")  # the member ``task.name`` selects
Engine = chosen(EngineFamily, "torch")  # the member ``engine.name`` selects


class ModelConfig(Section):
    """Exactly one of ``path`` (a local HF model directory) or ``preset`` (a tiny model built
    locally into ``<out_dir>/base_model``, in ``architecture``: a real Hugging Face one at tiny
    sizes). Trained models are held in fp32 (master weights); ``trainer.precision`` sets the
    compute dtype. ``attn_res`` (a llama preset): Attention Residuals, ``full`` or ``block``
    (``attn_res_block`` layers a block), instead of the residual sum (docs/models.md).
    ``quick_tokens``: quick-instruction tokens (``<action>``, ...) the run's model must have;
    those its tokenizer lacks are added, a ``path`` model then copied with them into
    ``<out_dir>/base_model`` (docs/quick_instructions.md)."""

    path: str | None = Field(
        None,
        description="a local Hugging Face model directory (or set preset; exactly one of the two)")
    preset: str | None = Field(
        "micro",
        description="a tiny model built into <out_dir>/base_model: nano, micro, small (or set "
                    "path)")
    architecture: Literal[ARCHITECTURES] = Field(
        "llama",
        description="the preset's Hugging Face architecture, randomly initialised at its sizes")
    attn_res: Literal["full", "block"] | None = Field(
        None,
        description="Attention Residuals on a llama preset: full or block (null: the residual sum)")
    attn_res_block: int = Field(2, ge=1, description="layers a block with attn_res=block (>= 1)")
    quick_tokens: list[str] = Field(
        default_factory=list,
        description="quick-instruction tokens (<action>, ...) the model must have; missing ones "
                    "are added")

    @field_validator("quick_tokens")
    @classmethod
    def _quick_tokens(cls, v: list[str]) -> list[str]:
        bad = [n for n in v if not QUICK_NAME.fullmatch(n)]
        if bad or len(set(v)) < len(v):
            raise ValueError(f"distinct names of the form <word>, such as {', '.join(QUICK_TOKENS)}"
                             + (f"; not {', '.join(map(repr, bad))}" if bad else ""))
        return v

    @model_validator(mode="before")
    @classmethod
    def _dtype_moved(cls, data: Any) -> Any:
        if isinstance(data, dict) and "dtype" in data:
            raise ValueError("model.dtype is replaced by trainer.precision (fp32, bf16, fp16): "
                             "bf16 computes in bfloat16 over fp32 master weights")
        return data

    @field_validator("preset")
    @classmethod
    def _preset(cls, v: str | None) -> str | None:
        if v is not None and v not in PRESETS:
            raise ValueError(f"unknown preset {v!r}; known: {', '.join(PRESETS)}")
        return v

    @model_validator(mode="after")
    def _one_source(self) -> ModelConfig:
        if (self.path is None) == (self.preset is None):
            raise ValueError("set exactly one of model.path and model.preset (the other to null)")
        if self.path is not None and self.architecture != "llama":
            raise ValueError("model.architecture shapes a tiny preset; model.path loads its "
                             "own architecture")
        if self.attn_res is not None and (self.path is not None or self.architecture != "llama"):
            raise ValueError("model.attn_res shapes a tiny llama preset: set model.preset and "
                             "model.architecture=llama (model.path loads its own)")
        if self.attn_res != "block" and self.attn_res_block != 2:
            raise ValueError("model.attn_res_block is set but cannot take effect: it sizes "
                             "model.attn_res=block's blocks")
        return self

    def check(self, cfg) -> None:
        """Router options need a mixture-of-experts model (known here for a preset);
        ``trainer.routing_replay`` needs the routing recorded: by an engine that records it,
        in this process, on synchronous single-turn samples (the only ones that carry it)."""
        if self.attn_res is not None:
            for key, on in (("critic.enabled", "rl" in cfg.stages and cfg.critic.enabled),
                            (f"engine.name={cfg.engine.name}", cfg.engine.name != "torch")):
                if on:
                    raise ValueError(f"model.attn_res is an architecture of posttrain's own: "
                                     f"{key} cannot load it (a value head, another engine)")
            for key, on, why in (
                    ("trainer.shard", cfg.trainer.shard, "FSDP2 wraps each decoder layer"),
                    ("engine.draft_tokens", getattr(cfg.engine, "draft_tokens", 0),
                     "speculative decoding runs the fast decoder, which has plain layers")):
                if on:
                    raise ValueError(f"model.attn_res replaces each layer's input, so {key} "
                                     f"cannot work with it: {why}")
        dense = self.path is None and self.architecture not in MOE_ARCHITECTURES
        for key, on in (("trainer.routing_replay", cfg.trainer.routing_replay),
                        ("actor.router_aux_coef", cfg.actor.router_aux_coef > 0)):
            if on and dense:
                raise ValueError(f"{key} is set but cannot take effect: model.architecture="
                                 f"{self.architecture} has no experts")
        if not cfg.trainer.routing_replay:
            return
        why = [reason for reason, broken in (
            (f"engine.name is {cfg.engine.name} (it does not record routing)",
             not cfg.engine.RECORDS_ROUTING),
            ("dist.backend is ray (engine actors do not record it)", cfg.dist.backend == "ray"),
            ("rl.mode is async", cfg.rl.mode == "async"),
            (f"task.name={cfg.task.name} is an agent task", not cfg.single_turn)) if broken]
        if why:
            raise ValueError(f"trainer.routing_replay is set but cannot take effect: {why[0]}")


class RunConfig(Section):
    """A whole run: which stages, on which model and task, with which settings. A checkpoint
    every ``checkpoint_every`` steps of a stage (0: none), the newest ``keep_last`` kept (0:
    all), in ``checkpoint_format`` ``whole`` (a ``from_pretrained`` model and the optimiser
    state, gathered from every trainer process) or ``sharded`` (each process writes its own
    shards through ``torch.distributed.checkpoint``; ``posttrain export`` makes a model of
    one). Either resumes on any number of trainer processes. ``report_to``: experiment trackers
    that receive every logged metric and each held-out evaluation's samples besides
    ``metrics.jsonl`` (docs/tracking.md)."""

    seed: int = Field(
        0, description="random seed of the run (initialisation, data generation, sampling)")
    out_dir: str = Field(
        "runs/quickstart",
        description="the run directory: config.yaml, metrics, checkpoints, models (--out sets it "
                    "too)")
    stages: list[Literal["sft", "pref", "distill", "rl", "opd"]] = Field(
        default_factory=lambda: ["sft", "rl"],
        description="the stages in order, each from the previous one's model: sft, pref, distill, "
                    "rl, opd")
    threads: int | None = Field(None, ge=1,
                                description="torch's CPU threads (null: torch's default)")
    checkpoint_every: int = Field(
        50, ge=0, description="a checkpoint every this many steps of a stage (0: none)")
    keep_last: int = Field(2, ge=0, description="the newest checkpoints kept (0: all)")
    checkpoint_format: Literal["whole", "sharded"] = Field(
        "whole",
        description="whole (a from_pretrained model and optimiser state) or sharded (each trainer "
                    "process writes its shards)")
    report_to: list[Literal["tensorboard", "wandb", "trackio", "mlflow"]] = Field(
        default_factory=list,
        description="experiment trackers that get every metric: tensorboard, wandb, trackio, "
                    "mlflow")
    model: ModelConfig = Field(ModelConfig(),
                               description="the model trained: a local directory or a tiny preset")
    engine: Engine = default_member(
        EngineFamily, "torch",
        description="the rollout engine, the member engine.name selects (docs/engines.md)")
    task: Task = default_member(TaskFamily, "arithmetic",
                                description="the task family, the member task.name selects")
    reward: RewardConfig = Field(
        RewardConfig(),
        description="how samples are scored: reward parts, shaping, judges (docs/reward_models.md)")
    sft: SFTConfig = Field(SFTConfig(), description="the supervised fine-tuning stage")
    pref: PreferenceConfig = Field(
        PreferenceConfig(), description="the preference-optimisation stage (docs/preference.md)")
    rm: RewardModelConfig = Field(
        RewardModelConfig(),
        description="reward-model training by posttrain reward-model (docs/reward_models.md)")
    rl: RLConfig = Field(
        RLConfig(),
        description="the RL stage's loop: sampling, batches, weight sync, sync or async")
    distill: DistillConfig = Field(
        DistillConfig(), description="the offline distillation stage (docs/distillation.md)")
    opd: OPDConfig = Field(OPDConfig(),
                           description="the on-policy distillation stage (docs/distillation.md)")
    algo: AlgoConfig = Field(
        AlgoConfig(),
        description="how RL rewards become advantages: estimator, KL, off-policy corrections")
    actor: ActorConfig = Field(ActorConfig(),
                               description="the policy's loss in RL (and in opd's sampled losses)")
    critic: CriticConfig = Field(
        CriticConfig(), description="PPO's value model, trained with algo.adv_estimator=gae")
    agent: AgentConfig = Field(
        AgentConfig(),
        description="agent episodes (tasks with tools): limits, compaction, guard, harnesses")
    eval: EvalConfig = Field(EvalConfig(),
                             description="held-out evaluation: problems, sampling, pass@k")
    trainer: TrainerConfig = Field(
        TrainerConfig(),
        description="the trainer: device, precision, micro-batches, sharding, LoRA, MTP")
    dist: DistConfig = Field(
        DistConfig(),
        description="where the pieces run: local or Ray, engines, trainer processes "
                    "(docs/scaling.md)")
    skills: SkillsConfig | None = Field(
        None, description="a skill bank in every episode (null: none; docs/skills.md)")
    features: dict[str, Any] = Field(
        default_factory=dict,
        description="the own keys of features that declare them, by feature name (absent: "
                    "off; docs/architecture.md)")

    @field_validator("stages")
    @classmethod
    def _each_once(cls, stages: list[str]) -> list[str]:
        if len(set(stages)) != len(stages):
            raise ValueError(f"{stages} lists a stage twice")
        return stages

    @field_validator("features")
    @classmethod
    def _feature_sections(cls, given: dict[str, Any]) -> dict[str, Any]:
        """Each feature's keys, validated by the section it declares."""
        out = {}
        for name, value in given.items():
            section = feature(name).hook("section")
            if section is None:
                raise ValueError(f"feature {name!r} has no keys of its own")
            out[name] = value if isinstance(value, section) else section.model_validate(
                value or {})
        return out

    @field_validator("report_to")
    @classmethod
    def _trackers_installed(cls, names: list[str]) -> list[str]:
        missing = [n for n in names if importlib.util.find_spec(n) is None]
        if missing:
            raise ValueError(f"{', '.join(missing)} not installed: pip install "
                             "'posttrain[tracking]'")
        return list(dict.fromkeys(names))

    @property
    def single_turn(self) -> bool:
        """Whether episodes are single completions: a single-turn built-in task or the user's
        task source, with no ``agent.tools`` added, no environment (``task.env``) and no
        external agent playing it."""
        return self.task.SINGLE_TURN and not self.agent.tools and self.task.env is None \
            and not self.agent.plays_externally

    @model_validator(mode="after")
    def _combinations(self) -> RunConfig:
        check_combinations(self)
        return self

    @model_validator(mode="after")
    def _resolved(self) -> RunConfig:
        """Values a null leaves to another setting, resolved where the run reads them (after
        the rules, which compare against the defaults), so ``config explain`` and the saved
        ``config.yaml`` show them: the sync probes' tolerance at ``trainer.precision``, the
        advantage estimator's own options, and ``eval.ks``."""
        if "rl" in self.stages:
            rl, algo = self.rl, self.algo
            if rl.sync.probes and rl.sync.tolerance is None:
                tolerance = SYNC_TOLERANCE[self.trainer.precision]
                self.__dict__["rl"] = rl.model_copy(
                    update={"sync": rl.sync.model_copy(update={"tolerance": tolerance})})
            own = facts("advantage", algo.adv_estimator).defaults()
            options = {key: own[name] for key, (takers, name) in ESTIMATOR_OPTIONS.items()
                       if algo.adv_estimator in takers and name in own
                       and getattr(algo, key) is None}
            self.__dict__["algo"] = algo.model_copy(update=options)
        if self.eval.ks is None:
            self.__dict__["eval"] = self.eval.model_copy(update={"ks": self.eval.pass_ks()})
        return self
