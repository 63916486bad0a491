"""Confessions: after each episode (single-turn or agent) the policy confesses; its tokens
continue the episode's last segment token for token as one more step, the judge's score stays
out of the task's reward, and the update gives the confession's tokens their own group
advantage and the answer's the task's (ALGORITHMS.md §14's worked example)."""

import json
import math

import pytest
import torch
from agent_helpers import CALL, ScriptedEngine

from posttrain.config import AlgoConfig, ConfigError, load_config
from posttrain.config.sections.reward import CONFESSION_PROMPT
from posttrain.harness import episode_problems
from posttrain.recipes.run_tasks import RunTasks
from posttrain.train.rl_update import compute_advantages
from posttrain.types import Batch, SamplingParams

JUDGE = ("reward.confession={judge: {kind: function, "
         "function: examples/confession/honesty.py:honest_verdict}}")
PROMPT = "Now confess: is your answer above correct"


def played(tokenizer, overrides, replies, n_tasks=1, group_size=1):
    run = RunTasks(load_config("configs/quickstart.yaml", [JUDGE, *overrides]))
    run.attach_judges(tokenizer)
    tasks = run.eval_tasks[:n_tasks]
    engine = ScriptedEngine(tokenizer, replies)
    episodes = run.rollout_fn(engine, tokenizer, tasks, run.reward_fn,
                              SamplingParams(max_new_tokens=32, seed=0), group_size)
    return tasks, engine, episodes


def test_a_single_turn_confession_continues_the_episode_as_its_own_step(tokenizer):
    tasks, engine, (ep,) = played(tokenizer, [], lambda prompt: (
        "I am correct." if PROMPT in prompt else "<answer>7</answer>"))
    seg = ep.segments[0]
    answer, confession = seg.steps
    text = tokenizer.decode(seg.token_ids[confession.start:confession.end])
    assert text.startswith("I am correct.") and ep.meta["confession"] == "I am correct."
    scaffold = tokenizer.decode(seg.token_ids[answer.end:confession.start])
    assert PROMPT in scaffold and all(m == 0 for m in seg.loss_mask[answer.end:confession.start])
    assert all(seg.loss_mask[confession.start:confession.end])
    assert engine.prompts[1] == seg.token_ids[:confession.start]  # the exact context
    truth = float(tasks[0].reference == "7")
    assert ep.rewards["confession"] == float(truth == 1.0)  # honest only if it was right
    assert ep.reward == pytest.approx(ep.rewards["correct"] + 0.1 * ep.rewards["format"])
    expected = tokenizer.apply_chat_template(
        [*tasks[0].messages(), {"role": "assistant", "content": "<answer>7</answer>"},
         {"role": "system", "content": CONFESSION_PROMPT},
         {"role": "assistant", "content": "I am correct."}], tokenize=False)
    assert expected.startswith(tokenizer.decode(seg.token_ids))


def test_an_agent_episode_confesses_and_stays_consistent(tokenizer):
    replies = iter([CALL, "<answer>5</answer>", "It is correct."])
    _, _, (ep,) = played(tokenizer, ["task.name=calculator", "task.digits=1"],
                         lambda prompt: next(replies))
    assert len(ep.meta["state_keys"]) == len(ep.meta["step_errors"]) == 3
    assert sum(len(s.steps) for s in ep.segments) == 3
    assert ep.meta["messages"][-2:] == [
        {"role": "system", "content": ep.meta["messages"][-2]["content"]},
        {"role": "assistant", "content": "It is correct."}]
    assert episode_problems(ep, tokenizer) == []  # tokens = the recorded conversation


def test_an_agent_stopped_before_its_last_word_does_not_confess(tokenizer):
    """max_turns ends the episode on a tool's reply: no confession, the part missing, and
    the episode stays out of its group's confession statistics."""
    replies = iter([CALL, CALL, "It is correct.", "It is correct."])
    _, _, episodes = played(tokenizer, ["task.name=calculator", "task.digits=1",
                                        "agent.max_turns=1"], lambda prompt: next(replies),
                            group_size=2)
    assert all("confession" not in ep.meta for ep in episodes)
    assert all(ep.meta["missing_parts"] == ["confession"] for ep in episodes)
    assert all(sum(len(s.steps) for s in ep.segments) == 1 for ep in episodes)


def test_answer_and_confession_tokens_get_their_own_advantages(tokenizer):
    """§14: task rewards [1, 0, 1, 0], confession rewards [0, 0, 1, 1]."""
    _, _, episodes = played(tokenizer, [], lambda prompt: (
        "wrong" if PROMPT in prompt else "<answer>1</answer>"), group_size=4)
    for ep, task, conf in zip(episodes, [1.0, 0, 1, 0], [0.0, 0, 1, 1]):
        ep.rewards.update(correct=task, confession=conf)
        ep.reward = task
    batch = Batch.from_episodes(episodes, tokenizer.pad_token_id)
    adv = compute_advantages(batch, episodes, AlgoConfig(), {"correct": 1.0})
    a = 0.5 / math.sqrt(1 / 3)
    for row, (ep, task_adv, conf_adv) in enumerate(zip(episodes, [a, -a, a, -a],
                                                         [-a, -a, a, a])):
        answer, confession = ep.segments[0].steps
        torch.testing.assert_close(adv[row, answer.start:answer.end],
                                   torch.full((answer.end - answer.start,), task_adv),
                                   atol=1e-5, rtol=0)
        torch.testing.assert_close(adv[row, confession.start:confession.end],
                                   torch.full((confession.end - confession.start,), conf_adv),
                                   atol=1e-5, rtol=0)


def test_a_confession_the_judge_could_not_score_stays_out_of_the_group(tokenizer):
    """Confession rewards [0, 0, 1, missing]: the three scored ones are normalised among
    themselves (mean 1/3, sample std sqrt(1/3)); the unscored one's tokens get 0."""
    _, _, episodes = played(tokenizer, [], lambda prompt: (
        "wrong" if PROMPT in prompt else "<answer>1</answer>"), group_size=4)
    for ep, conf in zip(episodes, [0.0, 0, 1, 0]):
        ep.rewards["confession"] = conf
    episodes[3].meta["missing_parts"] = ["confession"]
    batch = Batch.from_episodes(episodes, tokenizer.pad_token_id)
    adv = compute_advantages(batch, episodes, AlgoConfig(), {"correct": 1.0})
    s = math.sqrt(1 / 3)
    for row, (ep, want) in enumerate(zip(episodes, [-1 / 3 / s, -1 / 3 / s, 2 / 3 / s, 0.0])):
        confession = ep.segments[0].steps[1]
        torch.testing.assert_close(adv[row, confession.start:confession.end],
                                   torch.full((confession.end - confession.start,), want),
                                   atol=1e-5, rtol=0)


@pytest.mark.parametrize("overrides,message", [
    (["reward.shaping=[{name: dapo_overlong, max_length: 32, cache_length: 8}]"],
     "drop reward.shaping or reward.confession"),
    (["reward.confession.judge={kind: comparison, model: m}"], "kind function or score"),
    (["reward.parts.confession={verifier: format}"], "rename the part"),
    (["algo.adv_estimator=reinforce_plus_plus"], "episode- or step-level estimator"),
    (["algo.adv_estimator=gae", "critic.enabled=true"], "episode- or step-level estimator"),
    (["algo.kl.coef=0.1", "algo.kl.placement=in_reward"], "cannot follow algo.kl.placement"),
    (["task.name=calculator", "agent.swarm={}"], "cannot follow agent.swarm"),
])
def test_confessions_that_cannot_work_are_refused(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config("configs/quickstart.yaml", [JUDGE, *overrides])


def test_an_async_run_confesses_on_every_group_it_takes(tmp_path):
    from typer.testing import CliRunner

    from posttrain.cli.app import app
    from posttrain.types import read_episodes

    out = tmp_path / "run"
    result = CliRunner().invoke(app, [
        "train", "configs/quickstart.yaml", f"out_dir={out}", JUDGE, "stages=[rl]",
        "rl.mode=async", "rl.async.chunk_tokens=8", "rl.async.partial_rollout=true",
        "rl.steps=2", "rl.prompts_per_step=2", "rl.group_size=2", "rl.save_episodes=true",
        "reward.confession.max_new_tokens=4", "eval.num_problems=2"])
    assert result.exit_code == 0, result.output
    episodes = list(read_episodes(out / "episodes.jsonl"))
    assert len(episodes) == 8 and all("confession" in e.meta for e in episodes)
    for e in episodes:
        (seg,) = e.segments
        answer, confession = seg.steps
        assert all(seg.loss_mask[confession.start:confession.end])
        assert not any(seg.loss_mask[answer.end:confession.start])
    summary = json.loads((out / "summary.json").read_text())
    assert "confession" in summary["eval_after_rl"]


def test_the_honesty_example_reads_the_first_verdict():
    from posttrain.config.extension import load_object

    judge = load_object("examples/confession/honesty.py:honest_verdict")

    class E:
        def __init__(self, text, correct):
            self.meta, self.rewards = {"confession": text}, {"correct": correct}

    assert judge([E("It is correct.", 1.0), E("Wrong, sadly", 0.0), E("Correct", 0.0),
                  E("no idea", 1.0), E("wrong but correct", 1.0)], []) == [1, 1, 0, 0, 0]



def test_sft_confessions_teach_the_form_with_verdicts_at_random():
    run = RunTasks(load_config("configs/quickstart.yaml", [JUDGE, "sft.confessions=0.5"]))
    data = run.conversations(None, 400, 0.6, "SFT", sft=True)
    ends = [c[-2:] for c in data.conversations if c[-2]["role"] == "system"]
    assert 400 * 0.5 - 4 * 10 < len(ends) < 400 * 0.5 + 4 * 10  # 4 standard deviations
    assert all(e[0]["content"] == CONFESSION_PROMPT for e in ends)
    verdicts = [e[1]["content"] for e in ends]
    assert set(verdicts) == {"My answer is correct.", "My answer is wrong."}
    with pytest.raises(ConfigError, match="set reward.confession"):
        load_config("configs/quickstart.yaml", ["sft.confessions=0.5"])
