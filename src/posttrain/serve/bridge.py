"""Token-exact recording of one session's calls, bridged across turns.

Each call brings the exact prompt ids the engine saw and, per choice, the sampled ids, their
log-probs and weight version. A call's prompt is built on the longest branch whose text (its
tokens decoded) begins the call's rendered conversation: that branch's tokens, then the rest of
the text encoded (``prompt_after``), so what was sampled keeps its tokens even where its text
would encode otherwise (a lone byte of a character, a special token). A call whose prompt
extends a branch (an earlier call's prompt + one of its completions) token for token continues
that branch's segment, the longest such branch if several (a session may hold interleaved
conversations): the new prompt tokens join with mask 0 and the sampled ones with mask 1. A
prompt that extends no branch (the chat template rewrote history, the client edited a message)
starts a new segment; the split is counted with the first position where the tokens part from
the closest branch, so nothing the policy sampled is ever re-tokenised. A conversation that
dropped a later reply (a hang-up, a retry, an edit) is built on the branch through the last
reply it kept, token for token, and parts from it where it changed. Each choice of ``n > 1``
is a branch of its own. Known limit: a client that retries a call leaves the first answer as a
branch of its own, trained with the session's reward although the agent never saw it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from posttrain.engines.sampling import derived_seed
from posttrain.types import Episode, Segment


@dataclass
class Branch:
    """An open segment: its tokens so far and the conversation they render (template form)."""

    token_ids: list[int]
    loss_mask: list[int]
    logprobs: list[float]
    versions: list[int]
    messages: list[dict]
    text: str | None = None  # its tokens decoded (``prompt_after`` fills it in)

    def extended_by(self, prompt: list[int]) -> bool:
        return prompt[:len(self.token_ids)] == self.token_ids

    def reply_ends(self) -> list[int]:
        """The positions just after each sampled run (a reply), the last first."""
        mask = self.loss_mask
        return [i for i in range(len(mask), 0, -1)
                if mask[i - 1] and (i == len(mask) or not mask[i])]

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
    branches: list[Branch] = field(default_factory=list)
    splits: list[dict] = field(default_factory=list)
    calls: int = 0
    reward: float | None = None  # reported by the agent, if it does
    sampled_calls: dict[str, str] = field(default_factory=dict)  # tool-call id -> sampled text
    sampled_texts: dict[str, str] = field(default_factory=dict)  # visible text -> sampled
    seed: int | None = None  # a training session's: its calls' seeds derive from it
    last_call: float = field(default_factory=time.monotonic)  # when it last recorded a call
    _seeded: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def next_seed(self) -> int | None:
        """The next call's seed, from the session's and the call's number (None without)."""
        with self._lock:
            self._seeded += 1
            return None if self.seed is None else derived_seed(self.seed, self._seeded - 1)

    def prompt_after(self, text: str, decode: Callable[[list[int]], str],
                     encode: Callable[[str], list[int]]) -> list[int]:
        """The prompt ids of the rendered ``text``: the longest recorded prefix whose decoded
        text begins it, then the rest encoded; all of it encoded when none does. A whole branch
        is tried first; failing that, a branch through the end of one of its replies (a client
        that dropped a later reply, by a hang-up, a retry or an edit), so what it kept stays
        token-exact and the conversation parts where it really changed."""
        with self._lock:
            for branch in sorted(self.branches, key=lambda b: -len(b.token_ids)):
                if branch.text is None:
                    branch.text = decode(branch.token_ids)
                if branch.text and text.startswith(branch.text):
                    return list(branch.token_ids) + encode(text[len(branch.text):])
            kept, kept_text = [], ""
            for branch in self.branches:
                for end in branch.reply_ends():
                    if end <= len(kept):
                        break
                    head = decode(branch.token_ids[:end])
                    if text.startswith(head):
                        kept, kept_text = branch.token_ids[:end], head
                        break
        return list(kept) + encode(text[len(kept_text):])

    def record(self, prompt: list[int], messages: list[dict], choices: list[Choice],
               tools: list[dict] | None = None) -> bool:
        """Add one call: ``prompt`` rendered from ``messages`` (template form); returns whether
        it continued a branch."""
        with self._lock:
            self.calls += 1
            self.last_call = time.monotonic()
            if self.tools is None:
                self.tools = tools
            base = max((b for b in self.branches if b.extended_by(prompt)),
                       key=lambda b: len(b.token_ids), default=None)
            if base is not None:
                self.branches.remove(base)
            elif self.branches:
                closest = max(self.branches, key=lambda b: first_difference(b.token_ids, prompt))
                self.splits.append({"call": self.calls, "position": first_difference(
                    closest.token_ids, prompt), "length": len(closest.token_ids)})
            start = base or Branch([], [], [], [], [])
            suffix = prompt[len(start.token_ids):]
            self.branches += [Branch(
                start.token_ids + suffix + c.token_ids,
                start.loss_mask + [0] * len(suffix) + [1] * len(c.token_ids),
                start.logprobs + [0.0] * len(suffix) + [float(x) for x in c.logprobs],
                start.versions + [-1] * len(suffix) + [c.version] * len(c.token_ids),
                [*messages, c.message]) for c in choices]
            return base is not None

    def episode(self, reward: float | None = None, **meta) -> Episode:
        """The session so far as an episode, its branches in the order they were last
        extended; ``reward`` (default: the one the agent reported, else 0)."""
        with self._lock:
            branches = [b for b in self.branches if b.token_ids]
            reward = reward if reward is not None else self.reward or 0.0
            if not branches:
                raise ValueError("the session recorded no call")
            return Episode([b.segment() for b in branches], reward=reward, meta={
                "segment_messages": [b.messages for b in branches], "tools": self.tools,
                "calls": self.calls, "splits": list(self.splits), **meta})
