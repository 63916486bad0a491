"""Reward components (TAU_ENV.md §9) on hand-made mock trajectories: each component can fail,
the product rule, the termination rule, NL_ASSERTION through a judge (and reported unavailable
without one), infrastructure errors, and the success threshold."""

import json

import pytest

from posttrain.envs.tau.scoring import (
    InfrastructureError,
    TauScore,
    action_matches,
    communicate_component,
    score,
)
from posttrain.envs.tau.tasks import Action, TauTask, load_tasks

MOCK = {t.id: t for t in load_tasks("mock")}
CREATED = {"task_id": "task_2", "title": "Important Meeting", "description": None,
           "status": "pending"}


def turn(name, arguments, result, call_id="c1", requestor="assistant"):
    """A tool-call message and its tool message."""
    return [{"role": requestor, "content": None, "tool_calls": [
        {"id": call_id, "name": name, "arguments": arguments, "requestor": requestor}]},
        {"role": "tool", "id": call_id, "content": json.dumps(result), "requestor": requestor,
         "error": False}]


def task(criteria, tid="t"):
    return TauTask.model_validate({"id": tid, "user_scenario": {"instructions": "x"},
                                   "evaluation_criteria": criteria})


def test_db_compares_the_replayed_state_with_the_gold_actions():
    t = MOCK["create_task_1"]  # basis DB x COMMUNICATE, nothing to communicate
    right = turn("create_task", {"user_id": "user_1", "title": "Important Meeting"}, CREATED)
    wrong = turn("create_task", {"user_id": "user_1", "title": "Meeting"},
                 {**CREATED, "title": "Meeting"})
    good = score(t, "mock", right, "user_stop")
    assert (good.reward, good.components, good.basis) == (
        1.0, {"DB": 1.0, "COMMUNICATE": 1.0}, ["DB", "COMMUNICATE"])
    assert score(t, "mock", wrong, "user_stop").components["DB"] == 0.0
    assert score(t, "mock", [], "user_stop").reward == 0.0  # did nothing
    for ended in ("max_steps", "too_many_errors", "agent_error", "max_tokens"):
        assert score(t, "mock", right, ended).reward == 0.0
    assert score(t, "mock", right, "agent_stop").reward == 1.0
    # no actions and no assertions: the database is not compared at all
    free = task({"nl_assertions": ["anything"], "reward_basis": ["DB"]})
    assert score(free, "mock", wrong, "user_stop").reward == 1.0
    assert score(task(None), "mock", wrong, "user_stop").reward == 1.0  # no criteria


def test_a_trajectory_that_does_not_replay_is_an_infrastructure_error():
    lie = turn("create_task", {"user_id": "user_1", "title": "Important Meeting"},
               {**CREATED, "task_id": "task_7"})
    with pytest.raises(InfrastructureError, match="replays to"):
        score(MOCK["create_task_1"], "mock", lie, "user_stop")


def test_env_assertions_run_on_the_replayed_state():
    t = MOCK["update_task_with_history_and_env_assertions"]
    history = t.initial_state.message_history
    done = turn("update_task_status", {"task_id": "task_2", "status": "completed"},
                {**CREATED, "title": "Project Review", "description": "Review Q4 project status",
                 "status": "completed"})
    met = score(t, "mock", [*history, *done], "user_stop")
    assert (met.reward, met.details["unmet_assertions"]) == (1.0, [])
    unmet = score(t, "mock", list(history), "user_stop")
    assert (unmet.reward, unmet.details["unmet_assertions"]) == (0.0, ["assert_task_status"])
    raising = t.model_copy(deep=True)
    raising.evaluation_criteria.env_assertions[0].arguments["task_id"] = "task_9"
    assert score(raising, "mock", [*history, *done], "user_stop").reward == 0.0


def test_communicate_is_case_insensitive_with_commas_removed_from_the_message():
    t = task({"communicate_info": ["Total 1234.50"], "reward_basis": ["COMMUNICATE"]})
    said = [{"role": "assistant", "content": "Your TOTAL 1,234.50 is due."}]
    assert communicate_component(t, said) == 1.0
    assert communicate_component(t, [{"role": "user", "content": "total 1234.50"}]) == 0.0
    with_comma = task({"communicate_info": ["1,234"], "reward_basis": ["COMMUNICATE"]})
    assert communicate_component(with_comma, [{"role": "assistant", "content": "1,234"}]) == 0.0


def test_action_matching_on_compare_args():
    gold = Action(name="update_task_status", arguments={"task_id": "t2", "status": "done"})
    assert action_matches(gold, "update_task_status", {"task_id": "t2", "status": "done"})
    assert action_matches(gold, "update_task_status", {"task_id": "t2"})  # gold-only ignored
    assert not action_matches(gold, "update_task_status",
                              {"task_id": "t2", "status": "done", "note": "x"})  # extra fails
    assert not action_matches(gold, "update_task_status", {"task_id": "t3", "status": "done"})
    assert not action_matches(gold, "create_task", {"task_id": "t2", "status": "done"})
    on_id = gold.model_copy(update={"compare_args": ["task_id"]})
    assert action_matches(on_id, "update_task_status", {"task_id": "t2", "status": "other"})
    impossible = MOCK["impossible_task_1"]  # compare_args: [] -> any transfer matches
    transfer = turn("transfer_to_human_agents", {"summary": "whatever"},
                    "Transfer successful", requestor="user")  # requestor is ignored
    result = score(impossible, "mock", transfer, "user_stop")
    assert result.components == {"DB": 1.0, "ACTION": 1.0}
    missed = score(impossible, "mock", [], "user_stop")
    assert missed.components["ACTION"] == 0.0 and missed.details["unmatched_actions"] == [
        "transfer_1"]


def judge_saying(*flags, raw=None):
    def judge(conversations):
        (conversation,) = conversations
        assert "Expected outcomes:\n- " in conversation[-1]["content"]
        return [raw if raw is not None else "Verdict: " + json.dumps({"results": [
            {"expectedOutcome": "o", "reasoning": "r", "metExpectation": f} for f in flags]})]
    return judge


def test_nl_assertions_need_a_judge_and_multiply_into_the_reward():
    t = task({"actions": [], "nl_assertions": ["a", "b"], "reward_basis": ["DB", "NL_ASSERTION"]})
    said = [{"role": "assistant", "content": "Done."}]
    both = score(t, "mock", said, "user_stop", judge=judge_saying(True, True))
    assert (both.reward, both.components) == (1.0, {"DB": 1.0, "NL_ASSERTION": 1.0})
    assert score(t, "mock", said, "user_stop", judge=judge_saying(True, False)).reward == 0.0
    without = score(t, "mock", said, "user_stop")
    assert (without.reward, without.basis, without.unavailable) == (1.0, ["DB"],
                                                                    ["NL_ASSERTION"])
    only = score(t, "mock", said, "user_stop", basis=["NL_ASSERTION"],
                 judge=judge_saying(False, False))
    assert (only.reward, only.basis) == (0.0, ["NL_ASSERTION"])
    unscored = score(t, "mock", said, "user_stop", basis=["NL_ASSERTION"])  # no judge
    assert (unscored.reward, unscored.basis, unscored.unavailable) == (0.0, [],
                                                                       ["NL_ASSERTION"])
    for bad in (judge_saying(raw="I think so."), judge_saying(True)):
        with pytest.raises(InfrastructureError):
            score(t, "mock", said, "user_stop", judge=bad)


def test_success_threshold():
    assert TauScore(1 - 1e-7).success and not TauScore(1 - 1e-5).success
