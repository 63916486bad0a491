"""How a run reaches each catalogue entry: a config key that names it, a switch or section
that applies it, or, for an entry kept as a function only, why. ``posttrain algorithms
--markdown`` prints this beside each formula, and a test checks that every entry is covered."""

from __future__ import annotations

from collections.abc import Iterator

from pydantic import BaseModel

from posttrain.algos.registry import entries
from posttrain.config.schema import RunConfig

# entries applied by a switch or section rather than named by a key
SWITCHED = {
    ("advantage", "taco"): "`algo.taco`",
    ("advantage", "top_entropy"): "`algo.top_entropy`",
    ("advantage", "behaviour_reg"): "`algo.behaviour_reg`",
    ("advantage", "grs"): "`reward.synthesis`",
    ("advantage", "opd"): "`opd.loss` `opd_sampled`, `opd_clip`, `mopd` (the token reward)",
    ("policy_loss", "entropy_bonus"): "`actor.entropy_bonus`",
    ("policy_loss", "value_clip"): "`critic.cliprange_value` (`critic.enabled`)",
    ("offpolicy", "keep_sampling_mask"): "`rl.top_p`, `rl.top_k` (the trainer's support)",
    ("offpolicy", "opsm"): "`algo.offpolicy.opsm_delta`",
    ("offpolicy", "m2po"): "`algo.offpolicy.m2po_tau`",
    ("offpolicy", "kpop"): "`algo.offpolicy.kpop_phi`",
    ("offpolicy", "routing_replay"): "`trainer.routing_replay` (MoE models, the torch engine)",
    ("offpolicy", "staleness_mask"): "`rl.async.max_staleness` (`rl.async.stale: mask`)",
    ("shaping", "dynamic_sampling"): "`algo.dynamic_sampling`",
    ("divergence", "gkd"): "`distill.lam` (each example is a student sample with probability "
                           "lam: the mixture in expectation)",
    ("divergence", "multi_teacher"): "`opd.teachers` (routing by `domains`/`efforts`, `weight`)",
    ("divergence", "self_distill"): "`opd.self_distill`",
    ("reward_model", "bradley_terry"): "`rm.loss`; judges of kind `reward_model`",
    ("reward_model", "pairwise_classifier"): "`rm.loss`; judges of kind `pairwise_model`",
    ("reward_model", "genrm"): "judges of kind `score` (`reward.judges`)",
    ("reward_model", "group_binary_comparison"): "judges of kind `comparison`, `pairwise_model`",
    ("divergence", "mtp_self_distill"): "`trainer.mtp` (an MTP head beside the model; it "
                                        "drafts for `engine.draft_tokens`)",
    ("reward_model", "pgenrm_pair"): "`rm.loss` (user prototypes on the backbone's text "
                                     "embeddings); judges of kind `prototypes`",
    ("metric", "pass_at_k"): "`eval.samples`, `eval.ks`",
    ("metric", "maj_at_k"): "`eval.samples`, `eval.ks`",
    ("metric", "mean_at_k"): "`eval.samples`",
    ("metric", "pass_hat_k"): "`posttrain tau eval --trials`",
    ("reward", "curio"): "`reward.curio` (the part `curio`, verifier `env`)",
    ("metric", "rm_win_rate"): "`rl.rm_win_rate_monitor` (`eval/rm_win_rate`)",
    ("advantage", "confession"): "`reward.confession` (on its tokens; the task's on the answer's)",
    ("reward", "kernel_speed"): "`task.name=kernel` (its part `speed`)",
    ("reward", "actor_as_grm"): "`rl.actor_as_grm` (grading episodes' part `grading`; the "
                                "policy grades as `reward.judges` kind `policy`)",
}

# entries no run applies, on purpose
FUNCTION_ONLY = {
    ("reward_model", "bt_token_span"): "function only: reward models here score the last token "
                                       "(`rm.loss`); a per-token value head is not trained",
}


def named_by_keys(section: type[BaseModel] = RunConfig, prefix: str = ""
                  ) -> Iterator[tuple[str, str, tuple[str, ...] | None]]:
    """``(key, kind, allowed)`` of every field under ``section`` that names a catalogue entry
    (annotated ``registered``, perhaps inside ``X | None``; ``allowed``: None for the whole
    kind)."""
    for name, field in section.model_fields.items():
        key = f"{prefix}{field.alias or name}"
        for meta in [*field.metadata, *_nested_metadata(field.annotation)]:
            check = getattr(meta, "func", None)
            if hasattr(check, "kind"):
                yield key, check.kind, check.allowed
        for sub in _sections(field.annotation):
            yield from named_by_keys(sub, f"{key}.")


def _nested_metadata(annotation) -> Iterator:
    """The ``Annotated`` metadata inside a union such as ``Annotated[str, ...] | None``."""
    for arg in getattr(annotation, "__args__", ()):
        yield from getattr(arg, "__metadata__", ())


def _sections(annotation) -> Iterator[type[BaseModel]]:
    """The config sections inside a field's type (``X``, ``X | None``, ``dict[str, X]``,
    ``list[X]``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
        return
    for arg in getattr(annotation, "__args__", ()):
        yield from _sections(arg)


def catalogue_reach() -> dict[tuple[str, str], str]:
    """``reach`` of every registered entry."""
    names: dict[str, list[str]] = {}
    for e in entries():
        names.setdefault(e.kind, []).append(e.name)
    return reach(names)


def reach(names: dict[str, list[str]]) -> dict[tuple[str, str], str]:
    """``(kind, name) -> how a run reaches it`` for the catalogue's ``names`` (kind -> its
    entries): the keys that name it, else its switch, else why it is a function only (empty:
    none of these)."""
    out: dict[tuple[str, str], list[str]] = {}
    for key, kind, allowed in named_by_keys():
        for name in names.get(kind, []):
            if allowed is None or name in allowed:
                out.setdefault((kind, name), []).append(f"`{key}`")
    joined = {k: ", ".join(dict.fromkeys(v)) for k, v in out.items()}
    return {(kind, name): joined.get((kind, name)) or SWITCHED.get((kind, name))
            or FUNCTION_ONLY.get((kind, name), "")
            for kind, entries in names.items() for name in entries}
