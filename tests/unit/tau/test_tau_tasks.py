"""Task files and initial states (TAU_ENV.md §2, §9.1): the shipped task sets and splits, the
user scenario's rendering, initialisation data / actions / message history applied to a fresh
environment, and the strict replay that refuses a trajectory it cannot reproduce."""

from collections import Counter

import pytest

from posttrain.envs.tau.environment import ReplayMismatch, TauEnvironment, TauSetupError, build
from posttrain.envs.tau.tasks import TauTask, load_splits, load_tasks

MOCK = {t.id: t for t in load_tasks("mock")}


def test_task_sets_splits_and_bases_are_the_specified_ones():
    retail, telecom = load_tasks("retail"), load_tasks("telecom")
    assert (len(MOCK), len(retail), len(telecom)) == (10, 114, 20)
    splits = load_splits("retail", retail)
    assert {k: len(v) for k, v in splits.items()} == {"base": 114, "train": 74, "test": 40}
    assert set(splits["train"]) | set(splits["test"]) == {t.id for t in retail}
    assert list(load_splits("telecom", telecom)) == ["base"]
    bases = Counter(tuple(t.evaluation_criteria.reward_basis) for t in retail)
    assert bases == {("DB", "NL_ASSERTION"): 112, ("DB",): 2}
    assert sum(bool(t.evaluation_criteria.communicate_info) for t in retail) == 36
    assert sum(bool(t.evaluation_criteria.nl_assertions) for t in retail) == 40
    assert Counter(tuple(t.evaluation_criteria.reward_basis) for t in telecom) == {
        ("ENV_ASSERTION",): 18, ("ENV_ASSERTION", "ACTION"): 2}
    assert MOCK["create_task_1"].evaluation_criteria.reward_basis == ["DB", "COMMUNICATE"]
    with pytest.raises(ValueError, match="unknown tau domain 'airline'"):
        load_tasks("airline")


def test_scenario_text_renders_persona_and_structured_instructions():
    task = TauTask.model_validate({"id": "x", "user_scenario": {
        "persona": "Calm.", "instructions": {
            "domain": "retail", "reason_for_call": "A refund.", "known_info": "Zip 12345.",
            "task_instructions": "Be brief."}}})
    assert task.scenario_text() == (
        "Persona:\n\tCalm.\nInstructions:\nDomain:\n\tretail\nReason for call:\n\tA refund.\n"
        "Known info:\n\tZip 12345.\nTask instructions:\n\tBe brief.")
    plain = TauTask.model_validate({"id": "y", "user_scenario": {"instructions": "Say hi."}})
    assert plain.scenario_text() == "Instructions:\n\tSay hi."


def test_initialization_data_actions_and_history_build_the_same_state():
    pristine = TauEnvironment("mock")
    via_data = build(MOCK["update_task_with_initialization_data"], "mock")
    via_action = build(MOCK["update_task_with_initialization_actions"], "mock")
    via_history = build(MOCK["update_task_with_history_and_env_assertions"], "mock")
    for env in (via_data, via_action, via_history):
        assert env.agent_db.users["user_1"].tasks == ["task_1", "task_2"]
        assert env.agent_db.tasks["task_2"].title == "Project Review"
        assert env.hashes() == via_data.hashes() != pristine.hashes()
    without_history = build(MOCK["update_task_with_history_and_env_assertions"], "mock",
                            history=False)
    assert without_history.hashes() == pristine.hashes()
    notified = build(MOCK["update_task_with_user_tools"], "mock")
    assert notified.user_db.notifications["notif_1"].status == "unread"
    assert pristine.agent_db.tasks.keys() == {"task_1"}  # builds never touch the pristine DB


def test_failing_initial_state_is_a_setup_error():
    task = MOCK["update_task_with_initialization_actions"].model_copy(deep=True)
    task.initial_state.initialization_actions[0].arguments["user_id"] = "user_9"
    with pytest.raises(TauSetupError, match="User user_9 not found"):
        build(task, "mock")


def test_replay_is_strict():
    call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "name": "create_task", "arguments": {"user_id": "user_1", "title": "T"},
         "requestor": "assistant"}]}
    result = ('{"task_id": "task_2", "title": "T", "description": null, '
              '"status": "pending"}')
    env = TauEnvironment("mock")
    env.replay([call, {"role": "tool", "id": "c1", "content": result}])
    assert "task_2" in env.agent_db.tasks
    with pytest.raises(ReplayMismatch, match="replays to"):
        TauEnvironment("mock").replay([call, {"role": "tool", "id": "c1",
                                              "content": result.replace('"T"', '"U"')}])
    with pytest.raises(ReplayMismatch, match="not followed by their tool messages"):
        TauEnvironment("mock").replay([call, {"role": "tool", "id": "c9", "content": result}])
    read = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "r", "name": "get_users", "arguments": {}, "requestor": "assistant"},
        {"id": "u", "name": "no_such_tool", "arguments": {}, "requestor": "assistant"}]}
    quiet = TauEnvironment("mock")
    quiet.replay([read, {"role": "tool", "id": "r", "content": "anything"},
                  {"role": "tool", "id": "u", "content": "anything"}])  # reads/unknown skip
    assert quiet.hashes() == TauEnvironment("mock").hashes()
