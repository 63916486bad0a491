"""Which settings of a run go together: the rules that span a ``RunConfig``'s sections
(``cfg`` below), each a config error naming the keys, after each section's own rules
(``check``: a rule that concerns one section lives with it). ``RunConfig`` checks them after
its sections have validated themselves."""

from __future__ import annotations

from typing import Any

from posttrain.config.rules import changed, note, noting, sections, unread
from posttrain.config.sections.reward import ENV
from posttrain.hooks import Feature, features, hooked


def check_combinations(cfg) -> None:
    """Every rule, in this order (the first broken one is the error): each section's own
    (``Section.check``, which concern it), then those that span the run, the features' own
    (their ``check`` hooks) among them."""
    for section in sections(cfg):
        section.check(cfg)
    device_rules(cfg)
    feature_refusals(cfg)
    for check in hooked("check"):
        check(cfg)
    env_part_rules(cfg)
    unused_sections(cfg)
    stage_options(cfg)
    run_rules(cfg)


RUN_SHAPES = {  # hooks.SHAPES: whether the run ``cfg`` has each shape
    "async": lambda cfg: cfg.rl.mode == "async",
    "agent": lambda cfg: not cfg.single_turn,
    "processes": lambda cfg: cfg.dist.trainer_processes > 1,
}


def active(feature: Feature, cfg) -> bool:
    """Whether ``feature`` is on in ``cfg``: its ``active`` hook, else ``features.<name>`` set."""
    on = feature.hook("active")
    return on(cfg) if on is not None else feature.name in cfg.features


def feature_refusals(cfg) -> None:
    """The refusals the features declare (``Feature.refuses``): an active feature in a run of a
    shape it refuses is the error it gives."""
    for feature in features():
        for shape, why in feature.refuses.items():
            if RUN_SHAPES[shape](cfg) and active(feature, cfg):
                raise ValueError(why.format(cfg=cfg))


def unread_keys(cfg) -> dict[str, str]:
    """The keys no code path of the valid run ``cfg`` reads, each with the reason: every key
    that a rule would refuse set away from its default (``rules.noting``; a section's name
    stands for all its keys)."""
    with noting() as noted:
        check_combinations(cfg)
    return noted


# section -> the stages that read it
SECTION_STAGES = {"sft": ("sft",), "pref": ("pref",), "distill": ("distill",), "opd": ("opd",),
                  "rl": ("rl",), "algo": ("rl",), "critic": ("rl",), "actor": ("rl", "opd")}


def unused_sections(cfg) -> None:
    """A section set away from its defaults is read by one of the run's stages; ``agent``
    options act on a tool task. (``rm`` is read by ``posttrain reward-model``, no stage.)"""
    note(["rm"], "posttrain reward-model reads it; no stage does")
    for section, readers in SECTION_STAGES.items():
        if set(readers) & set(cfg.stages):
            continue
        absent = " nor ".join(repr(r) for r in readers)
        why = (f"{'neither ' if len(readers) > 1 else ''}{absent} is "
               f"{'' if len(readers) > 1 else 'not '}in stages {cfg.stages}")
        note([section], why)
        names = changed(getattr(cfg, section), section)
        if names:
            raise ValueError(f"{section} options are set ({', '.join(names)}) but {why}")
    if cfg.single_turn:  # (tools and an external agent would make it an agent task)
        keys = [k for k in type(cfg.agent).model_fields
                if k not in ("tools", "external", "external_command")]
        note((f"agent.{k}" for k in keys), "agent options act on agent episodes (a task with "
             f"tools); task.name={cfg.task.name} is single-turn")
        agent_set = changed(cfg.agent, "agent", keys)
        if agent_set:
            raise ValueError(f"agent options act on agent episodes (a task with tools): "
                             f"{', '.join(agent_set)} set, but task.name={cfg.task.name} is "
                             "single-turn")


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
    imported for this only when a key names CUDA or fp16: other configs validate without it.)"""
    named = device_keys(cfg.model_dump())
    if cfg.trainer.precision != "fp16" and not any(v.startswith("cuda") for v in named.values()):
        return
    from posttrain.models.devices import resolve_device

    devices = {key: resolve_device(value, key) for key, value in named.items()}
    if cfg.trainer.precision == "fp16" and devices["trainer.device"].type != "cuda":
        raise ValueError("trainer.precision fp16 needs a CUDA device (loss scaling runs there); "
                         f"trainer.device {cfg.trainer.device} is the CPU here: use bf16")


def env_scored(cfg) -> set[str]:
    """The reward parts of ``cfg`` with verifier ``env``."""
    return {n for n, p in cfg.reward.parts.items() if p.verifier == ENV}


def environment_parts(cfg) -> list[str]:
    """The reward parts of ``cfg`` that the task's environment scores: those with verifier
    ``env`` but the ones a feature scores itself (its ``scored_parts``), in order."""
    own = {part for scored in hooked("scored_parts") for part in scored(cfg)}
    return [n for n, p in cfg.reward.parts.items() if p.verifier == ENV and n not in own]


def env_part_rules(cfg) -> None:
    """Reward parts scored by an environment (verifier ``env``) go with a task whose
    environment scores them, or ``task.env``; a feature's ``scored_parts`` are its own."""
    task = cfg.task
    env_parts = set(environment_parts(cfg))
    if task.PARTS_FROM_ENV:  # an environment library's reward functions, by their names
        if not env_parts:
            raise ValueError(f"task.name={task.name} is scored by its environment's reward "
                             "functions: reward.parts needs them (by name), with verifier env")
        return
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


OPTIMISED = ("sft", "pref", "rm", "distill", "opd", "rl", "critic")  # sections with an optim


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
