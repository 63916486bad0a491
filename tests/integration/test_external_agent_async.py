"""Asynchronous RL on an external agent: sessions run on while the trainer trains, a weight
update holds their calls (they then sample under the new weights, each token recording its
version), a session out of time keeps its finished turns, and at zero staleness the async run
trains on the synchronous run's tokens."""

import collections
import copy
import functools
import math
import random
import threading
import time
from concurrent.futures import Future

import openai
import pytest
import torch
from async_helpers import (  # noqa: F401 (fixture)
    TASKS,
    Plan,
    PlannedEngine,
    RecordingTrainer,
    assert_stale_tokens_left_the_loss,
    length_reward,
    planned_steps,
    rl_config,
    train,
)

from posttrain.engines import EngineRestarted, TorchEngine
from posttrain.engines.base import GenerationOutput
from posttrain.recipes import run_rl
from posttrain.recipes.rl import run_async_rl
from posttrain.rewards import RewardFunction
from posttrain.rollout import ExternalAgentRollout
from posttrain.rollout.dispatch import SampleRequest
from posttrain.rollout.external import ExternalAgentWorker
from posttrain.rollout.external.worker import Session
from posttrain.serve.batching import Batcher
from posttrain.types import SamplingParams, read_episodes

SAMPLING = SamplingParams(max_new_tokens=6, temperature=1.0)
REWARD = RewardFunction({"correct": ("numeric", 1.0)})


def two_turns(base_url, api_key, task, between=lambda: None):
    """Asks, calls ``between()``, asks again with its reply kept; leaves the reward to the
    run's reward function."""
    client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    messages = list(task.messages())
    reply = client.chat.completions.create(model="policy", messages=messages)
    messages += [{"role": "assistant", "content": reply.choices[0].message.content},
                 {"role": "user", "content": "Are you sure?"}]
    between()
    client.chat.completions.create(model="policy", messages=messages)


def finish(worker):
    ended = []
    while not ended:
        ended = worker.step()
    return ended


def test_a_held_engine_makes_new_requests_wait_not_fail():
    order = []

    class Recorder:
        version = 0

        def generate(self, prompts, sampling, seeds=None):
            order.append(("generate", self.version))
            return [GenerationOutput(list(p), [1], [-0.5], "stop", self.version)
                    for p in prompts]

    batcher = Batcher(Recorder())
    outs, errors = [], []

    def ask():
        try:
            outs.extend(batcher.generate([[5, 6]], SAMPLING))
        except RuntimeError as exc:  # a refusal (EngineBusy), say
            errors.append(exc)

    with batcher.exclusive() as engine:
        thread = threading.Thread(target=ask, daemon=True)
        thread.start()
        deadline = time.monotonic() + 60  # only not to hang
        while thread.is_alive() and time.monotonic() < deadline and not \
                batcher.await_waiting(1, timeout_s=0.05):
            pass  # until it waits for the holder (or ended, refused or not held)
        waits = batcher.await_waiting(1, timeout_s=0)
        engine.version = 1
        order.append(("update", 1))
    thread.join(60)
    batcher.close()
    assert waits and not errors  # it waited for the holder
    assert order == [("update", 1), ("generate", 1)]
    assert outs[0].version == 1 and batcher.waiting == 0


def test_a_session_goes_on_across_a_weight_update_each_token_with_its_version(model,
                                                                             tokenizer):
    asked, go_on = threading.Event(), threading.Event()

    def agent(base_url, api_key, task):
        two_turns(base_url, api_key, task, lambda: (asked.set(), go_on.wait(60)))

    old = TorchEngine(copy.deepcopy(model), tokenizer.pad_token_id)  # the first weights
    engine = TorchEngine(model, tokenizer.pad_token_id, tokenizer.eos_token_id)

    def update(e):
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(1.1)
        e.update_weights(model.named_parameters(), 1)

    worker = ExternalAgentWorker(agent, engine, tokenizer, REWARD, SAMPLING, timeout_s=60)
    try:
        task = TASKS.sample(1, random.Random(0))[0]
        worker.admit(SampleRequest(4, 0, task, seed=11))
        assert asked.wait(60)
        worker.exclusive(update)  # lands between the session's two calls
        go_on.set()
        ((request, episode),) = finish(worker)
    finally:
        worker.close()
    assert request.group == 4 and episode.group_id == "4" and episode.meta["sample_id"] == "4:0"
    assert episode.finish_reason == "stop" and episode.meta["calls"] == 2
    # per trained token, in order: its version, behaviour log-prob, and the log-probs of one
    # scoring pass under the old and the new weights (a reply cut at max_new_tokens does not
    # bridge: the second call may start a segment of its own)
    rows = []
    for seg in episode.segments:
        before, after = old.score([seg.token_ids])[0], engine.score([seg.token_ids])[0]
        rows += [(seg.versions[i], seg.logprobs[i], before[i], after[i])
                 for i, m in enumerate(seg.loss_mask) if m]
    versions = [v for v, *_ in rows]
    assert 0 in versions and 1 in versions and versions == sorted(versions)
    want = [b if v == 0 else a for v, _, b, a in rows]
    # each call's log-probs and one scoring pass: two float32 computations of the same
    # log-probs, within 16 eps32 of the largest (~8 chained reductions, ~2 eps32 each)
    eps32 = torch.finfo(torch.float32).eps
    torch.testing.assert_close([lp for _, lp, *_ in rows], want,
                               atol=16 * eps32 * max(abs(x) for x in want), rtol=0)
    assert max(abs(b - a) for v, _, b, a in rows if v == 1) > 1e-3  # the update mattered
    assert worker.tokens_generated == len(rows)


def test_a_session_out_of_time_keeps_its_finished_turn_and_is_closed(model, tokenizer):
    release, second = threading.Event(), []

    def agent(base_url, api_key, task):
        try:
            two_turns(base_url, api_key, task, lambda: release.wait(60))
        except openai.APIError as exc:  # its session is closed: the late call is refused
            second.append(exc)

    engine = TorchEngine(model, tokenizer.pad_token_id, tokenizer.eos_token_id)
    worker = ExternalAgentWorker(agent, engine, tokenizer, REWARD, SAMPLING, timeout_s=2)
    try:
        worker.admit(SampleRequest(0, 0, TASKS.sample(1, random.Random(1))[0], seed=3))
        ((_, episode),) = finish(worker)
        release.set()
        for _ in range(100):  # the agent's late call comes back refused
            if second:
                break
            threading.Event().wait(0.1)
    finally:
        worker.close()
    assert episode.finish_reason == "timeout" and "in time" in episode.meta["agent_error"]
    assert episode.meta["calls"] == 1 and sum(episode.segments[0].loss_mask) > 0
    assert second and second[0].status_code == 401


def test_async_at_zero_staleness_trains_on_the_sync_runs_sessions(model, tokenizer, tmp_path):
    runs = {}
    for name, run in (("sync", functools.partial(run_rl, rollout_fn=ExternalAgentRollout(
                          two_turns, timeout_s=120))),
                      ("async", functools.partial(run_async_rl, agent=ExternalAgentRollout(
                          two_turns, timeout_s=120)))):
        cfg = rl_config(max_staleness=0) if name == "async" else rl_config()
        cfg.save_episodes = True
        trained, log = train(run, copy.deepcopy(model), tokenizer, tmp_path / name, cfg)
        episodes = list(read_episodes(tmp_path / name / "episodes.jsonl"))
        runs[name] = trained, log, episodes
    (sync_model, sync_log, sync_eps), (async_model, async_log, async_eps) = runs.values()
    assert len(async_eps) == len(sync_eps) == 3 * 3 * 4
    assert all(e.meta["calls"] == 2 for e in async_eps)
    async_eps.sort(key=lambda e: int(e.group_id))  # saved as groups completed; by number
    assert [[s.token_ids for s in e.segments] for e in async_eps] == \
        [[s.token_ids for s in e.segments] for e in sync_eps]
    assert [r["reward"] for r in async_log] == [r["reward"] for r in sync_log]
    assert all(r["staleness/max"] == 0 for r in async_log)
    for (name, p), q in zip(sync_model.named_parameters(), async_model.parameters()):
        torch.testing.assert_close(q, p, atol=0, rtol=0, msg=name)


class AgentPlan(Plan):
    """``Plan`` for sessions of two calls (each call of a sample's is its "chunk"); the agent
    knows its sample by its session key. A call is held until its version; a step's groups'
    last calls also wait until every other call due at that version is done, so the update
    that follows cannot come first."""

    def __init__(self, partial: bool):
        super().__init__(partial)
        self.samples: dict[str, tuple[int, int]] = {}
        self.due, self.done = collections.Counter(), collections.Counter()
        for group in range(9):
            for index in range(self.GROUP_SIZE):
                self.due.update(v for v in self.versions(group, index)
                                if self.step_of[group] != v)

    def started(self, key: str, request: SampleRequest) -> None:
        with self.cond:
            self.samples[key] = (request.group, request.index)
            self.cond.notify_all()

    def called(self, group: int, version: int) -> None:
        with self.cond:
            self.done[version] += self.step_of.get(group) != version
            self.cond.notify_all()


def planned_two_turns(plan: AgentPlan, engine):
    """``two_turns`` with each call at its planned version."""
    def agent(base_url, api_key, task):
        plan.wait(lambda: api_key in plan.samples, "a session's sample recorded")
        group, index = plan.samples[api_key]
        client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
        messages = list(task.messages())
        for call, version in enumerate(plan.versions(group, index)):
            closes = call == 1 and plan.step_of.get(group) == version  # its step's group
            plan.wait(lambda v=version, closes=closes: engine.version >= v and (
                not closes or plan.done[v] == plan.due[v]), f"version {version}")
            reply = client.chat.completions.create(model="policy", messages=messages)
            plan.called(group, version)
            messages += [{"role": "assistant", "content": reply.choices[0].message.content},
                         {"role": "user", "content": "Are you sure?"}]
    return agent


class PlannedWorker(ExternalAgentWorker):
    """Records each session's sample for the agent. Where an update waits for the sessions in
    flight (no partial rollout) a sample due at a later version starts no session: it is held,
    and a step with held samples only drops them as if the engine restarted, so the loop hands
    them out again after the update."""

    def __init__(self, plan: AgentPlan, *args):
        super().__init__(*args)
        self.plan = plan

    def admit(self, request: SampleRequest) -> None:
        first, _ = self.plan.versions(request.group, request.index)
        if not self.plan.partial and first > self.engine.version:
            self.inflight.append(Session(request, "", Future(), math.inf))
            return
        super().admit(request)
        self.plan.started(self.inflight[-1].key, request)

    def step(self):
        if self.inflight and not any(s.key for s in self.inflight):
            threading.Event().wait(0.005)  # not to spin; nothing waits on it
            raise EngineRestarted("these samples may not start before a later version")
        return super().step()

    def abandon(self) -> list[SampleRequest]:
        lost = [s.request for s in self.inflight]
        self.inflight = []
        return lost


class PlannedAgents(ExternalAgentRollout):
    def __init__(self, plan: AgentPlan, engine):
        super().__init__(planned_two_turns(plan, engine), timeout_s=120)
        self.plan = plan

    def worker(self, engine, tokenizer, reward_fn, sampling):
        return PlannedWorker(self.plan, self.agent, engine, tokenizer, reward_fn, sampling,
                             self.timeout_s)


@pytest.mark.parametrize("partial", [True, False])
def test_sessions_beyond_the_staleness_bound_leave_the_loss(model, tokenizer, tmp_path,
                                                            partial):
    plan = AgentPlan(partial)  # group 0's first three sessions are trained two versions late
    engine = PlannedEngine(model, tokenizer, plan, hold=False)
    cfg = rl_config(max_staleness=1, partial_rollout=partial, capacity=24)
    cfg = cfg.model_copy(update={"save_episodes": True})
    trainer = RecordingTrainer(model, cfg.optim, cfg.steps)
    _, log = train(functools.partial(run_async_rl, agent=PlannedAgents(plan, engine)),
                   model, tokenizer, tmp_path, cfg, engine=engine, trainer=trainer)
    episodes = list(read_episodes(tmp_path / "episodes.jsonl"))
    # the plan held: each step took its groups, each call's 8 tokens have its planned version
    assert planned_steps(episodes) == Plan.STEPS
    rows, mixed = [0, 0, 0], [0, 0, 0]  # segments, and those sampled under two versions
    for e in episodes:
        group, index = map(int, e.meta["sample_id"].split(":"))
        rows[e.meta["step"] - 1] += len(e.segments)
        mixed[e.meta["step"] - 1] += sum(len({v for v in s.versions if v >= 0}) > 1
                                         for s in e.segments)
        first, rest = plan.versions(group, index)
        assert e.meta["calls"] == 2 and [v for s in e.segments for v, m in zip(
            s.versions, s.loss_mask) if m] == [first] * 8 + [rest] * 8, e.meta["sample_id"]
    # 12 sessions of 16 tokens a step; at step 2 group 0's first three sessions are two
    # versions old: their first calls (8 tokens each) with a partial rollout, else all 16
    # (24 / 192 = 1/8, 48 / 192 = 1/4)
    assert_stale_tokens_left_the_loss(log, trainer, 192, [0, 0, 3 * (8 if partial else 16)])
    for step, row in enumerate(log):
        # the share of segments that crossed an update (a partial rollout's, where a session's
        # second call extends its first's segment), a float32 mean: within eps32 relative
        assert row["staleness/mixed_versions"] == pytest.approx(
            mixed[step] / rows[step], rel=torch.finfo(torch.float32).eps, abs=0)
        assert partial or mixed[step] == 0
    assert all(r["kept_groups"] == 3 for r in log)
