"""``RolloutWorker``: generates dispatched samples a chunk at a time (continuous batching).

Each ``step`` extends every in-flight sample by up to ``chunk_tokens`` tokens with the engine's
current weights, re-prefilling the tokens it already has; finished samples leave and free a slot
for a new one. Weights that change between two steps make a partial rollout: the sample goes on
under the new weights and its per-token versions and behaviour log-probs record the switch.
Because draws are counter-based (``engines.sampling``) chunking alone never changes a sample.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TypeVar

from posttrain.engines import Engine
from posttrain.models import encode_prompt
from posttrain.rewards import RewardFunction
from posttrain.rollout.dispatch import SampleRequest
from posttrain.rollout.single_turn import score_sample
from posttrain.types import Episode, SamplingParams

T = TypeVar("T")


@dataclass
class InFlight:
    """A sample being generated: what it has so far."""

    request: SampleRequest
    prompt_ids: list[int]
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)


class RolloutWorker:
    """Holds the in-flight samples of one engine; single-turn tasks."""

    def __init__(self, engine: Engine, tokenizer, reward_fn: RewardFunction,
                 sampling: SamplingParams, chunk_tokens: int) -> None:
        self.engine, self.tokenizer, self.reward_fn = engine, tokenizer, reward_fn
        self.sampling, self.chunk_tokens = sampling, chunk_tokens
        self.inflight: list[InFlight] = []
        self.tokens_generated = 0

    def admit(self, request: SampleRequest) -> None:
        prompt = encode_prompt(self.tokenizer, request.task.messages())
        self.inflight.append(InFlight(request, prompt))

    def step(self) -> list[tuple[SampleRequest, Episode]]:
        """One chunk for every in-flight sample; returns the samples that finished, scored."""
        if not self.inflight:
            return []
        budget = self.sampling.max_new_tokens
        chunk = min(self.chunk_tokens, max(budget - len(f.token_ids) for f in self.inflight))
        outs = self.engine.generate([f.prompt_ids + f.token_ids for f in self.inflight],
                                    replace(self.sampling, max_new_tokens=chunk),
                                    seeds=[f.request.seed for f in self.inflight])
        done, still = [], []
        for f, out in zip(self.inflight, outs):
            take = out.token_ids[: budget - len(f.token_ids)]  # a row near its budget stops
            f.token_ids += take
            f.logprobs += out.logprobs[: len(take)]
            f.versions += [out.version] * len(take)
            self.tokens_generated += len(take)
            stopped = out.finish_reason == "stop" and len(take) == len(out.token_ids)
            if stopped or len(f.token_ids) >= budget:
                done.append((f.request, self._score(f, "stop" if stopped else "length")))
            else:
                still.append(f)
        self.inflight = still
        return done

    def _score(self, f: InFlight, finish_reason: str) -> Episode:
        episode = score_sample(self.tokenizer, f.request.task, self.reward_fn, f.prompt_ids,
                               f.token_ids, f.logprobs, f.versions, finish_reason,
                               str(f.request.group))
        episode.meta["sample_id"] = f.request.sample_id
        return episode

    def exclusive(self, fn: Callable[[Engine], T]) -> T:
        """``fn(engine)``: nothing else generates on this worker's engine between steps."""
        return fn(self.engine)

    def close(self) -> None:
        """Nothing to release: the engine is its owner's."""

    def abandon(self) -> list[SampleRequest]:
        """Drop every in-flight sample (the worker is going away); returns their requests."""
        lost = [f.request for f in self.inflight]
        self.inflight = []
        return lost
