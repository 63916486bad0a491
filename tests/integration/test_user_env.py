"""A user's environment class by dotted path (``task.env``): constructed per episode with the
task (and the dataset row), it opens the episode with ``reset(task)``, answers every turn
without tool calls with ``step``, adds its own tools, reports reward parts scored by verifier
``env``, and is closed; a class that cannot work is a config error naming the key."""

import json
from pathlib import Path

import pytest
from agent_helpers import ScriptedEngine
from typer.testing import CliRunner

from posttrain.cli.app import app
from posttrain.config import ConfigError, load_config
from posttrain.harness import episode_problems
from posttrain.recipes.run_tasks import rollout_function, task_family
from posttrain.rewards import RewardFunction
from posttrain.types import SamplingParams

ENVS = Path(__file__).with_name("user_envs.py")
SOLVED = "reward.parts.solved={verifier: env, weight: 1.0}"


def config(env, *overrides):
    return load_config("configs/quickstart.yaml",
                       ["stages=[rl]", f"task.env={ENVS}:{env}", *overrides])


def guess_class():
    """The class ``task.env`` loads (the module of a file path is loaded once, by path)."""
    from posttrain.config.extension import load_object

    return load_object(f"{ENVS}:Guess")


def play(tokenizer, cfg, replies):
    family = task_family(cfg)
    tasks, tools, env_factory = family.tasks, family.tools, family.env_factory
    rollout = rollout_function(cfg, tools, env_factory)
    task = tasks.eval_set(1)[0]
    engine = ScriptedEngine(tokenizer, replies(task.reference))
    reward = RewardFunction.of(cfg.reward)
    guess_class().made.clear()
    (ep,) = rollout(engine, tokenizer, [task], reward, SamplingParams(max_new_tokens=64))
    return task, [tokenizer.decode(p) for p in engine.prompts], ep


def test_an_episode_plays_against_the_users_environment(tokenizer):
    hint = '<tool_call>{"name": "hint", "arguments": {}}</tool_call>'
    task, prompts, ep = play(tokenizer, config("Guess", SOLVED), lambda ref: [
        "<answer>-1</answer>", hint, f"<answer>{ref}</answer>"])
    question = task.messages()[-1]["content"]
    assert prompts[0].count(question) == 1 and "Guess; I say higher or lower." in prompts[0]
    assert "Tools: hint()" in prompts[0]  # the environment's own tool is offered
    assert "<|im_start|>user\nhigher<|im_end|>" in prompts[1]  # the step's observation
    parity = "even" if int(task.reference) % 2 == 0 else "odd"
    assert f"<|im_start|>tool\n{parity}<|im_end|>" in prompts[2]
    assert ep.finish_reason == "answer" and ep.meta["turns"] == 3
    assert ep.rewards["solved"] == 1.0 and ep.rewards["correct"] == 1.0  # env part + verifier
    assert ep.meta["env"]["reward_parts"] == {"solved": 1.0, "guesses": 2.0}
    assert ep.meta["env"]["steps"] == 2
    assert ep.meta["env"]["info"] == {"last": int(task.reference)}
    assert guess_class().made == [[task.reference, {}, True]]  # one instance, no row, closed
    assert episode_problems(ep, tokenizer) == []
    assert replayed(ep.to_dict()) == (2, {"guesses": 2.0, "solved": 1.0})  # the replay's rule


def test_an_episode_the_environment_never_ends_scores_zero_on_its_parts(tokenizer):
    _, _, ep = play(tokenizer, config("Guess", SOLVED, "agent.max_turns=2"),
                    lambda ref: ["<answer>-1</answer>"] * 2)
    assert ep.finish_reason == "max_turns" and ep.rewards["solved"] == 0.0


def test_a_finished_episode_must_report_the_env_parts(tokenizer):
    with pytest.raises(ValueError, match=r"reward parts \['solved'\] \(verifier env\) were "
                                         "never reported"):
        play(tokenizer, config("Silent", SOLVED), lambda ref: ["<answer>1</answer>"])


def test_an_unusable_opening_names_the_environment(tokenizer):
    with pytest.raises(TypeError, match=r"task.env .*BadReset: reset\(task\) returned "
                                        "'What is 2\\+3\\?', not a non-empty list"):
        play(tokenizer, config("BadReset"), lambda ref: ["<answer>1</answer>"])


@pytest.mark.parametrize("override,key,says", [
    ("task.env=no_such_pkg.envs:Env", "task.env", "cannot import 'no_such_pkg.envs'"),
    (f"task.env={ENVS}:Missing", "task.env", "has no attribute 'Missing'"),
    (f"task.env={ENVS}:NoStep", "task.env", "is not an environment class"),
    (f"task.env={ENVS}:TwoTasks", "task.env",
     "its constructor: missing a required argument: 'other'"),
    (f"task.env={ENVS}:Silent task.name=code", "task",
     "task.env: task.name=code plays against its own environment"),
    (f"task.env={ENVS}:Silent task.rollout=examples/extensions/reverse.py:logged_rollout",
     "task", "task.env is played by the agent loop, which task.rollout replaces"),
])
def test_an_environment_that_cannot_work_is_a_config_error_naming_the_key(override, key, says):
    with pytest.raises(ConfigError) as err:
        load_config("configs/quickstart.yaml", ["stages=[rl]", *override.split(" ")])
    text = " ".join(str(err.value).split())
    assert f"{key}:" in text and says in text, text


def test_tree_rollouts_cannot_branch_the_environment():
    with pytest.raises(ConfigError, match="tree rollouts cannot branch"):
        config("Guess", "algo.adv_estimator=tree_grpo", "agent.tree={branches: 1, rounds: 1}",
               "rl.group_size=4")


def test_the_tiny_model_trains_and_evaluates_against_the_environment(tmp_path):
    out = tmp_path / "run"
    result = CliRunner().invoke(app, [
        "train", "configs/quickstart.yaml", f"out_dir={out}", "stages=[rl]",
        "model.preset=nano", f"task.env={ENVS}:Guess", SOLVED, "agent.max_turns=2",
        "rl.steps=1", "rl.prompts_per_step=2", "rl.group_size=2", "eval.num_problems=2",
        "rl.save_episodes=true"])
    assert result.exit_code == 0, result.output
    episodes = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert len(episodes) == 4
    for e in episodes:
        assert e["meta"]["env"]["env"] == f"{ENVS}:Guess"
        assert any(m["content"] == "Guess; I say higher or lower."
                   for m in e["meta"]["messages"])
        steps, parts = replayed(e)
        assert e["meta"]["env"]["steps"] == steps and e["meta"]["env"]["reward_parts"] == parts
        assert e["rewards"]["solved"] == parts.get("solved", 0.0)  # unfinished: 0
    summary = json.loads((out / "summary.json").read_text())
    assert "solved" in summary["eval_after_rl"]


def replayed(episode):
    """The episode's actions replayed on a fresh ``Guess``: every assistant turn without tool
    calls (no tool result follows it) that the environment answered (a message follows: the
    observation ``step`` returns) or that ended the episode (``answer``); a last turn cut off
    (``max_tokens``, ``max_turns``) never reached it. Returns the steps and the summed reward
    parts."""
    from types import SimpleNamespace

    messages = episode["meta"]["messages"]
    env = guess_class()(SimpleNamespace(reference=episode["meta"]["reference"]), {})
    steps, parts = 0, {}
    for i, m in enumerate(messages):
        last = i + 1 == len(messages)
        if m["role"] != "assistant" or (last and episode["finish_reason"] != "answer") or (
                not last and messages[i + 1]["role"] == "tool"):
            continue
        result = env.step(m["content"])
        steps += 1
        for k, v in result.reward_parts.items():
            parts[k] = parts.get(k, 0.0) + v
        assert result.done == last and (last or messages[i + 1] == result.observation[0])
    return steps, parts
