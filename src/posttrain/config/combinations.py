"""Which settings of a run go together: rules across a ``RunConfig``'s sections (``cfg``
below), each a config error naming the keys. ``RunConfig`` checks them after its sections have
validated themselves."""

from __future__ import annotations

import os
from typing import Any

from posttrain.algos.registry import facts
from posttrain.harness.compaction import STRATEGIES, SUMMARISING
from posttrain.harness.multi.swarm import SWARM_PARTS
from posttrain.models.presets import MOE_ARCHITECTURES
from posttrain.rewards import ENV
from posttrain.settings.distill_config import OPD_LOSSES
from posttrain.settings.rl_config import (
    EPISODE_ESTIMATORS,
    GREEDY_BASELINE_ESTIMATORS,
    GROUPLESS_ESTIMATORS,
    MULTI_REWARD_ESTIMATORS,
    TOKEN_ESTIMATORS,
)
from posttrain.settings.rules import applies, changed, unread


def check_combinations(cfg) -> None:
    """Every rule, in this order (the first broken one is the error)."""
    stage_rules(cfg)
    device_rules(cfg)
    estimator_rules(cfg)
    routing_rules(cfg)
    agent_rules(cfg)
    member_rules(cfg)
    unused_sections(cfg)
    stage_options(cfg)
    data_rules(cfg)
    rl_switches(cfg)
    run_rules(cfg)
    skills_rules(cfg)


# section -> the stages that read it
SECTION_STAGES = {"sft": ("sft",), "pref": ("pref",), "distill": ("distill",),
                  "opd": ("opd",), "rl": ("rl",), "algo": ("rl",), "critic": ("rl",),
                  "actor": ("rl", "opd")}


def unused_sections(cfg) -> None:
    """A section set away from its defaults is read by one of the run's stages; ``agent``
    options act on a tool task."""
    for section, readers in SECTION_STAGES.items():
        names = changed(getattr(cfg, section), section)
        if names and not set(readers) & set(cfg.stages):
            absent = " nor ".join(repr(r) for r in readers)
            raise ValueError(f"{section} options are set ({', '.join(names)}) but "
                             f"{'neither ' if len(readers) > 1 else ''}{absent} is "
                             f"{'' if len(readers) > 1 else 'not '}in stages {cfg.stages}")
    agent_set = [k for k in changed(cfg.agent, "agent") if k != "agent.tools"]
    if agent_set and cfg.single_turn:
        raise ValueError(f"agent options act on agent episodes (a task with tools): "
                         f"{', '.join(agent_set)} set, but task.name={cfg.task.name} is "
                         "single-turn")


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
    if "pref" in cfg.stages and cfg.pref.data is None and not cfg.task.PAIRS:
        raise ValueError("pref.data is null: generated preference pairs exist for "
                         f"task.name=arithmetic, not {cfg.task.name}")
    if "distill" in cfg.stages and (cfg.distill.teacher is None) == (cfg.distill.logits is None):
        raise ValueError("the distill stage needs exactly one of distill.teacher (a model "
                         "directory) and distill.logits (stored teacher logits)")
    if "opd" in cfg.stages:
        opd_rules(cfg)
    if cfg.trainer.lora is not None and cfg.dist.trainer_processes > 1:
        raise ValueError("trainer.lora trains in one process: set dist.trainer_processes=1")
    if cfg.engine.sleep and ("rl" not in cfg.stages or cfg.rl.mode != "sync"
                             or cfg.dist.backend != "local"):
        raise ValueError("engine.sleep frees the engine's memory during each synchronous RL "
                         "update: it needs the rl stage with rl.mode=sync and "
                         "dist.backend=local")
    if cfg.trainer.lora is not None and cfg.checkpoint_format == "sharded":
        raise ValueError("checkpoint_format=sharded saves sharded weights; trainer.lora trains "
                         "in one process and checkpoints its adapter: use checkpoint_format="
                         "whole")
    launched = int(os.environ.get("WORLD_SIZE", "1")) > 1  # started by torchrun
    if cfg.trainer.shard and cfg.dist.trainer_processes == 1 and not launched:
        raise ValueError("trainer.shard shards over dist.trainer_processes (or the processes "
                         "torchrun starts); there is one")
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
    takers = {key: tuple(loss for loss in OPD_LOSSES if key in opd_inputs(loss))
              for key in ("r_max", "alpha")}
    applies(opd, "opd", takers, opd.loss, "opd.loss")
    if "student_logp" in opd_inputs(opd.loss) and "rl" not in cfg.stages:
        unread(cfg.actor, "actor", None,
               f"opd.loss={opd.loss} matches the teachers' distributions directly (only "
               "opd_sampled, opd_clip and mopd train with the actor's policy loss) and 'rl' "
               f"is not in stages {cfg.stages}")


def opd_inputs(loss: str) -> tuple[str, ...]:
    """What OPD loss ``loss`` takes: the student's distributions (``student_logp``) or the
    sampled tokens' log-probs, and its options (``r_max``, ``alpha``, ``topk``)."""
    return facts("divergence", loss).parameter_names()


def estimator_rules(cfg) -> None:
    """What an estimator reads of the reward and the rollout: ``remax``'s greedy decode is a
    synchronous single-turn rollout; ``gar``'s grader quality is a part outside the pass/fail
    total; a multi-reward estimator reads the parts, so a synthesised total has no effect."""
    algo, reward = cfg.algo, cfg.reward
    if algo.adv_estimator in GREEDY_BASELINE_ESTIMATORS:
        if not cfg.single_turn:
            raise ValueError(f"algo.adv_estimator={algo.adv_estimator}'s baseline is a greedy "
                             f"single-turn decode; task.name={cfg.task.name} is an agent task")
        if cfg.rl.mode == "async":
            raise ValueError(f"algo.adv_estimator={algo.adv_estimator} decodes each prompt "
                             "greedily beside its group: use rl.mode=sync")
    if algo.quality_part is not None:
        part = reward.parts.get(algo.quality_part)
        if part is None:
            raise ValueError(f"algo.quality_part {algo.quality_part!r} is not one of "
                             f"reward.parts ({', '.join(reward.parts)})")
        if part.weight != 0 and reward.synthesis is None:
            raise ValueError(f"algo.quality_part {algo.quality_part!r} has weight "
                             f"{part.weight}: gar's reward must stay pass/fail, give the "
                             "part weight 0")
    if reward.synthesis is not None and algo.adv_estimator in MULTI_REWARD_ESTIMATORS:
        raise ValueError(f"reward.synthesis is set but cannot take effect: "
                         f"algo.adv_estimator={algo.adv_estimator} reads the reward parts, "
                         "not their synthesised total")


def device_keys(tree: Any, prefix: str = "") -> dict[str, str]:
    """Every ``device`` / ``*_device`` key of a dumped config and its value, by dotted key
    (list items by index: ``opd.teachers.0.device``)."""
    items = tree.items() if isinstance(tree, dict) else enumerate(tree) \
        if isinstance(tree, list) else ()
    out: dict[str, str] = {}
    for key, value in items:
        path = f"{prefix}{key}"
        if isinstance(value, dict | list):
            out |= device_keys(value, f"{path}.")
        elif isinstance(key, str) and (key == "device" or key.endswith("_device")):
            out[path] = value
    return out


def device_rules(cfg) -> None:
    """A CUDA device any ``device`` key names exists; fp16 computes on CUDA only. (torch is
    imported for this only when a key names CUDA or fp16: other configs validate without
    it.)"""
    named = device_keys(cfg.model_dump())
    if cfg.trainer.precision != "fp16" and not any(v.startswith("cuda")
                                                   for v in named.values()):
        return
    from posttrain.models.devices import resolve_device

    devices = {key: resolve_device(value, key) for key, value in named.items()}
    if cfg.trainer.precision == "fp16" and devices["trainer.device"].type != "cuda":
        raise ValueError(f"trainer.precision fp16 needs a CUDA device (loss scaling runs "
                         f"there); trainer.device {cfg.trainer.device} is the CPU here: use "
                         "bf16")


def routing_rules(cfg) -> None:
    """``trainer.routing_replay`` needs the routing recorded: by the in-process torch engine,
    on synchronous single-turn samples (the only ones that carry it); router options need a
    mixture-of-experts model (known here for a preset)."""
    dense = cfg.model.path is None and cfg.model.architecture not in MOE_ARCHITECTURES
    for key, on in (("trainer.routing_replay", cfg.trainer.routing_replay),
                    ("actor.router_aux_coef", cfg.actor.router_aux_coef > 0)):
        if on and dense:
            raise ValueError(f"{key} is set but cannot take effect: model.architecture="
                             f"{cfg.model.architecture} has no experts")
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
    if agent.swarm is not None:
        for what, on in (("agent.tree", agent.tree is not None),
                         (f"task.name={cfg.task.name}", bool(cfg.task.SCORED_PARTS)),
                         ("task.env", cfg.task.env is not None),
                         ("an external agent", agent.plays_externally)):
            if on:
                raise ValueError(f"agent.swarm: sub-agents share the task's tools, and the "
                                 f"episodes of {what} cannot spawn them")
        for what, on in ((f"algo.adv_estimator={algo.adv_estimator}",
                          algo.adv_estimator in EPISODE_ESTIMATORS),
                         ("algo.behaviour_reg", algo.behaviour_reg is not None)):
            if on:
                raise ValueError(f"agent.swarm with {what}: its step-level credit reads the "
                                 "orchestrator's steps, and a swarm episode's rows hold its "
                                 "sub-agents' steps too")
    if (cfg.task.SCORED_PARTS or cfg.task.env) and agent.tree is not None:
        what = cfg.task.env or cfg.task.name
        raise ValueError(f"agent.tree: tree rollouts cannot branch {what} "
                         "episodes (their environment state cannot be copied)")
    if cfg.rl.mode == "async" and not (cfg.single_turn or agent.plays_externally):
        raise ValueError(f"rl.mode=async generates single-turn samples or an external agent's "
                         f"sessions; task.name={cfg.task.name} is played by posttrain's agent "
                         "loop (use rl.mode=sync)")
    async_ = cfg.rl.async_
    if agent.plays_externally and async_.chunk_tokens is not None:
        raise ValueError("rl.async.chunk_tokens: an external agent's calls are not cut into "
                         "chunks (a partial rollout goes on at a session's next call)")
    if async_.partial_rollout and async_.chunk_tokens is None and not agent.plays_externally:
        raise ValueError("rl.async.partial_rollout interrupts generation between chunks: "
                         "it needs rl.async.chunk_tokens")
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


def member_rules(cfg) -> None:
    """The task family's and the engine's own rules; reward parts scored by an environment
    (verifier ``env``) go with a task whose environment scores them, or ``task.env``."""
    task = cfg.task
    task.check(cfg)
    cfg.engine.check(cfg)
    gym_parts = {p.verifier for p in cfg.reward.parts.values()} & {"reasoning_gym"}
    if gym_parts and task.name != "reasoning_gym":
        raise ValueError("the verifier reasoning_gym scores task.name=reasoning_gym's answers")
    env_parts = {n for n, p in cfg.reward.parts.items() if p.verifier == ENV}
    if cfg.agent.swarm is not None:  # the swarm scores these two
        env_parts -= set(SWARM_PARTS)
    if task.env is None and task.SCORED_PARTS and not env_parts:
        raise ValueError(f"task.name={task.name} is scored by its environment: reward.parts "
                         f"needs a part with verifier env ({', '.join(task.SCORED_PARTS)})")
    if task.env is None and env_parts and not task.SCORED_PARTS:
        raise ValueError(f"reward parts with verifier env ({', '.join(sorted(env_parts))}) "
                         f"are scored by the episode's environment; task.name={task.name} "
                         "has none (set task.env, or a task such as code or tau)")
    if task.env is None and env_parts - set(task.SCORED_PARTS):
        raise ValueError(f"reward parts {sorted(env_parts - set(task.SCORED_PARTS))}: the "
                         f"{task.name} environment scores only {', '.join(task.SCORED_PARTS)}")


# -- options no code path of the run reads ----------------------------------------------------
def stage_options(cfg) -> None:
    """Options of one stage's code, set while that stage is absent: reward shaping (rl), the
    Ray placement of the rl stage's engines and trainer, and Ray itself where no stage puts
    anything on it (rl, or opd with Ray teachers)."""
    stages = set(cfg.stages)
    if "rl" in stages:
        return
    unread(cfg.reward, "reward", ["shaping"],
           f"shaping rules reshape the rl stage's rewards; 'rl' is not in stages {cfg.stages}")
    ray_teachers = "opd" in stages and cfg.opd.teacher_placement == "ray"
    keys = ["engines", "trainer_actor"] if ray_teachers else [
        k for k in type(cfg.dist).model_fields if k != "trainer_processes"]
    unread(cfg.dist, "dist", keys,
           "Ray runs the rl stage's engines (dist.engines) and policy trainer "
           "(dist.trainer_actor), and the opd stage's teachers with opd.teacher_placement=ray "
           f"(one engine each); stages {cfg.stages} put "
           f"{'only the teachers' if ray_teachers else 'nothing'} on Ray")


# stage section -> its options that shape the data it generates from the task
GENERATED = {"sft": ("num_examples", "error_rate"), "distill": ("num_examples",),
             "pref": ("num_pairs",), "rm": ("num_pairs",)}


def data_rules(cfg) -> None:
    """What shapes generated data goes without given data; GKD's sampling length with GKD;
    the preference reference's timing with a loss that has a reference; the held-out share
    with a task that holds out a share."""
    for section, keys in GENERATED.items():
        value = getattr(cfg, section)
        if value.data is not None:
            unread(value, section, keys, "the data generated from the task is not used: "
                   f"{section}.data is set")
    if cfg.distill.lam == 0:
        unread(cfg.distill, "distill", ["max_new_tokens"],
               "it bounds GKD's student samples, and distill.lam is 0 (none are drawn)")
    loss = cfg.pref.loss.name
    if not any(p.startswith("ref_") for p in facts("preference", loss).parameter_names()):
        unread(cfg.pref, "pref", ["reference"],
               f"preference loss {loss} has no reference model to score with")


def rl_switches(cfg) -> None:
    """Options of the RL loss and loop that act only with a switch on: the critic, the KL
    term, the entropy controller, dynamic sampling, the mismatch and probe checks."""
    algo, rl, bonus = cfg.algo, cfg.rl, cfg.actor.entropy_bonus
    if not cfg.critic.enabled:
        unread(cfg.critic, "critic", ["cliprange_value", "optim"],
               "critic.enabled is false (no value model)")
    if algo.kl.coef == 0:
        unread(algo.kl, "algo.kl", None, "algo.kl.coef is 0: no KL term, no reference model")
    if bonus.adaptive:
        unread(bonus, "actor.entropy_bonus", ["coef"], "actor.entropy_bonus.adaptive is true: "
               "the controller sets the coefficient (from 0)")
    else:
        unread(bonus, "actor.entropy_bonus", ["target", "delta"],
               "they steer the adaptive coefficient; actor.entropy_bonus.adaptive is false")
    dynamic_sampling_rules(cfg)
    if rl.mode == "async":
        unread(rl, "rl", ["mismatch_tolerance"],
               "the engine/trainer log-prob mismatch is checked on synchronous samples "
               "(rl.mode=sync)")
    if rl.sync.probes == 0:
        unread(rl.sync, "rl.sync", ["tolerance"],
               "it bounds the probes' log-prob difference, and rl.sync.probes is 0")
    if not rl.save_episodes:
        unread(rl, "rl", ["token_stats"], "they are recorded on saved episodes, and "
               "rl.save_episodes is false")


def dynamic_sampling_rules(cfg) -> None:
    """Synchronous RL reads ``mode`` with ``enabled`` and ``max_rounds`` with
    ``mode=resample``; asynchronous RL always replaces the groups it drops (no ``mode``), at
    most ``max_rounds`` times ``prompts_per_step`` of them."""
    ds, sync, prefix = cfg.algo.dynamic_sampling, cfg.rl.mode == "sync", "algo.dynamic_sampling"
    if sync and not ds.enabled:
        unread(ds, prefix, ["mode", "max_rounds"], f"{prefix}.enabled is false")
    if sync and ds.mode == "drop":
        unread(ds, prefix, ["max_rounds"], "mode=drop draws no extra rounds")
    if not sync:
        unread(ds, prefix, ["mode"], "rl.mode=async replaces every dropped group (mode "
               "chooses for rl.mode=sync)")
    if not sync and not ds.enabled and cfg.rl.async_.stale == "mask":
        unread(ds, prefix, ["max_rounds"], "it bounds the groups rl.mode=async drops, and "
               "none are dropped (dynamic sampling off, rl.async.stale=mask)")


OPTIMISED = ("sft", "pref", "rm", "distill", "opd", "rl", "critic")  # sections with an optim
ACTIVE = tuple(s for s in STRATEGIES if s != "none")
# agent.compaction key -> the strategies that read it
COMPACTION_KEYS = {"ratio": ACTIVE, "max_compactions": ACTIVE, "keep_last": ("microcompact",),
                   "user_budget": ("codex_compact",), "train_summary": SUMMARISING}


def run_rules(cfg) -> None:
    """Settings of a schedule or a policy that act in one of its modes: the cosine floor,
    how many checkpoints are kept, each compaction strategy's options."""
    for section in OPTIMISED:
        optim = getattr(cfg, section).optim
        if optim.schedule == "constant":
            unread(optim, f"{section}.optim", ["min_lr_ratio"],
                   "it is the cosine schedule's floor; schedule is constant")
    if cfg.checkpoint_every == 0:
        unread(cfg, "", ["keep_last"], "checkpoint_every is 0: no checkpoints are written")
    compaction = cfg.agent.compaction
    applies(compaction, "agent.compaction", COMPACTION_KEYS, compaction.strategy,
            "agent.compaction.strategy")


def skills_rules(cfg) -> None:
    """Skills are disclosed in a task's opening messages, and evolve during RL."""
    s = cfg.skills
    if s is None:
        return
    if cfg.task.env is not None:
        raise ValueError("skills are disclosed in a task's opening messages; episodes of "
                         "task.env open with their environment's own")
    if s.teacher is None:
        unread(s, "skills", ("evolve_every", "per_round", "evolve_below"),
               "skills evolve only with a teacher (skills.teacher)")
    elif "rl" not in cfg.stages:
        raise ValueError("skills.teacher evolves the bank during the rl stage, which this run "
                         "does not have")
    elif cfg.dist.trainer_processes > 1:
        raise ValueError("skills.teacher evolves one bank, in one process: it cannot run with "
                         "dist.trainer_processes > 1")
    if cfg.single_turn:
        unread(s, "skills", ("tools",), "single-turn episodes have no tools")
