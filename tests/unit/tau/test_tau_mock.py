"""tau-bench foundations (TAU_ENV.md §1, §4): the canonical database form reproduces the
spec's pristine hashes for mock and retail; the mock tools through the §1.1 executor, with
their results serialized per §1.2 and their failures as "Error: ..." messages."""

import json

from posttrain.envs.tau.db import data_dir, db_hash, deep_merge, load_db, merged
from posttrain.envs.tau.domains.mock import MockTools, MockUserTools, pristine
from posttrain.envs.tau.domains.retail_db import RetailDB
from posttrain.envs.tau.toolkit import execute, serialize

PRISTINE = {
    "mock": "107f83a70b7bf4f616e283b0b0b8451346fe7681173398d4498a1ec15c5fdfc6",
    "mock_user": "4cf3d22eed6962ba202c8738421d8a2286d2b5a0cad1372922c928be09ccbfac",
    "retail": "b25c9cb211f5efcaee5dd646054a73c4a9f43f4f5acc32c10713cd9f9ac20e9c",
}


def test_pristine_hashes_of_the_spec_are_reproduced():
    agent, user = pristine()
    assert db_hash(agent) == PRISTINE["mock"] and db_hash(user) == PRISTINE["mock_user"]
    assert db_hash(load_db(RetailDB, data_dir("retail") / "db.json")) == PRISTINE["retail"]
    assert db_hash(None) is None
    assert (data_dir("retail").parent / "LICENSE").read_text().startswith("MIT")


def test_deep_merge_merges_objects_and_replaces_lists():
    assert deep_merge({"a": {"b": 1, "c": [1]}}, {"a": {"c": [2], "d": 3}}) == {
        "a": {"b": 1, "c": [2], "d": 3}}
    agent, _ = pristine()
    data = {"tasks": {"task_2": {"task_id": "task_2", "title": "T2", "status": "pending"}},
            "users": {"user_1": {"tasks": ["task_1", "task_2"]}}}
    grown = merged(agent, data)
    assert grown.tasks["task_2"].description is None  # defaults filled
    assert grown.users["user_1"].name == "Test User" and db_hash(grown) != PRISTINE["mock"]


def test_mock_tools_through_the_executor():
    agent, user = pristine()
    tools = {"assistant": MockTools(agent).toolkit(), "user": MockUserTools(user).toolkit()}
    made = execute(tools, "c1", "create_task", {"user_id": "user_1", "title": "Write"},
                   "assistant")
    assert not made.error and json.loads(made.content) == {
        "task_id": "task_2", "title": "Write", "description": None, "status": "pending"}
    assert agent.users["user_1"].tasks == ["task_1", "task_2"]
    assert execute(tools, "c2", "create_task", {"user_id": "nobody", "title": "x"},
                   "assistant").content == "Error: User nobody not found"
    assert execute(tools, "c3", "delete_all", {}, "assistant").content == (
        "Error: Tool 'delete_all' not found.")
    bad = execute(tools, "c4", "get_users", {"extra": 1}, "assistant")
    assert bad.error and bad.content.startswith("Error: ")
    done = execute(tools, "c5", "dismiss_notification", {"notification_id": "notif_1"}, "user")
    assert done.content == "Notification notif_1 dismissed" and done.requestor == "user"
    assert db_hash(user) != PRISTINE["mock_user"]
    no_user = execute({"assistant": tools["assistant"], "user": None}, "c6",
                      "check_notifications", {}, "user")
    assert no_user.content == "Error: User tools not available"


def test_serialization_of_bare_values_and_records():
    agent, _ = pristine()
    assert serialize("as is") == "as is"
    assert serialize(4.0) == '"4.0"' and serialize(True) == '"True"'  # converted, then dumped
    assert serialize({"charge": 4.0, "ok": [1]}) == '{"charge": "4.0", "ok": ["1"]}'
    record = json.loads(serialize(agent.tasks["task_1"]))
    assert list(record) == ["task_id", "title", "description", "status"]
