"""Which settings of a run go together: rules across a ``RunConfig``'s sections (``cfg``
below), each a config error naming the keys. ``RunConfig`` checks them after its sections have
validated themselves."""

from __future__ import annotations

from posttrain.config.task_config import ENV_TASK_PARTS, TASK_KEYS, TaskConfig
from posttrain.rewards import ENV
from posttrain.settings.rl_config import (
    EPISODE_ESTIMATORS,
    GROUPLESS_ESTIMATORS,
    MULTI_REWARD_ESTIMATORS,
    TOKEN_ESTIMATORS,
)


def check_combinations(cfg) -> None:
    """Every rule, in this order (the first broken one is the error)."""
    stage_rules(cfg)
    agent_rules(cfg)
    task_rules(cfg)
    unused_sections(cfg)


# section -> the stages that read it
SECTION_STAGES = {"sft": ("sft",), "pref": ("pref",), "distill": ("distill",),
                  "opd": ("opd",), "rl": ("rl",), "algo": ("rl",), "critic": ("rl",),
                  "actor": ("rl", "opd")}


def unused_sections(cfg) -> None:
    """A section set away from its defaults is read by one of the run's stages; ``agent``
    options act on a tool task; ``engine`` options on the engine that has them."""
    for section, readers in SECTION_STAGES.items():
        value, default = getattr(cfg, section), type(getattr(cfg, section))()
        if value != default and not set(readers) & set(cfg.stages):
            changed = sorted(f"{section}.{k}" for k in type(value).model_fields
                             if getattr(value, k) != getattr(default, k))
            absent = " nor ".join(repr(r) for r in readers)
            raise ValueError(f"{section} options are set ({', '.join(changed)}) but "
                             f"{'neither ' if len(readers) > 1 else ''}{absent} is "
                             f"{'' if len(readers) > 1 else 'not '}in stages {cfg.stages}")
    agent_set = cfg.agent.model_copy(update={"tools": []}) != type(cfg.agent)()
    if agent_set and cfg.single_turn:
        raise ValueError(f"agent options act on agent episodes (a task with tools); "
                         f"task.name={cfg.task.name} is single-turn")
    kv_default = type(cfg.engine).model_fields["kv_cache_gib"].default
    if cfg.engine.name != "vllm" and cfg.engine.kv_cache_gib != kv_default:
        raise ValueError(f"engine.kv_cache_gib sizes vLLM's KV cache; engine.name is "
                         f"{cfg.engine.name}")


def stage_rules(cfg) -> None:
    """Each stage's settings go with the stage, and the stages with the engine and the
    trainer's layout."""
    rl = cfg.rl
    if "rl" in cfg.stages:
        gae = cfg.algo.adv_estimator == "gae"
        if gae != cfg.critic.enabled:
            raise ValueError("algo.adv_estimator=gae and critic.enabled go together: GAE "
                             "needs the critic's values, and only GAE uses a critic")
        if rl.group_size == 1 and cfg.algo.adv_estimator not in GROUPLESS_ESTIMATORS:
            raise ValueError(f"rl.group_size: {cfg.algo.adv_estimator} needs group_size >= 2 "
                             "(a group of 1 has advantage 0, so nothing would be learned)")
        multi = cfg.algo.adv_estimator in MULTI_REWARD_ESTIMATORS
        if multi and len(cfg.reward.parts) < 2:
            raise ValueError(f"algo.adv_estimator: {cfg.algo.adv_estimator} combines "
                             "several reward.parts; there is only one")
        if multi and cfg.reward.shaping:
            raise ValueError(f"reward.shaping reshapes the scalar reward, which "
                             f"{cfg.algo.adv_estimator} does not use")
        effort_rule = any(r.name == "effort_length_penalty" for r in cfg.reward.shaping)
        if effort_rule and not cfg.task.efforts:
            raise ValueError("reward.shaping effort_length_penalty needs task.efforts")
        if multi and cfg.algo.kl.coef > 0 and cfg.algo.kl.placement == "in_reward":
            raise ValueError("algo.kl.placement: in_reward applies to one scalar reward, not "
                             f"to {cfg.algo.adv_estimator}'s reward parts; use in_loss")
        if cfg.trainer.shard and cfg.critic.enabled:
            raise ValueError("trainer.shard does not shard the critic: use replicated "
                             "trainer processes (trainer.shard=false) with critic.enabled")
        if cfg.dist.engines > 1 and rl.mode == "sync":
            raise ValueError("dist.engines > 1 feeds several rollout threads: it needs "
                             "rl.mode=async")
        if rl.mini_batches > rl.prompts_per_step * rl.group_size:
            raise ValueError("rl.mini_batches exceeds the number of rollouts per step")
    if "pref" in cfg.stages and cfg.pref.data is None and cfg.task.name != "arithmetic":
        raise ValueError("pref.data is null: generated preference pairs exist for "
                         f"task.name=arithmetic, not {cfg.task.name}")
    if "distill" in cfg.stages and (cfg.distill.teacher is None) == (cfg.distill.logits is None):
        raise ValueError("the distill stage needs exactly one of distill.teacher (a model "
                         "directory) and distill.logits (stored teacher logits)")
    if "opd" in cfg.stages:
        opd_rules(cfg)
    if cfg.engine.name != "torch":
        if cfg.engine.name == "vllm" and cfg.model.preset == "nano":
            raise ValueError("engine.name=vllm: vLLM's CPU attention has no kernel for the "
                             "nano preset's head size 16; use micro or small")
        if cfg.rl.mode == "async" or cfg.dist.backend == "ray":
            raise ValueError(f"engine.name={cfg.engine.name} runs in-process with "
                             "rl.mode=sync and dist.backend=local")
    if cfg.trainer.lora is not None and cfg.dist.trainer_processes > 1:
        raise ValueError("trainer.lora trains in one process: set dist.trainer_processes=1")
    if cfg.trainer.shard and cfg.dist.trainer_processes == 1:
        raise ValueError("trainer.shard shards over dist.trainer_processes; there is one")
    if len(set(cfg.stages)) != len(cfg.stages):
        raise ValueError(f"stages: {cfg.stages} lists a stage twice")

def opd_rules(cfg) -> None:
    """On-policy distillation's teachers, task, loss and placement."""
    opd = cfg.opd
    if not opd.teachers and opd.self_distill is None:
        raise ValueError("the opd stage needs opd.teachers or opd.self_distill")
    if not cfg.single_turn:
        raise ValueError(f"on-policy distillation samples single-turn answers; task.name="
                         f"{cfg.task.name} is an agent task")
    if opd.loss == "mopd" and opd.group_size < 2:
        raise ValueError("opd.loss=mopd adds the outcome advantage of a group: it needs "
                         "opd.group_size >= 2")
    if opd.teacher_placement == "ray" and cfg.dist.backend != "ray":
        raise ValueError("opd.teacher_placement=ray needs dist.backend=ray")
    if cfg.dist.trainer_processes > 1:
        raise ValueError("the opd stage runs in one trainer process "
                         "(dist.trainer_processes=1)")

def agent_rules(cfg) -> None:
    """What reads or shapes agent episodes (steps, state keys, trees, the context, tool
    calls) needs a tool task; tree rollouts need a group of whole trees."""
    algo, agent = cfg.algo, cfg.agent
    needs_agent = [name for name, on in (
        (f"algo.adv_estimator={algo.adv_estimator}", algo.adv_estimator in EPISODE_ESTIMATORS),
        ("algo.behaviour_reg", algo.behaviour_reg is not None),
        ("agent.compaction", agent.compaction.strategy != "none"),
        ("agent.guard", agent.guard is not None)) if on]
    if algo.adv_estimator in TOKEN_ESTIMATORS and not cfg.single_turn:
        raise ValueError(f"algo.adv_estimator={algo.adv_estimator} computes returns over one "
                         f"completion's tokens; task.name={cfg.task.name} is an agent task")
    if needs_agent and cfg.single_turn:
        raise ValueError(f"{needs_agent[0]} acts on agent episodes (tool steps); "
                         f"task.name={cfg.task.name} is single-turn")
    if agent.tree is not None and cfg.eval.samples > 1:
        raise ValueError("eval.samples > 1 with agent.tree: evaluation would grow trees; "
                         "evaluate a tree_grpo policy with eval.samples=1")
    if (algo.adv_estimator == "tree_grpo") != (agent.tree is not None):
        raise ValueError("algo.adv_estimator=tree_grpo and agent.tree go together")
    if cfg.task.name in ENV_TASK_PARTS and agent.tree is not None:
        raise ValueError(f"agent.tree: tree rollouts cannot branch {cfg.task.name} "
                         "episodes (their environment state cannot be copied)")
    if cfg.rl.mode == "async" and not cfg.single_turn:
        raise ValueError(f"rl.mode=async generates single-turn samples; task.name="
                         f"{cfg.task.name} is an agent task (use rl.mode=sync)")
    if cfg.reward.judges and not cfg.single_turn:
        raise ValueError(f"reward.judges score single-turn answers; task.name="
                         f"{cfg.task.name} is an agent task")
    if cfg.reward.judges and cfg.rl.mode == "async":
        raise ValueError("reward.judges run after synchronous rollouts: use rl.mode=sync")
    if cfg.rl.mode == "async" and cfg.task.efforts:
        raise ValueError("rl.mode=async does not ask prompts at several task.efforts; "
                         "use rl.mode=sync")
    if agent.tree is not None and cfg.rl.group_size % agent.tree.per_backbone:
        raise ValueError(f"rl.group_size={cfg.rl.group_size} must be a multiple of "
                         f"agent.tree.rounds * branches + 1 = {agent.tree.per_backbone}")

def task_rules(cfg) -> None:
    """Task keys set away from their defaults act on their own task only; a task's rewards
    come from its own verifiers."""
    task = cfg.task
    for key, tasks in TASK_KEYS.items():
        default = TaskConfig.model_fields[key].get_default(call_default_factory=True)
        if getattr(task, key) != default and task.name not in tasks:
            raise ValueError(f"task.{key} applies to task.name in {tasks}, not {task.name}")
    gym_parts = {p.verifier for p in cfg.reward.parts.values()} - {"format"}
    if (task.name == "reasoning_gym") != ("reasoning_gym" in gym_parts) or (
            task.name == "reasoning_gym" and gym_parts != {"reasoning_gym"}):
        raise ValueError("task.name=reasoning_gym is scored by the verifier reasoning_gym "
                         "(plus format, if wanted), and that verifier needs the task")
    env_parts = {n for n, p in cfg.reward.parts.items() if p.verifier == ENV}
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
    if task.name in ("tau", "dataset") or task.custom:
        for stage, data in (("sft", cfg.sft.data), ("distill", cfg.distill.data)):
            if stage in cfg.stages and data is None:
                raise ValueError(f"the {stage} stage on task {task.name} needs {stage}.data "
                                 "(no conversations are generated for it)")
