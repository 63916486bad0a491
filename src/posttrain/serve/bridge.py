"""Token-exact recording of one session's calls, bridged across turns.

Each call brings the exact prompt ids the engine saw and, per choice, the sampled ids, their
log-probs and weight version. A call whose prompt extends an open branch (a previous call's
prompt + one of its completions) token for token continues that branch's segment: the new
prompt tokens join with mask 0 and the sampled ones with mask 1. A prompt that extends no
open branch (the chat template rewrote history, the client edited a message) closes every open
branch and starts a new segment; the split is counted with the first position where the
tokens part, so nothing the policy sampled is ever re-tokenised. Branches a call did not
continue (the other choices of ``n > 1``) are closed as segments of their own.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from posttrain.types import Episode, Segment


@dataclass
class Branch:
    """An open segment: its tokens so far and the conversation they render (template form)."""

    token_ids: list[int]
    loss_mask: list[int]
    logprobs: list[float]
    versions: list[int]
    messages: list[dict]

    def extended_by(self, prompt: list[int]) -> bool:
        n = len(self.token_ids)
        return len(prompt) >= n and prompt[:n] == self.token_ids

    def segment(self) -> Segment:
        return Segment(list(self.token_ids), list(self.loss_mask), list(self.logprobs),
                       list(self.versions))


@dataclass
class Choice:
    """One sampled completion of a call."""

    token_ids: list[int]
    logprobs: list[float]
    version: int
    message: dict  # the assistant message it becomes, in template form


def first_difference(a: list[int], b: list[int]) -> int:
    """The first position where ``a`` and ``b`` differ (the shorter length if one is a prefix
    of the other)."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


@dataclass
class SessionTrace:
    """Everything one session's calls sampled, as segments; thread-safe."""

    tools: list[dict] | None = None
    closed: list[Branch] = field(default_factory=list)
    open: list[Branch] = field(default_factory=list)
    splits: list[dict] = field(default_factory=list)
    calls: int = 0
    reward: float | None = None  # reported by the agent, if it does
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record(self, prompt: list[int], messages: list[dict], choices: list[Choice],
               tools: list[dict] | None = None) -> bool:
        """Add one call: ``prompt`` rendered from ``messages`` (template form); returns whether
        it continued an open branch."""
        with self._lock:
            self.calls += 1
            if self.tools is None:
                self.tools = tools
            base = next((b for b in self.open if b.extended_by(prompt)), None)
            if base is None and self.open:
                longest = max(self.open, key=lambda b: first_difference(b.token_ids, prompt))
                self.splits.append({"call": self.calls, "position": first_difference(
                    longest.token_ids, prompt), "length": len(longest.token_ids)})
            self.closed += [b for b in self.open if b is not base]
            start = base or Branch([], [], [], [], [])
            suffix = prompt[len(start.token_ids):]
            self.open = [Branch(
                start.token_ids + suffix + c.token_ids,
                start.loss_mask + [0] * len(suffix) + [1] * len(c.token_ids),
                start.logprobs + [0.0] * len(suffix) + [float(x) for x in c.logprobs],
                start.versions + [-1] * len(suffix) + [c.version] * len(c.token_ids),
                [*messages, c.message]) for c in choices]
            return base is not None

    def episode(self, reward: float = 0.0, **meta) -> Episode:
        """The session so far as an episode: closed segments, then the open ones."""
        with self._lock:
            branches = [b for b in self.closed + self.open if b.token_ids]
            if not branches:
                raise ValueError("the session recorded no call")
            return Episode([b.segment() for b in branches], reward=reward, meta={
                "segment_messages": [b.messages for b in branches], "tools": self.tools,
                "calls": self.calls, "splits": list(self.splits), **meta})
