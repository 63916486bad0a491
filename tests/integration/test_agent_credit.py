"""Credit over agent episodes: group estimators count episodes (not segments), ``gigpo`` gives
each step its own advantage, ``tree_grpo`` scores branches of a tree rollout, ``behaviour_reg``
reshapes the advantages of malformed-call tokens."""

import pytest
import torch
from agent_helpers import CALL, REWARD, TASK, ScriptedEngine, add

from posttrain.algos import get
from posttrain.config import AlgoConfig, ConfigError, LoopLimits, load_config
from posttrain.config.sections.rl import BehaviourRegConfig
from posttrain.harness import AgentLoop, ToolRegistry, episode_problems, run_tree
from posttrain.train.rl_update import compute_advantages
from posttrain.types import Batch, Episode, SamplingParams, Segment, StepSpan


def segment(step_lengths, context=2):
    """A segment of ``context`` prompt tokens then one trainable step per length."""
    n = sum(step_lengths)
    spans, start = [], context
    for k in step_lengths:
        spans.append(StepSpan(start, start + k))
        start += k
    return Segment([1] * (context + n), [0] * context + [1] * n, [0.0] * (context + n),
                   [-1] * context + [0] * n, spans)


def episode(reward, segments, group="g", **meta):
    return Episode(segments, rewards={"correct": reward}, reward=reward, group_id=group,
                   meta=meta)


def advantages(episodes, **algo):
    batch = Batch.from_episodes(episodes, 0)
    return batch, compute_advantages(batch, episodes, AlgoConfig(**algo), {"correct": 1.0})


def test_segments_share_the_episode_advantage_and_groups_count_episodes():
    # ALGORITHMS.md §11: segments of 100, 50 and 30 completion tokens, A = .5 -> 180 tokens
    eps = [episode(1.0, [segment([100]), segment([50]), segment([30])]),
           episode(0.0, [segment([20])])]
    batch, adv = advantages(eps, adv_estimator="dr_grpo")
    assert batch.loss_mask[:3].sum() == 180 and (adv[:3][batch.loss_mask[:3] > 0] == .5).all()
    assert (adv[3][batch.loss_mask[3] > 0] == -.5).all()
    _, adv = advantages(eps, adv_estimator="grpo")  # G = 2 episodes, not 4 rows
    expected = get("advantage", "grpo")(rewards=torch.tensor([1.0, 0.0]),
                                        group_ids=torch.tensor([0, 0]), mask=torch.ones(2, 1))
    assert adv[0, 2] == pytest.approx(float(expected[0, 0]))
    assert adv[2, 2] == pytest.approx(float(expected[0, 0]))


def test_gigpo_gives_each_step_the_worked_example_advantage():
    # ALGORITHMS.md §1 gigpo: gamma .9, tau1 s0 -> s1 -> success, tau2 s0 -> s1 -> fail,
    # tau3 s0 -> s4 -> s5 -> success
    eps = [episode(1.0, [segment([2, 3])], state_keys=["s0", "s1"]),
           episode(0.0, [segment([4, 1])], state_keys=["s0", "s1"]),
           episode(1.0, [segment([1, 2]), segment([2])], state_keys=["s0", "s4", "s5"])]
    batch, adv = advantages(eps, adv_estimator="gigpo", gamma=0.9)
    got = [[float(adv[r, s.start]) for s in batch_seg.steps]
           for r, batch_seg in enumerate(seg for ep in eps for seg in ep.segments)]
    expected = [[1.2431, 1.2845], [-2.3046, -1.8618], [1.0615, .57735], [.57735]]
    for row, want in zip(got, expected):  # the worked example to 4 decimals (+-5e-5)
        assert row == pytest.approx(want, abs=1e-4)
    assert (adv * (1 - batch.loss_mask)).abs().sum() == 0


def test_tree_grpo_matches_the_worked_example():
    rewards, trees = [1, 0, 1, 0, 0, 1], ["t1"] * 3 + ["t2"] * 3
    eps = [episode(float(r), [segment([3])], tree_id=t) for r, t in zip(rewards, trees)]
    _, adv = advantages(eps, adv_estimator="tree_grpo")
    assert adv[:, 2].tolist() == pytest.approx(  # the worked example to 4 decimals (+-5e-5)
        [1.4902, -2.0676, 1.4902, -1.4902, -1.4902, 2.0676], abs=1e-4)


def test_behaviour_reg_blames_malformed_steps():
    eps = [episode(1.0, [segment([2, 2])], step_errors=[True, False]),
           episode(0.0, [segment([2, 2])], step_errors=[True, False])]
    reg = BehaviourRegConfig(k_err=2.0, up=0.5, down=0.25)
    _, plain = advantages(eps, adv_estimator="dr_grpo")
    _, adv = advantages(eps, adv_estimator="dr_grpo", behaviour_reg=reg)
    assert plain[:, 2:6].tolist() == [[.5] * 4, [-.5] * 4]
    assert adv[:, 2:6].tolist() == [[0, 0, .75, .75], [-1, -1, -.375, -.375]]


def test_episodes_of_the_loop_carry_malformed_step_flags(tokenizer):
    engine = ScriptedEngine(tokenizer, ['<tool_call>{"name": "nope"}</tool_call>', CALL,
                                        "<answer>5</answer>"])
    loop = AgentLoop(engine, tokenizer, ToolRegistry([add]), state_key=len)
    ep = loop.run(TASK, SamplingParams(max_new_tokens=64), REWARD, "5")
    assert ep.meta["step_errors"] == [True, False, False] and ep.meta["state_keys"] == [1, 3, 5]


def tree_replies(answers):
    """Call ``add`` first; after an observation answer from the cycle ``answers``."""
    state = {"k": 0}

    def reply(prompt):
        if "<|im_start|>tool" not in prompt:
            return CALL
        state["k"] += 1
        return answers[state["k"] % len(answers)]

    return reply


def test_tree_rollout_branches_from_intermediate_turns(tokenizer):
    engine = ScriptedEngine(tokenizer, tree_replies(["<answer>5</answer>", "<answer>4</answer>"]))
    loop = AgentLoop(engine, tokenizer, ToolRegistry([add]))
    items = [(TASK, "5", "g0")] * 2  # M = 2 backbones
    eps = run_tree(loop, items, SamplingParams(max_new_tokens=64, seed=1), REWARD, branches=2,
                   rounds=1)
    assert len(eps) == 2 * (1 * 2 + 1)
    assert [e.meta["tree_id"] for e in eps] == ["g0/0"] * 3 + ["g0/1"] * 3
    backbone, branch = eps[0], eps[1]
    assert backbone.meta["branched_at"] is None and branch.meta["branched_at"] == 1
    b, p = branch.segments[0], backbone.segments[0]
    cut = p.steps[1].start  # the state before step 1: task, call, observation
    assert b.token_ids[:cut] == p.token_ids[:cut] and sum(b.loss_mask[:cut]) == 0
    trained = tokenizer.decode([t for t, m in zip(b.token_ids, b.loss_mask) if m])
    assert trained in ("<answer>5</answer><|im_end|>", "<answer>4</answer><|im_end|>")
    assert {e.reward for e in eps} == {0.0, 1.0}
    assert all(episode_problems(e, tokenizer) == [] for e in eps)
    batch = Batch.from_episodes(eps, tokenizer.pad_token_id)
    adv = compute_advantages(batch, eps, AlgoConfig(adv_estimator="tree_grpo"), {"correct": 1})
    assert adv.abs().sum() > 0


def test_a_tree_without_intermediate_turns_grows_from_the_root(tokenizer):
    engine = ScriptedEngine(tokenizer, lambda prompt: "<answer>5</answer>")
    loop = AgentLoop(engine, tokenizer, ToolRegistry([add]))
    eps = run_tree(loop, [(TASK, "5", "g")], SamplingParams(max_new_tokens=64), REWARD, 2, 2)
    assert len(eps) == 5 and all(e.meta["branched_at"] is None for e in eps)
    assert all(e.segments[0].num_trainable > 0 for e in eps)


@pytest.mark.parametrize("overrides,message", [
    (["algo.adv_estimator=gigpo"], "gigpo acts on agent episodes"),
    (["algo.behaviour_reg.k_err=2"], "behaviour_reg acts on agent episodes"),
    (["agent.compaction.strategy=summary"], "agent.compaction acts on agent episodes"),
    (["task.name=reasoning_gym", "task.dataset=chain_sum",
      "reward.parts={correct: {verifier: reasoning_gym}}", "agent.guard.on_hack=block"],
     r"agent.guard acts on agent episodes \(tool steps\); task.name=reasoning_gym is"),
    (["task.name=search", "task.digits=3"], "task.digits: applies to"),
    (["task.name=calculator", "task.submissions.penalty=0.5"], "task.submissions: applies to"),
    (["task.name=code", "reward.parts={accuracy: {verifier: env}}",
      "reward.accuracy_part=accuracy"],
     "the code environment scores only"),
    (["agent.compaction.keep_last=-1"], "must be >= 0"),
    (["task.name=calculator", "algo.adv_estimator=tree_grpo"], "tree_grpo and agent.tree go"),
    (["task.name=calculator", "agent.tree.branches=2"], "tree_grpo and agent.tree go"),
    (["task.name=calculator", "algo.adv_estimator=tree_grpo", "agent.tree.branches=2",
      "rl.group_size=8"], "multiple of agent.tree.rounds"),
    (["task.name=calculator", "algo.adv_estimator=gigpo", "algo.lam=0.9"], "algo.lam only"),
])
def test_config_refuses_agent_credit_that_cannot_act(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)


def test_config_accepts_agent_credit_on_tool_tasks():
    cfg = load_config(None, ["task.name=calculator", "algo.adv_estimator=tree_grpo",
                             "agent.tree.branches=1", "rl.group_size=8",
                             "algo.behaviour_reg.k_err=1.5"])
    assert cfg.agent.tree.per_backbone == 2 and cfg.algo.behaviour_reg.k_err == 1.5
    assert cfg.agent.limits() == LoopLimits(max_turns=4, max_tokens=512)
