"""``AgentLoop``: multi-turn tool use with exact token bookkeeping.

The conversation is rendered with the tokenizer's chat template once, then only appended to:
each turn adds the tokens the engine sampled (loss mask 1) and then the tokens of the template
text that follows them up to the next generation prompt — the end of the assistant turn, the
tool observations, the next ``<|im_start|>assistant`` (loss mask 0). Earlier turns are never
re-tokenised, so the recorded ids are exactly the ids the engine was given. A compaction
closes the segment and starts the next one from the rebuilt context (``Compaction``).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import replace
from typing import NamedTuple

from posttrain.config.sections.agent import RETENTION, Compaction, LoopLimits
from posttrain.engines import Engine
from posttrain.harness.episode_env import EpisodeEnv
from posttrain.harness.episode_state import EpisodeState
from posttrain.harness.guard import Guard
from posttrain.harness.swarm import SWARM_ALONE, SwarmSettings
from posttrain.harness.tool_calls import HERMES_PATTERN
from posttrain.harness.tools import ToolRegistry
from posttrain.rewards import RewardFunction
from posttrain.types import Episode, SamplingParams


class EpisodeItem(NamedTuple):
    """One episode to play: its opening ``messages``, the ``reference`` it is scored against
    and its ``group_id``; ``tools``: this episode's tool set (else the loop's); ``make_env``:
    makes this episode's environment (else the loop's ``env_factory(reference)``, if any).
    A plain ``(messages, reference, group_id)`` tuple is an item too."""

    messages: Sequence[dict]
    reference: str
    group_id: str = ""
    tools: ToolRegistry | None = None
    make_env: Callable[[], EpisodeEnv] | None = None


class AgentLoop:
    """One engine, one tokenizer, one tool set. ``state_key(messages)`` (optional) names the
    state each step acts in, for step-level credit (``gigpo``); a ``guard`` inspects every call
    before it runs; ``compaction`` manages the context window; ``retain_reasoning``
    (``context.RETENTION``) says whether earlier turns' reasoning stays in context when a new
    user turn arrives (``keep_all``: the loop only appends). With ``env_factory`` every
    episode gets its own ``EpisodeEnv`` (made from its reference): its tools replace ``tools``
    and its verdict gives the reward parts scored by the ``env`` verifier. With ``swarm``
    every episode is an orchestrator that may spawn sub-agents (``harness.swarm``)."""

    def __init__(self, engine: Engine, tokenizer, tools: ToolRegistry,
                 limits: LoopLimits = LoopLimits(), call_pattern: str = HERMES_PATTERN,
                 state_key: Callable[[list[dict]], Hashable] | None = None,
                 guard: Guard | None = None, compaction: Compaction = Compaction(),
                 env_factory: Callable[[str], EpisodeEnv] | None = None,
                 retain_reasoning: str = "keep_all", swarm: SwarmSettings | None = None) -> None:
        if retain_reasoning not in RETENTION:
            raise ValueError(f"unknown reasoning retention {retain_reasoning!r}; one of "
                             f"{', '.join(RETENTION)}")
        if swarm is not None and env_factory is not None:
            raise ValueError(SWARM_ALONE)
        self.engine, self.tokenizer, self.tools = engine, tokenizer, tools
        self.limits, self.call_pattern, self.state_key = limits, call_pattern, state_key
        self.guard, self.compaction, self.env_factory = guard, compaction, env_factory
        self.retain_reasoning, self.swarm = retain_reasoning, swarm

    def render(self, messages: list[dict], generation_prompt: bool,
               tools: ToolRegistry | None = None) -> str:
        return self.tokenizer.apply_chat_template(
            messages, tools=(tools or self.tools).schemas() or None, tokenize=False,
            add_generation_prompt=generation_prompt)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def run(self, messages: Sequence[dict], sampling: SamplingParams, reward_fn: RewardFunction,
            reference: str, group_id: str = "") -> Episode:
        """Play one episode and score its final answer (empty when there is none)."""
        return self.run_many([(messages, reference, group_id)], sampling, reward_fn)[0]

    def run_many(self, items: Sequence[EpisodeItem | tuple], sampling: SamplingParams,
                 reward_fn: RewardFunction) -> list[Episode]:
        """Play the episodes of ``items`` (``EpisodeItem``) in lockstep."""
        states = self.start(items, sampling)
        try:
            self.play(states, sampling)
            return [st.episode(reward_fn) for st in states]
        finally:
            for st in states:
                st.close()

    def start(self, items: Sequence[EpisodeItem | tuple],
              sampling: SamplingParams) -> list[EpisodeState]:
        items = [EpisodeItem(*item) for item in items]
        if self.swarm is not None and any(it.make_env is not None for it in items):
            raise ValueError(SWARM_ALONE)
        return [EpisodeState(self, it.messages, it.reference, it.group_id, sampling, it.tools,
                             it.make_env) for it in items]

    def play(self, states: Sequence[EpisodeState], sampling: SamplingParams) -> None:
        """Run ``states`` to their ends: every round, one batched ``generate`` for all episodes
        still running, with the largest remaining turn budget among them; a turn longer than
        its own episode's budget is cut there (a prefix of a sample is a sample: its tokens
        and log-probs stand) and ends as truncated. Summary turns of a compaction and tool
        calls run per episode."""
        while active := [st for st in states if st.stop is None and st.ready()]:
            budgets = [st.budget() for st in active]
            outs = self.engine.generate([st.trace.ids for st in active],
                                        replace(sampling, max_new_tokens=max(budgets)))
            for st, out, budget in zip(active, outs, budgets):
                st.take(out if len(out.token_ids) <= budget else replace(
                    out, token_ids=out.token_ids[:budget], logprobs=out.logprobs[:budget],
                    finish_reason="length"))
