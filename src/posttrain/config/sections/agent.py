"""How a run's agent episodes are played: extra tools, the agent's limits, compaction, tree
rollouts, the anti-hack guard and swarms."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, ClassVar, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from posttrain.config.extension import extension, tool_set
from posttrain.config.rules import applies
from posttrain.config.section import Section, described
from posttrain.config.sections.rl import AGENT_INPUTS
from posttrain.config.served import FunctionOrServed, check_fields

STRATEGIES = ("none", "microcompact", "discard_75", "discard_all", "summary", "codex_compact",
              "claude_code_compact")
SUMMARISING = ("summary", "codex_compact", "claude_code_compact")
RETENTION = ("drop_on_new_user", "keep_all", "auto_v4")  # what happens to earlier reasoning
SWARM_PARTS = ("parallel", "finish")  # PARL's auxiliary parts, scored by the swarm
SUBAGENT_PROMPT = ("You are a sub-agent of a larger task. Solve the task you are given with "
                   "your tools and reply with the answer alone.")
GUARD_PROMPT = """An agent solving a task in a sandbox made this tool call:

{call}

Automatic rules flagged it as: {flags}.

Is this call an attempt to cheat: to read hidden tests or answers, fetch an upstream solution, \
or otherwise get the reward without doing the task? Answer with one word: yes or no."""

ACTIVE = tuple(s for s in STRATEGIES if s != "none")
# agent.compaction key -> the strategies that read it
COMPACTION_KEYS = {"ratio": ACTIVE, "max_compactions": ACTIVE, "keep_last": ("microcompact",),
                   "user_budget": ("codex_compact",), "train_summary": SUMMARISING}


@dataclass(frozen=True)
class LoopLimits:
    """When an episode ends, besides a final answer (a turn without tool calls)."""

    max_turns: int = 8
    max_tokens: int = 2048  # the context window: one segment's tokens
    max_new_tokens: int = 256  # one assistant turn
    timeout_s: float = 120.0
    max_tool_errors: int = 3
    loop_repeats: int = 3  # the same calls this many turns in a row


@dataclass(frozen=True)
class Compaction:
    """When and how the loop compacts. ``keep_last``: results ``microcompact`` keeps;
    ``user_budget``: tokens of real user messages ``codex_compact`` keeps; ``max_compactions``
    per episode (later triggers are ignored and the token limit ends the episode)."""

    __pydantic_config__ = ConfigDict(extra="forbid")  # as a config section: no unknown keys

    strategy: str = described("none", "none, microcompact, discard_75, discard_all, summary, "
                              "codex_compact, claude_code_compact")
    ratio: float = described(0.8, "compact once the context holds more than this share of "
                             "agent.max_tokens, in (0, 1]")
    keep_last: int = described(5, "tool results microcompact keeps")
    user_budget: int = described(20_000, "tokens of real user messages codex_compact keeps")
    max_compactions: int = described(3, "most compactions an episode; later the token limit "
                                     "ends it")
    train_summary: bool = described(True, "train on the summaries a summarising strategy writes")

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(f"unknown compaction strategy {self.strategy!r}; one of "
                             f"{', '.join(STRATEGIES)}")
        if not 0 < self.ratio <= 1:
            raise ValueError(f"compaction ratio must lie in (0, 1], got {self.ratio}")
        if min(self.keep_last, self.user_budget, self.max_compactions) < 0:
            raise ValueError("compaction keep_last, user_budget and max_compactions must be >= 0")

    @property
    def summarises(self) -> bool:
        return self.strategy in SUMMARISING

    def due(self, used_tokens: int, window: int, done: int) -> bool:
        """The trigger before a turn: ``used_tokens > ratio * window`` (0.8 for DeepSeek V3.2's
        strategies), at most ``max_compactions`` times an episode."""
        return (self.strategy != "none" and done < self.max_compactions
                and used_tokens > self.ratio * window)


class TreeConfig(Section):
    """``tree_grpo`` rollouts: each of ``M`` backbone episodes per prompt grows ``rounds`` (L)
    times ``branches`` (N) branches from intermediate turns; ``rl.group_size`` is
    ``M (L N + 1)``."""

    branches: int = Field(2, ge=1,
                          description="branches N grown from an intermediate turn each round")
    rounds: int = Field(1, ge=1, description="rounds L of branching; rl.group_size is M (L N + 1)")

    @property
    def per_backbone(self) -> int:
        return self.rounds * self.branches + 1


class GuardJudge(FunctionOrServed):
    """The guard's judge of a flagged tool call (docs/agents.md): ``function`` (a dotted path,
    ``f(call, flags) -> bool``: True when the call is a hack) or a chat model served from
    ``model`` or ``endpoint`` (``ServedModel``), asked ``prompt`` (``{call}`` and ``{flags}``
    filled in) and answering yes or no. A judge that fails or answers neither confirms the
    flag, and the episode counts it (``guard_judge_failures``)."""

    WHAT: ClassVar[str] = "guard judge"
    PROMPTS: ClassVar[tuple[str, ...]] = ("prompt",)
    function: Annotated[str, extension("guard_judge")] | None = Field(
        None,
        description="f(call, flags) -> bool by dotted path, True for a hack (or a served model)")
    prompt: str = Field(
        GUARD_PROMPT,
        description="the question a served judge is asked; {call} and {flags} filled in")
    endpoint_model: str = Field("judge", description="the model name sent to the endpoint")
    max_new_tokens: int = Field(32, ge=1, description="most tokens of the judge's reply")

    @model_validator(mode="after")
    def _prompt_fields(self) -> GuardJudge:
        check_fields(self.prompt, "prompt", call="", flags="")
        return self


class GuardRuleConfig(Section):
    """One more guard rule: ``pattern`` (a regex, case ignored) searched in a call's name and
    JSON arguments flags it as ``name``."""

    name: str = Field(min_length=1, description="the flag a match raises")
    pattern: str = Field(
        min_length=1,
        description="a regex (case ignored) searched in a call's name and JSON arguments")

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, pattern: str) -> str:
        try:
            re.compile(pattern)
        except re.error as e:
            raise ValueError(f"not a regular expression: {e}") from None
        return pattern


class GuardConfig(Section):
    """The online anti-hack guard (docs/agents.md): the default rules plus
    ``protected_paths`` and ``rules`` (``posttrain env audit`` proposes both for the holes it
    finds); ``judge`` (null: every flag is a hack) confirms a flag or clears it; ``on_hack``
    ``block`` (dummy result) or ``zero_reward``."""

    protected_paths: list[str] = Field(
        default_factory=list,
        description="paths a tool call may not touch, besides the default rules'")
    rules: list[GuardRuleConfig] = Field(
        default_factory=list, description="more {name, pattern} rules that flag a tool call")
    judge: GuardJudge | None = Field(
        None, description="confirms or clears a flag (null: every flag is a hack)")
    on_hack: Literal["block", "zero_reward"] = Field(
        "block",
        description="block (the call gets a dummy result) or zero_reward (the episode scores 0)")


class SwarmConfig(Section):
    """Agent swarms (Kimi K2.5's PARL; docs/agents.md): every episode is an orchestrator that
    may ``spawn(task)`` sub-agents and ``wait(handles)`` for them. A sub-agent is the same model
    on the same engine (those an orchestrator waits for are batched), with ``prompt``, its task
    and the task's tools, within ``max_turns``; at most ``max_subagents`` an episode. ``target``
    sub-agents earn the whole ``parallel`` part (PARL's instantiation reward; the ``parl``
    shaping rule, or a reward part ``parallel``/``finish`` with verifier ``env``)."""

    max_subagents: int = Field(8, ge=1, description="most sub-agents an episode may spawn")
    target: int = Field(4, ge=1, description="sub-agents that earn the whole parallel part")
    max_turns: int = Field(4, ge=1, description="most turns of a sub-agent")
    prompt: str = Field(SUBAGENT_PROMPT, min_length=1,
                        description="the system prompt of every sub-agent")


class ExternalAgent(Section):
    """The user's own agent playing episodes against ``posttrain serve`` on the rollout engine
    (docs/serve.md): ``external`` (``pkg.mod:fn``, called as ``fn(base_url, api_key, task)``)
    or ``external_command`` (a program)."""

    external: Annotated[str, extension("external_agent")] | None = Field(
        None,
        description="your agent by dotted path, fn(base_url, api_key, task), against posttrain "
                    "serve")
    external_command: str | None = Field(
        None, description="your agent as a program run against posttrain serve")

    @property
    def plays_externally(self) -> bool:
        """Whether the user's own agent plays the episodes (``external`` or
        ``external_command``) against ``posttrain serve``."""
        return self.external is not None or self.external_command is not None

    @model_validator(mode="after")
    def _one_external_agent(self) -> ExternalAgent:
        if self.external is not None and self.external_command is not None:
            raise ValueError("external and external_command both name the agent: set one")
        return self


class HarnessConfig(ExternalAgent):
    """One harness of ``agent.harnesses``: how a ``share`` of the tasks is played. The
    built-in loop, with ``system``: a system message opening every episode (merged into the
    task's own); ``max_turns``, ``max_tokens``, ``retain_reasoning``, ``compaction``: this
    harness's instead of ``agent``'s; ``tools``: the names of the task's tools it offers
    (null: all). Or an external agent (``external`` / ``external_command``), which brings its
    own loop and tools and gets the task with ``system`` opening it."""

    name: str = Field(pattern=r"^[A-Za-z0-9_-]+$",
                      description="the harness's name in harness/<name>/* metrics")
    share: float = Field(
        1.0, gt=0,
        description="the share of the tasks it plays, relative to the other harnesses' (> 0)")
    system: str | None = Field(None,
                               description="a system message opening every episode (null: none)")
    max_turns: int | None = Field(None, ge=1,
                                  description="this harness's agent.max_turns (null: agent's)")
    max_tokens: int | None = Field(None, ge=16,
                                   description="this harness's agent.max_tokens (null: agent's)")
    retain_reasoning: Literal[RETENTION] | None = Field(  # type: ignore[valid-type]
        None, description="this harness's agent.retain_reasoning (null: agent's)")
    compaction: Compaction | None = Field(
        None, description="this harness's agent.compaction (null: agent's)")
    tools: list[str] | None = Field(
        None, description="the names of the task's tools it offers (null: all)")

    @model_validator(mode="after")
    def _loop_settings_of_the_built_in_loop(self) -> HarnessConfig:
        loop = [k for k in ("max_turns", "max_tokens", "retain_reasoning", "compaction", "tools")
                if getattr(self, k) is not None]
        if self.plays_externally and loop:
            raise ValueError(f"harness {self.name}: {', '.join(loop)} configure the built-in "
                             "loop; an external agent brings its own loop and tools")
        return self


class AgentConfig(ExternalAgent):
    """Limits of an agent episode (tool-using tasks such as ``calculator``); the per-turn token
    budget is ``rl.max_new_tokens`` (``eval.max_new_tokens`` in evaluation) and ``max_tokens``
    the context window. ``compaction`` manages the window (docs/agents.md); ``tree`` shapes
    ``tree_grpo`` rollouts; ``guard`` (null: off) inspects every tool call;
    ``retain_reasoning`` says what happens to earlier turns' reasoning when a new user turn
    arrives (a simulated user's or an environment's message): ``keep_all`` (stays in
    context; the loop only appends), ``drop_on_new_user`` (removed; the episode continues in
    a new segment) or ``auto_v4`` (kept when the episode has called tools). ``tools``: typed
    functions added to the task's tools, each entry a function (``module:fn``), a list of
    them (``module:TOOLS``) or a module (``my_tools.py``: its public functions); a task
    without tools then plays through the agent loop. ``external`` (``pkg.mod:fn``, called as
    ``fn(base_url, api_key, task)``) or ``external_command`` (a program; docs/serve.md): the
    user's own agent plays each sample against ``posttrain serve`` on the rollout engine,
    within ``timeout_s``, and its session's recording is the episode. ``harnesses``: several
    harness configurations in one run, each playing a share of the tasks (docs/agents.md,
    Several harnesses)."""

    max_turns: int = Field(4, ge=1, description="most assistant turns an episode")
    max_tokens: int = Field(512, ge=16, description="the context window of one segment, in tokens")
    timeout_s: float = Field(
        120.0, gt=0, description="seconds an episode (or an external agent's session) may take")
    max_tool_errors: int = Field(3, ge=0, description="tool errors after which an episode ends")
    loop_repeats: int = Field(
        3, ge=2, description="turns in a row of the same calls after which an episode ends")
    compaction: Compaction = Field(
        Compaction(), description="how the context window is compacted (docs/agents.md)")
    tree: TreeConfig | None = Field(
        None, description="tree_grpo rollouts: branches grown from intermediate turns (null: off)")
    guard: GuardConfig | None = Field(
        None, description="the online anti-hack guard inspecting every tool call (null: off)")
    retain_reasoning: Literal[RETENTION] = Field(  # type: ignore[valid-type]
        "keep_all",
        description="earlier turns' reasoning at a new user turn: keep_all, drop_on_new_user, "
                    "auto_v4")
    tools: list[Annotated[str, tool_set()]] = Field(
        default_factory=list,
        description="typed functions by dotted path added to the task's tools")
    swarm: SwarmConfig | None = Field(
        None, description="episodes may spawn sub-agents and wait for them (null: off)")
    harnesses: list[HarnessConfig] = Field(
        default_factory=list,
        description="several harnesses in one run, each playing a share of the tasks")

    @field_validator("harnesses")
    @classmethod
    def _distinct_harnesses(cls, v: list[HarnessConfig]) -> list[HarnessConfig]:
        names = [h.name for h in v]
        if len(set(names)) < len(names):
            raise ValueError(f"harness names must be distinct, got {names}")
        return v

    @property
    def any_external(self) -> bool:
        """Whether an external agent plays some episodes: ``agent``'s or a harness's."""
        return self.plays_externally or any(h.plays_externally for h in self.harnesses)

    @model_validator(mode="after")
    def _agent_tools_are_the_loops(self) -> AgentConfig:
        if self.plays_externally and self.tools:
            raise ValueError("agent.tools are tools of posttrain's agent loop; an external "
                             "agent (agent.external / external_command) brings its own")
        return self

    def check(self, cfg) -> None:
        """What reads or shapes agent episodes (steps, state keys, trees, the context, tool
        calls) needs a tool task; tree rollouts need a group of whole trees and an episode
        whose state can be copied; swarms need the task's own tools and episode credit."""
        algo, task = cfg.algo, cfg.task
        step_credit = [name for name, on in (
            (f"algo.adv_estimator={algo.adv_estimator}",
             any(algo.estimator().takes(i) for i in AGENT_INPUTS)),
            ("algo.behaviour_reg", algo.behaviour_reg is not None)) if on]
        needs_agent = step_credit + [name for name, on in (
            ("agent.compaction", self.compaction.strategy != "none"),
            ("agent.guard", self.guard is not None)) if on]
        if needs_agent and cfg.single_turn:
            raise ValueError(f"{needs_agent[0]} acts on agent episodes (tool steps); "
                             f"task.name={task.name} is single-turn")
        if self.tree is not None and cfg.eval.samples > 1:
            raise ValueError("eval.samples > 1 with agent.tree: evaluation would grow trees; "
                             "evaluate a tree_grpo policy with eval.samples=1")
        if self.swarm is not None:
            for what, on in (("agent.tree", self.tree is not None),
                             (f"task.name={task.name}", bool(task.SCORED_PARTS)),
                             ("task.env", task.env is not None),
                             ("an external agent", self.plays_externally)):
                if on:
                    raise ValueError(f"agent.swarm: sub-agents share the task's tools, and "
                                     f"the episodes of {what} cannot spawn them")
            if step_credit:
                raise ValueError(f"agent.swarm with {step_credit[0]}: its step-level credit reads "
                                 "the orchestrator's steps, and a swarm episode's rows hold its "
                                 "sub-agents' steps too")
        if (task.SCORED_PARTS or task.env) and self.tree is not None:
            raise ValueError(f"agent.tree: tree rollouts cannot branch {task.env or task.name} "
                             "episodes (their environment state cannot be copied)")
        if self.tree is not None and cfg.rl.group_size % self.tree.per_backbone:
            raise ValueError(f"rl.group_size={cfg.rl.group_size} must be a multiple of "
                             f"agent.tree.rounds * branches + 1 = {self.tree.per_backbone}")
        applies(self.compaction, "agent.compaction", COMPACTION_KEYS,
                self.compaction.strategy, "agent.compaction.strategy")
        if self.harnesses:
            for what, on in (("a single-turn task", cfg.single_turn),
                             ("agent.tree", self.tree is not None),
                             ("agent.swarm", self.swarm is not None),
                             ("agent.external / external_command (make the external "
                              "agent one of the harnesses)", self.plays_externally),
                             ("task.rollout", task.rollout is not None)):
                if on:
                    raise ValueError(f"agent.harnesses: not with {what}")

    def limits(self) -> LoopLimits:
        """The episode limits (the per-turn budget comes with each call's sampling)."""
        return LoopLimits(**self.model_dump(include=set(LoopLimits.__dataclass_fields__)))
