"""The one pydantic config tree of a run. Defaults are the quickstart recipe."""

from __future__ import annotations

import importlib.util
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from posttrain.config.combinations import check_combinations
from posttrain.config.family import chosen, default_member
from posttrain.config.section import Section
from posttrain.config.sections.agent import AgentConfig
from posttrain.config.sections.dist import DistConfig
from posttrain.config.sections.distill import DistillConfig, OPDConfig
from posttrain.config.sections.engine import EngineFamily
from posttrain.config.sections.model import ModelConfig
from posttrain.config.sections.offline import PreferenceConfig, RewardModelConfig, SFTConfig
from posttrain.config.sections.reward import RewardConfig
from posttrain.config.sections.rl import (
    SYNC_TOLERANCE,
    AlgoConfig,
    EvalConfig,
    RLConfig,
)
from posttrain.config.sections.skills import SkillsConfig
from posttrain.config.sections.task import TaskFamily
from posttrain.config.sections.trainer import ActorConfig, CriticConfig, TrainerConfig
from posttrain.hooks import feature

Task = chosen(TaskFamily, "arithmetic")  # the member ``task.name`` selects
Engine = chosen(EngineFamily, "torch")  # the member ``engine.name`` selects


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
            rl = self.rl
            if rl.sync.probes and rl.sync.tolerance is None:
                tolerance = SYNC_TOLERANCE[self.trainer.precision]
                self.__dict__["rl"] = rl.model_copy(
                    update={"sync": rl.sync.model_copy(update={"tolerance": tolerance})})
            self.__dict__["algo"] = self.algo.resolved()
        if self.eval.ks is None:
            self.__dict__["eval"] = self.eval.model_copy(update={"ks": self.eval.pass_ks()})
        return self
