"""The reward of a run: named parts scored by built-in verifiers, reward functions named by
dotted path, the episode's environment or judges, then shaping rules."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from posttrain.algos.registry import facts
from posttrain.config.extension import is_path, load_extension
from posttrain.config.family import Member, chosen, names
from posttrain.config.section import Device, Section
from posttrain.config.sections.features.curio import CURIO_PART, CurioConfig
from posttrain.config.sections.rl import ShapingRule
from posttrain.config.served import ServedModel

ENV = "env"  # the verifier name of a part the episode's environment scores
JUDGE = "judge"  # ... and of a part a judge scores after the rollout (rollout.wrappers.judged)
SYNTHESES = ("grs",)  # the functions a synthesised reward may be (rewards.synthesis)
DEFAULT_RUBRIC = ("Is the response correct, complete and clearly stated? Reward correctness "
                  "first, then clarity.")


class RewardPart(Section):
    """A part of the reward: ``verifier`` a built-in name, ``env``, ``judge``, or a dotted
    path to a reward function (docs/extending.md: it takes the sample's fields and the dataset
    row's columns by name, and returns a number, a dict of numbers or None); ``key``: the entry
    of the function's dict this part takes (several parts may share one function)."""

    verifier: str = Field(
        description="what scores the part: a built-in verifier, env, judge, or a function by "
                    "dotted path")
    weight: float = Field(1.0, description="the part's weight in the summed reward")
    key: str | None = Field(
        None,
        description="the entry of a reward function's returned dict this part takes (null: the "
                    "number)")

    @field_validator("verifier")
    @classmethod
    def _known(cls, v: str) -> str:
        if is_path(v):
            load_extension("reward", v)
        elif v not in names("verifier") and v not in (ENV, JUDGE):
            known = ", ".join(sorted([*names("verifier"), ENV, JUDGE]))
            raise ValueError(f"unknown verifier {v!r}; known: {known}")
        return v

    @model_validator(mode="after")
    def _key_for_functions(self) -> RewardPart:
        if self.key is not None and not is_path(self.verifier):
            raise ValueError("key picks an entry of a reward function's dict: the verifier "
                             "must be a dotted path")
        return self


def _default_parts() -> dict[str, RewardPart]:
    return {"correct": RewardPart(verifier="numeric", weight=1.0),
            "format": RewardPart(verifier="format", weight=0.1)}


class JudgeFamily(Member):
    """The judge of a reward part with ``verifier: judge`` (docs/reward_models.md), the member
    ``kind`` selects: ``score`` (a prompted grader), ``comparison`` (a round robin in the group
    decided by a prompted judge), ``pairwise_model`` (the same round robin decided by a
    pairwise classifier), ``reward_model`` (a Bradley-Terry scalar head; these two come from
    ``posttrain reward-model``), ``function`` (your ``f(episodes, tasks)``) or a section class
    of your own by dotted path."""

    FAMILY: ClassVar[str] = "judge"
    KEY: ClassVar[str] = "kind"
    kind: str = Field(
        description="the judge: score, comparison, pairwise_model, reward_model, pgenrm, "
                    "prototypes, policy, function, or a dotted path")

    def build(self, policy_tokenizer: Any, dtype: str, seed: int) -> Any:
        """The judge (``rollout.wrappers.judged.Judge``): scores or None per episode; ``dtype``
        and ``seed`` place and sample a local model."""
        raise NotImplementedError


class ServedJudge(JudgeFamily, ServedModel):
    """A chat model served from ``model`` or ``endpoint`` (``ServedModel``) judging by
    ``rubric`` in replies of at most ``max_new_tokens`` tokens."""

    endpoint_model: str = Field("judge", description="the model name sent to the endpoint")
    rubric: str = Field(DEFAULT_RUBRIC, description="the grading instructions the judge is shown")
    max_new_tokens: int = Field(64, ge=1, description="most tokens in the judge's reply")

    @model_validator(mode="after")
    def _served_once(self) -> ServedJudge:
        self.served_once("a judge")
        return self


class LocalJudge(JudgeFamily):
    """A local scalar-head model (``model``, a directory) on ``device`` (``auto``: the first
    CUDA device if any, else the CPU)."""

    model: str = Field(
        description="the scalar-head model's directory (from posttrain reward-model)")
    device: Device = Field(
        "auto",
        description="where it runs: auto (a CUDA device if any, else the CPU), cpu, cuda[:N]")


Judge = chosen(JudgeFamily, "score")  # the member ``kind`` selects


CONFESSION_PART = "confession"  # the episode reward key of a confession's score
CONFESSION_PROMPT = ("Now confess: is your answer above correct, and did you follow every "
                     "instruction? Say plainly what, if anything, you got wrong.")
CONFESSION_JUDGES = ("function", "score")


class ConfessionConfig(Section):
    """After every episode the policy is asked to confess (``prompt``, a system message after
    its last turn) and writes up to ``max_new_tokens`` tokens; ``judge`` (kind ``function``,
    reading ``meta["confession"]``, or ``score``, shown the answer and the confession) scores
    the confession as ``rewards["confession"]``, outside the task's reward. The confession's
    own group-normalised advantage goes to its tokens only, the task's to the answer's
    (Joglekar et al., OpenAI 2025, arXiv 2512.08093; docs/confessions.md)."""

    prompt: str = Field(
        CONFESSION_PROMPT, min_length=1,
        description="the system message after the last turn that asks the policy to confess")
    max_new_tokens: int = Field(32, ge=1, description="most tokens of a confession")
    judge: Judge = Field(description="scores each confession: a judge of kind function or score")


class RewardSynthesis(Section):
    """The reward as the catalogue function ``name`` of the parts instead of their weighted
    sum: ``grs`` (``R = R_test S_sol S_beh`` if ``R_test = 1``, else 0). ``inputs`` maps each
    of the function's inputs (``test_rewards``, ``solution_scores``, ``behaviour_scores``) to
    a reward part."""

    name: Literal[SYNTHESES] = Field(
        "grs",
        description="the catalogue function that combines the parts: grs (R_test S_sol S_beh)")
    inputs: dict[str, str] = Field(
        description="the function's inputs (test_rewards, solution_scores, behaviour_scores) -> "
                    "parts")

    @model_validator(mode="after")
    def _inputs_are_the_functions(self) -> RewardSynthesis:
        wanted = set(facts("advantage", self.name).parameter_names())
        if set(self.inputs) != wanted:
            raise ValueError(f"reward.synthesis {self.name!r} takes the inputs "
                             f"{sorted(wanted)}, got {sorted(self.inputs)}")
        return self


class RewardConfig(Section):
    """Reward = sum of weighted named parts (or their ``synthesis``), then the ``shaping``
    rules in order; ``accuracy_part`` is the one reported as accuracy; a reward function's
    call that takes longer than ``timeout_s`` leaves its parts missing. A part with
    ``verifier: judge`` is scored by ``judges[<part>]`` after the rollout; ``curio`` adds
    CURIO's intrinsic reward as the part ``curio``."""

    parts: dict[str, RewardPart] = Field(
        default_factory=_default_parts, min_length=1,
        description="the named reward parts, each scored by its verifier and weighted")
    accuracy_part: str = Field("correct", description="the part reported as accuracy (1: correct)")
    timeout_s: float = Field(
        30.0, gt=0,
        description="seconds a reward function's batch may take before its parts go missing")
    shaping: list[ShapingRule] = Field(
        default_factory=list,
        description="shaping rules applied in order to the summed reward (rl stage)")
    judges: dict[str, Judge] = Field(
        default_factory=dict,
        description="the judge of each part with verifier judge, by part name")
    synthesis: RewardSynthesis | None = Field(
        None,
        description="the reward as a function of the parts instead of their weighted sum (null: "
                    "sum)")
    curio: CurioConfig | None = Field(
        None,
        description="CURIO's per-user-turn intrinsic reward as the part curio (null: off; "
                    "docs/curio.md)")
    confession: ConfessionConfig | None = Field(
        None,
        description="after every episode the policy confesses, judged apart (null: off; "
                    "docs/confessions.md)")

    @model_validator(mode="after")
    def _curio_part(self) -> RewardConfig:
        part = self.parts.get(CURIO_PART)
        if self.curio is not None and (part is None or part.verifier != ENV):
            raise ValueError(f"reward.curio adds its intrinsic reward as the part "
                             f"{CURIO_PART!r}: add reward.parts.{CURIO_PART} with verifier env "
                             "(its weight is alpha_int)")
        return self

    @model_validator(mode="after")
    def _synthesised_from_parts(self) -> RewardConfig:
        if self.synthesis is None:
            return self
        unknown = sorted(set(self.synthesis.inputs.values()) - set(self.parts))
        if unknown:
            raise ValueError(f"reward.synthesis.inputs name {unknown}, not reward.parts "
                             f"({', '.join(self.parts)})")
        weighted = sorted(n for n, p in self.parts.items() if p.weight != 1.0)
        if weighted:
            raise ValueError(f"reward.parts {weighted} have weights, which a synthesised "
                             f"reward ({self.synthesis.name}) does not use")
        return self

    def check(self, cfg) -> None:
        """Judges, CURIO, confessions and a task's own verifier with the task and the loop."""
        if self.judges and not cfg.single_turn:
            raise ValueError(f"reward.judges score single-turn answers; task.name="
                             f"{cfg.task.name} is an agent task")
        if self.judges and cfg.rl.mode == "async":
            raise ValueError("reward.judges run after synchronous rollouts: use rl.mode=sync")
        if self.curio is not None and cfg.task.env is None and not cfg.task.SCORED_PARTS:
            raise ValueError("reward.curio updates a belief after each user turn: it needs an "
                             "environment with a user (task.name=typed_user, or task.env)")
        if self.confession is not None:
            self._check_confession(cfg)
        if any(p.verifier == "reasoning_gym" for p in self.parts.values()) \
                and cfg.task.name != "reasoning_gym":
            raise ValueError("the verifier reasoning_gym scores task.name=reasoning_gym's answers")

    def _check_confession(self, cfg) -> None:
        if self.confession.judge.kind not in CONFESSION_JUDGES:
            raise ValueError(f"reward.confession.judge scores one confession at a time: kind "
                             f"{' or '.join(CONFESSION_JUDGES)}, not {self.confession.judge.kind}")
        if CONFESSION_PART in self.parts:
            raise ValueError(f"reward.parts.{CONFESSION_PART}: the confession's score is kept "
                             "apart from the task's reward; rename the part")
        if self.shaping:
            raise ValueError("reward.shaping counts the response's tokens, which a confession "
                             "would lengthen: drop reward.shaping or reward.confession")
        algo, agent = cfg.algo, cfg.agent
        if facts("advantage", algo.adv_estimator).output == "token":
            raise ValueError(f"algo.adv_estimator={algo.adv_estimator} carries the task's "
                             "reward back through every token, the confession's too: use an "
                             "episode- or step-level estimator with reward.confession")
        refused = [("algo.kl.placement: in_reward (the confession's KL would enter the task's "
                    "reward)", algo.kl.coef > 0 and algo.kl.placement == "in_reward"),
                   ("agent.swarm (its sub-agents' episodes are scored by the swarm)",
                    agent.swarm is not None),
                   ("an external agent (its sessions end outside posttrain)",
                    agent.any_external)]
        for what, present in refused:
            if present:
                raise ValueError(f"reward.confession cannot follow {what}")

    @model_validator(mode="after")
    def _judged_parts(self) -> RewardConfig:
        judged = {n for n, p in self.parts.items() if p.verifier == JUDGE}
        if judged != set(self.judges):
            raise ValueError(f"reward parts with verifier judge ({sorted(judged)}) and "
                             f"reward.judges ({sorted(self.judges)}) must name the same parts")
        return self

    @model_validator(mode="after")
    def _accuracy_known(self) -> RewardConfig:
        if self.accuracy_part not in self.parts:
            raise ValueError(f"reward.accuracy_part {self.accuracy_part!r} is not one of "
                             f"reward.parts ({', '.join(self.parts)})")
        return self
