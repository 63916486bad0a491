"""The retail tools (TAU_ENV.md §5) on the shipped database: every gold write action of the
114 tasks runs (the two that fail do so by the spec's checks), task 20 ends with the spec's
four items at 261.11, and the tools' error messages and formats."""

import json

import pytest

from posttrain.envs.tau.db import data_dir, db_hash
from posttrain.envs.tau.domains.retail import RetailTools, pristine
from posttrain.envs.tau.environment import TauEnvironment
from posttrain.envs.tau.environment import pristine as pristine_db
from posttrain.envs.tau.toolkit import execute

RETAIL = "b25c9cb211f5efcaee5dd646054a73c4a9f43f4f5acc32c10713cd9f9ac20e9c"


@pytest.fixture(scope="module")
def base():
    return pristine()


@pytest.mark.slow
def test_gold_write_actions_of_every_task(base):
    tasks = json.loads((data_dir("retail") / "tasks.json").read_text())
    failed, writes = [], 0
    for task in tasks:
        env = TauEnvironment("retail")  # its own copy of the database
        db, toolkit = env.agent_db, env.toolkits["assistant"]
        for action in task["evaluation_criteria"]["actions"] or []:
            message = execute({"assistant": toolkit}, action["action_id"], action["name"],
                              action["arguments"], "assistant")
            if toolkit.tools[action["name"]].mutates_state:
                writes += 1
                if message.error:
                    failed.append((task["id"], message.content))
        if task["id"] == "20":
            modified = [o for o in db.orders.values() if o.status == "pending (item modified)"]
            assert [[i.price for i in o.items] for o in modified] == [[261.11] * 4]
    assert writes == 176
    assert failed == [
        ("64", "Error: Non-delivered order cannot be exchanged"),  # the order is pending
        ("105", "Error: Insufficient gift card balance to pay for the price difference")]
    assert db_hash(base) == db_hash(pristine_db("retail")[0]) == RETAIL  # copies only


def test_retail_messages_and_formats(base):
    db = base.model_copy(deep=True)
    tools = {"assistant": RetailTools(db).toolkit()}

    def call(name, **arguments):
        return execute(tools, "c", name, arguments, "assistant").content

    assert call("calculate", expression="(2 + 4) / 3") == "2.0"
    assert call("calculate", expression="2 ** 3; import os") == (
        "Error: Invalid characters in expression")
    assert call("calculate", expression="1 / 0") == "Error: division by zero"
    types = json.loads(call("list_all_product_types"))
    assert list(types) == sorted(types) and len(types) == 50
    assert call("get_order_details", order_id="#nope") == "Error: Order not found"
    assert call("get_item_details", item_id="0") == "Error: Item not found"
    assert call("find_user_id_by_email", email="SOFIA.LI7352@example.com") == "sofia_li_9219"
    order = next(o for o in db.orders.values() if o.status == "delivered")
    assert call("cancel_pending_order", order_id=order.order_id, reason="no longer needed") == (
        "Error: Non-pending order cannot be cancelled")
    pending = next(o for o in db.orders.values() if o.status == "pending")
    assert call("cancel_pending_order", order_id=pending.order_id, reason="bored") == (
        "Error: Invalid reason")
    done = json.loads(call("cancel_pending_order", order_id=pending.order_id,
                           reason="ordered by mistake"))
    assert done["status"] == "cancelled" and done["payment_history"][-1]["transaction_type"] == (
        "refund")
    assert list(done)[-1] == "return_payment_method_id"  # every declared field, in order
