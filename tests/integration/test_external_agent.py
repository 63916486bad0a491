"""RL on an external agent: each sample is a session on ``posttrain serve`` played by the
user's own agent; the session's recording is the episode, rewarded by the agent, by a posted
reward, or by the run's reward function; crashes and timeouts keep what was recorded."""

import json
import random
import sys
import time
import urllib.request

import openai
import pytest

from posttrain.engines import TorchEngine
from posttrain.envs.arithmetic import ArithmeticTasks
from posttrain.harness import episode_problems
from posttrain.rewards import RewardFunction
from posttrain.rollout import ExternalAgentRollout, command_agent
from posttrain.rollout.external.agents import reported
from posttrain.rollout.external.served import reward_parts
from posttrain.types import SamplingParams

SAMPLING = SamplingParams(max_new_tokens=8, temperature=1.0)
REWARD = RewardFunction({"correct": ("numeric", 1.0), "format": ("format", 0.1)})


def two_turns(base_url, api_key, task):
    """Asks, then asks again with the reply kept; reports its own reward."""
    client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    messages = list(task.messages())
    for follow_up in ("Are you sure?", None):
        # the agent asks for temperature 0.2; training samples at the run's temperature
        reply = client.chat.completions.create(model="policy", messages=messages,
                                               temperature=0.2, max_tokens=100)
        messages.append({"role": "assistant", "content": reply.choices[0].message.content})
        if follow_up:
            messages.append({"role": "user", "content": follow_up})
    return 0.25


@pytest.fixture
def tasks():
    return ArithmeticTasks(seed=0).sample(2, random.Random(0))


def test_sessions_become_rewarded_episodes_at_the_runs_sampling(model, tokenizer, tasks):
    engine = TorchEngine(model, tokenizer.pad_token_id, tokenizer.eos_token_id)
    play = ExternalAgentRollout(two_turns, timeout_s=60)
    try:
        episodes = play(engine, tokenizer, tasks, REWARD, SAMPLING, group_size=3,
                        group_prefix="s0-")
    finally:
        play.close()
    assert [e.group_id for e in episodes] == ["s0-0"] * 3 + ["s0-1"] * 3
    for e in episodes:
        assert e.reward == 0.25 and e.rewards == {"agent": 0.25} and e.meta["calls"] == 2
        assert episode_problems(e, tokenizer) == []
        trained = [i for s in e.segments for i, m in enumerate(s.loss_mask) if m]
        assert len(trained) <= 2 * SAMPLING.max_new_tokens  # capped at the run's budget
    # the first call of every sample was at the run's temperature 1.0: its log-probs are
    # those of the untempered distribution (temperature 0.2 would make them near 0)
    first = episodes[0].segments[0]
    lps = [lp for lp, m in zip(first.logprobs, first.loss_mask) if m]
    assert min(lps) < -1.0


def test_without_a_returned_reward_the_posted_one_or_the_reward_function_decides(
        model, tokenizer, tasks):
    def posts(base_url, api_key, task):
        client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
        client.chat.completions.create(model="policy", messages=task.messages())
        request = urllib.request.Request(
            f"{base_url}/sessions/{api_key}/reward", data=json.dumps({"reward": 0.5}).encode(),
            headers={"Content-Type": "application/json"}, method="POST")
        urllib.request.urlopen(request).read()

    def silent(base_url, api_key, task):
        openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0).chat.completions \
            .create(model="policy", messages=task.messages())

    engine = TorchEngine(model, tokenizer.pad_token_id, tokenizer.eos_token_id)
    for agent, expected in ((posts, {"agent": 0.5}), (silent, None)):
        play = ExternalAgentRollout(agent, timeout_s=60)
        try:
            (episode,) = play(engine, tokenizer, tasks[:1], REWARD, SAMPLING)
        finally:
            play.close()
        if expected:
            assert episode.rewards == expected
        else:  # the quickstart's reward function on the last reply
            assert set(episode.rewards) == {"correct", "format"}
            assert episode.meta["completion"] == tokenizer.decode(
                [t for t, m in zip(episode.segments[-1].token_ids,
                                   episode.segments[-1].loss_mask) if m],
                skip_special_tokens=True)


def test_a_crashing_or_hanging_agent_keeps_its_finished_turns(model, tokenizer, tasks):
    def crashes(base_url, api_key, task):
        openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0).chat.completions \
            .create(model="policy", messages=task.messages())
        raise RuntimeError("the agent fell over")

    def hangs(base_url, api_key, task):
        openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0).chat.completions \
            .create(model="policy", messages=task.messages())
        time.sleep(5)

    def silent(base_url, api_key, task):
        return 1.0  # never calls the model

    engine = TorchEngine(model, tokenizer.pad_token_id, tokenizer.eos_token_id)
    for agent, finish, error in ((crashes, "error", "fell over"), (hangs, "timeout", "in time"),
                                 (silent, "error", "made no call")):
        play = ExternalAgentRollout(agent, timeout_s=2)
        try:
            (episode,) = play(engine, tokenizer, tasks[:1], REWARD, SAMPLING)
        finally:
            play.close()
        assert episode.finish_reason == finish and error in episode.meta["agent_error"]
        trained = sum(sum(s.loss_mask) for s in episode.segments)
        assert (trained > 0) == (agent is not silent)  # the finished turn is kept


@pytest.mark.parametrize("last, rewards", [("0.75", {"agent": 0.75}),
                                           ('{"correct": 1, "format": 0.1}',
                                            {"correct": 1.0, "format": 0.1})])
def test_a_program_is_an_agent_too(model, tokenizer, tasks, tmp_path, last, rewards):
    """Its last line is its reward: a number, or a JSON object of reward parts."""
    script = tmp_path / "agent.py"
    script.write_text(
        "import json, os, sys, openai\n"
        "row = json.load(sys.stdin)\n"
        "c = openai.OpenAI(max_retries=0)\n"  # OPENAI_BASE_URL / OPENAI_API_KEY from posttrain
        "c.chat.completions.create(model='policy', messages=row['messages'])\n"
        "print('thinking...')\n"
        f"print({last!r})\n")
    engine = TorchEngine(model, tokenizer.pad_token_id, tokenizer.eos_token_id)
    play = ExternalAgentRollout(command_agent(f"{sys.executable} {script}"), timeout_s=120)
    try:
        (episode,) = play(engine, tokenizer, tasks[:1], REWARD, SAMPLING)
    finally:
        play.close()
    assert episode.rewards == rewards and episode.meta["calls"] == 1
    assert episode.reward == pytest.approx(sum(rewards.values()))


def test_reward_parts_that_are_not_numbers_name_the_part():
    """The rollout turns this into an error episode (the run goes on); a program's last line
    that is a JSON object of other things is no reward at all."""
    assert reported('thinking\n{"status": "done"}') is None
    assert reported('{"correct": 1, "format": 0.1}') == {"correct": 1, "format": 0.1}
    assert reward_parts(0.5) is None
    with pytest.raises(ValueError, match="'format' is nan"):
        reward_parts({"correct": 1.0, "format": float("nan")})
    with pytest.raises(ValueError, match="'correct' is 'yes'"):
        reward_parts({"correct": "yes"})


def test_an_agents_fixed_seed_and_huge_max_tokens_do_not_bind_training(model, tokenizer, tasks):
    """Agents often send ``seed=42`` and a large ``max_tokens``: while training, each call gets
    a fresh seed (a group's samples differ) and the run's budget (no context error)."""
    def stubborn(base_url, api_key, task):
        openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0).chat.completions \
            .create(model="gpt-anything", messages=task.messages(), seed=42,
                    max_tokens=100_000)
        return 0.0

    engine = TorchEngine(model, tokenizer.pad_token_id, tokenizer.eos_token_id)
    play = ExternalAgentRollout(stubborn, timeout_s=60)
    try:
        episodes = play(engine, tokenizer, tasks[:1], REWARD, SAMPLING, group_size=4)
    finally:
        play.close()
    assert all(e.finish_reason == "stop" and e.meta["calls"] == 1 for e in episodes)
    samples = {tuple(e.segments[0].token_ids) for e in episodes}
    assert len(samples) > 1
    assert all(sum(e.segments[0].loss_mask) <= SAMPLING.max_new_tokens for e in episodes)


def test_a_steps_samples_depend_on_its_seed_not_on_timing(model, tokenizer, tasks):
    """Each session's calls draw seeds from the step's seed, the session's place and the
    call's number: the same step played twice by concurrent agents samples the same."""
    engine = TorchEngine(model, tokenizer.pad_token_id, tokenizer.eos_token_id)
    seeded = SamplingParams(max_new_tokens=8, temperature=1.0, seed=11)
    runs = []
    for _ in range(2):
        play = ExternalAgentRollout(two_turns, timeout_s=60)
        try:
            runs.append([[s.token_ids for s in e.segments] for e in play(
                engine, tokenizer, tasks, REWARD, seeded, group_size=3)])
        finally:
            play.close()
    assert runs[0] == runs[1]
    assert len({tuple(e[0]) for e in runs[0][:3]}) > 1  # a group's samples still differ
