"""Tree rollouts for ``tree_grpo`` (Ji et al. 2025, arXiv 2509.21240): ``M`` backbone episodes
per prompt, then ``L`` rounds in which ``N`` intermediate turns of each tree are drawn (distinct
while there are enough) and expanded into new branches; a prompt's group holds ``M (L N + 1)``
episodes.

A branch continues from the state before the chosen step; the shared prefix is context (loss
mask 0) and belongs to its parent. A tree with no intermediate turn yet (every episode ended
in one turn) grows a fresh episode from the root instead, so group sizes stay fixed.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import replace

from posttrain.harness.episode_state import EpisodeState
from posttrain.harness.loop import AgentLoop
from posttrain.harness.swarm import SWARM_ALONE
from posttrain.harness.trace import Trace
from posttrain.rewards import RewardFunction
from posttrain.types import Episode, SamplingParams


def run_tree(loop: AgentLoop, items: Sequence[tuple[Sequence[dict], str, str]],
             sampling: SamplingParams, reward_fn: RewardFunction, branches: int, rounds: int,
             seed: int = 0) -> list[Episode]:
    """One tree per item (an item is one backbone). Episodes carry ``meta["tree_id"]``
    (``"<group>/<tree>"``) and ``meta["branched_at"]`` (the parent's step, or None)."""
    if loop.swarm is not None:
        raise ValueError(SWARM_ALONE)
    if branches < 1 or rounds < 1:
        raise ValueError(f"tree rollouts need branches >= 1 and rounds >= 1, got {branches}, "
                         f"{rounds}")
    trees = [[st] for st in loop.start(items, sampling)]
    try:
        loop.play([t[0] for t in trees], sampling)
        rng = random.Random(seed)
        for round_ in range(1, rounds + 1):
            grown = []
            for item, tree in zip(items, trees):
                nodes = [(st, i) for st in tree for i in branch_points(st)]
                new = [branch(parent, step) for parent, step in _draw(nodes, branches, rng)]
                new += loop.start([item] * (branches if not nodes else 0), sampling)
                tree += new
                grown += new
            round_sampling = sampling if sampling.seed is None else replace(
                sampling, seed=sampling.seed + 7919 * round_)
            loop.play(grown, round_sampling)
        episodes = []
        for k, tree in enumerate(trees):
            for st in tree:
                ep = st.episode(reward_fn)
                ep.meta["tree_id"] = f"{ep.group_id}/{k}"
                episodes.append(ep)
        return episodes
    finally:
        for tree in trees:
            for st in tree:
                st.close()


def branch_points(st: EpisodeState) -> list[int]:
    """Steps after the first that start in ``st``'s current segment: their context holds at
    least one observation and is the current segment's prefix."""
    return [i for i, s in st.snapshots.items() if i > 0 and s.segment == len(st.closed)]


def branch(st: EpisodeState, step: int) -> EpisodeState:
    """A new episode continuing from ``st``'s state before ``step``. The shared prefix belongs
    to the parent: in the branch it is context, with loss mask 0. An episode with its own
    environment cannot branch: the environment's state cannot be copied."""
    if st.env is not None:
        raise ValueError("cannot branch an episode that has its own environment state")
    s = st.snapshots[step]
    b = EpisodeState.__new__(EpisodeState)
    b.__dict__.update(st.__dict__, **s.counters)  # task, loop, sampling; counters before step
    b.trace = Trace(st.trace.ids[: s.ids], st.trace.text[: s.text])
    b.msgs = [dict(m) for m in st.msgs[: s.msgs]]
    b.records = [dict(r) for r in st.records[: s.records]]
    b.closed, b.state_keys, b.step_errors, b.snapshots = [], [], [], {}
    b.stop, b.final, b.branched_at, b.started = None, "", step, time.monotonic()
    return b


def _draw(nodes: list, k: int, rng: random.Random) -> list:
    """``k`` nodes, distinct while there are enough (then with replacement)."""
    if not nodes:
        return []
    return rng.sample(nodes, k) if len(nodes) >= k else [rng.choice(nodes) for _ in range(k)]
