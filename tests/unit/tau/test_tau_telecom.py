"""The telecom domain (TAU_ENV.md §6): pristine hashes; agent and user tools with hand-checked
outputs through the §1.1 executor; the sync hook; and the 20 small tasks' gold actions
replayed live (0 failing calls, every env assertion met), while the gold path without sync
differs from the live one on exactly the spec's 4 tasks."""

import json

import pytest

from posttrain.envs.tau.db import db_hash
from posttrain.envs.tau.domains.telecom import TelecomTools, policy, pristine, sync
from posttrain.envs.tau.domains.telecom_user import TelecomUserTools
from posttrain.envs.tau.environment import build
from posttrain.envs.tau.gold import gold_trajectory
from posttrain.envs.tau.scoring import env_assertion_component, gold_environment
from posttrain.envs.tau.tasks import load_tasks
from posttrain.envs.tau.toolkit import READ, WRITE, execute

AGENT = "304cf5ef059852e117ea801ab9a5efc24c9713ec887679dc2e30acceb4b6742d"
USER = "e1f3a8637388808221228ff3f87294444e6b64caf721f5eb243a85d0a9380b28"
TASKS = load_tasks("telecom")
BAR = "📶⁴ Excellent | 5G | 📱 Data Enabled | 🔋 80%"


class Env:
    """A fresh telecom environment whose calls go through the executor with sync."""

    def __init__(self, phone: str | None = "555-123-2002"):
        self.agent, self.user = pristine()
        self.kits = {"assistant": TelecomTools(self.agent).toolkit(),
                     "user": TelecomUserTools(self.user).toolkit()}
        if phone:
            self.helper("user", "set_user_info", name="John Smith", phone_number=phone)
            sync(self.agent, self.user)

    def call(self, tool, requestor="assistant", /, **arguments):
        message = execute(self.kits, "c", tool, arguments, requestor,
                          lambda: sync(self.agent, self.user))
        return message.content

    def user_call(self, tool, /, **arguments):
        return self.call(tool, "user", **arguments)

    def helper(self, env_type, func, /, **arguments):
        return self.kits[env_type].helpers[func](**arguments)


def test_pristine_hashes_toolkits_and_policy():
    agent, user = pristine()
    assert db_hash(agent) == AGENT and db_hash(user) == USER
    env = Env(phone=None)
    agent_tools, user_tools = env.kits["assistant"].tools, env.kits["user"].tools
    assert len(agent_tools) == 13 and len(user_tools) == 30
    assert sum(s.kind == WRITE for s in agent_tools.values()) == 6
    assert sum(s.kind == READ for s in user_tools.values()) == 15
    assert agent_tools["transfer_to_human_agents"].kind == "generic"
    text = policy()
    assert text.startswith("<main_policy>\n# Telecom Agent Policy")
    assert "</main_policy>\n<tech_support_policy>\n" in text
    assert text.endswith("\n</tech_support_policy>")


def test_agent_lookups():
    env = Env(phone=None)
    assert json.loads(env.call("get_customer_by_phone", phone_number="555-123-2001"))[
        "customer_id"] == "C1001"  # a line's number
    assert env.call("get_customer_by_phone", phone_number="1") == (
        "Error: Customer with phone number 1 not found")
    found = json.loads(env.call("get_customer_by_name", full_name="john SMITH", dob="1985-06-15"))
    assert [c["customer_id"] for c in found] == ["C1001"]
    assert found[0]["created_at"] == "2025-01-15 10:30:00"
    assert found[0]["last_extension_date"] is None
    assert env.call("get_customer_by_name", full_name="John Smith", dob="1985-6-15") == "[]"
    assert env.call("get_details_by_id", id="X1") == "Error: Unknown ID format or type: X1"
    assert env.call("get_details_by_id", id="P9") == "Error: Plan with ID P9 not found"
    plan = json.loads(env.call("get_details_by_id", id="P1001"))
    assert list(plan) == ["plan_id", "name", "data_limit_gb", "price_per_month",
                          "data_refueling_price_per_gb"]
    assert '"activation_date": "2025-01-20 14:30:00"' in env.call("get_details_by_id", id="D1001")
    bills = json.loads(env.call("get_bills_for_customer", customer_id="C1001", limit=2))
    assert [b["bill_id"] for b in bills] == ["B1003", "B1002"]
    assert json.loads(env.call("get_data_usage", customer_id="C1001", line_id="L1002")) == {
        "line_id": "L1002", "data_used_gb": "8.7", "data_limit_gb": "15.0",
        "data_refueling_gb": "0.0", "cycle_end_date": "2025-02-28"}
    assert env.call("get_data_usage", customer_id="C1001", line_id="L1004") == (
        "Error: Line L1004 not found for customer C1001")


def test_agent_writes():
    env = Env(phone=None)
    assert env.call("suspend_line", customer_id="C1001", line_id="L1003", reason="x") == (
        "Error: Line must be active to suspend")
    assert env.call("resume_line", customer_id="C1001", line_id="L1001") == (
        "Error: Line must be suspended to resume")
    done = json.loads(env.call("suspend_line", customer_id="C1001", line_id="L1001",
                               reason="travel"))
    assert done["message"] == "Line suspended successfully. $5/month holding fee will apply."
    assert done["line"]["status"] == "Suspended"
    assert done["line"]["suspension_start_date"] == "2025-02-25"
    assert done["line"]["data_used_gb"] == 3.2  # numbers stay numbers inside records
    assert env.call("enable_roaming", customer_id="C1001", line_id="L1002") == (
        "Roaming was already enabled")
    assert env.call("disable_roaming", customer_id="C1001", line_id="L1002") == (
        "Roaming disabled successfully")
    assert env.call("refuel_data", customer_id="C1001", line_id="L1002", gb_amount=0) == (
        "Error: Refuel amount must be positive")
    assert env.call("refuel_data", customer_id="C1001", line_id="L1002", gb_amount=2.0) == (
        '{"message": "Successfully added 2.0 GB of data for line L1002 for $4.00", '
        '"new_data_refueling_gb": "2.0", "charge": "4.0"}')
    out = json.loads(env.call("refuel_data", customer_id="C1001", line_id="L1001", gb_amount=1))
    assert out["message"].startswith("Successfully added 1 GB") and out["charge"] == "5.0"
    draft = next(b for b in env.agent.bills if b.bill_id == "B1003")
    assert [(i.description, i.amount, str(i.date), i.item_type) for i in draft.line_items] == [
        ("Data refueling: 2.0 GB at $2.0/GB", 4.0, "2025-02-25", "Charge"),
        ("Data refueling: 1 GB at $5.0/GB", 5.0, "2025-02-25", "Charge")]
    assert draft.total_due == 9.0 and len(env.agent.bills) == 6
    assert env.call("send_payment_request", customer_id="C1001", bill_id="B1004") == (
        "Error: Bill B1004 not found for customer C1001")
    assert env.call("send_payment_request", customer_id="C1001", bill_id="B1001") == (
        "Payment request sent to the customer for bill B1001")  # even a paid bill
    assert env.call("send_payment_request", customer_id="C1001", bill_id="B1002") == (
        "Error: A bill is already awaiting payment for this customer")
    assert env.call("transfer_to_human_agents", summary="s") == "Transfer successful"


def test_status_bar_speed_and_toggles():
    env = Env(phone=None)
    assert env.user_call("check_status_bar") == (
        "Status Bar: 📶³ Good | 5G | 📱 Data Enabled | 🔋 80%")  # the shipped state
    env = Env()  # set_user_info sets the surroundings only: the stored signal stays
    assert env.user_call("check_status_bar") == (
        "Status Bar: 📶³ Good | 5G | 📱 Data Enabled | 🔋 80%")
    env.helper("user", "simulate_network_search")  # 5G at the surroundings' excellent signal
    assert env.user_call("check_status_bar") == "Status Bar: " + BAR
    assert env.user_call("run_speed_test").startswith(
        "Speed Test Result: 275.00 Mbps (Excellent). ")
    assert env.user_call("toggle_data_saver_mode") == (
        "Data Saver Mode is now ON.\nStatus Bar: 📶⁴ Excellent | 5G | 📱 Data Enabled | "
        "🔽 Data Saver | 🔋 80%")
    assert "55.00 Mbps (Good)" in env.user_call("run_speed_test")
    env.helper("user", "break_vpn")
    assert "5.50 Mbps (Fair)" in env.user_call("run_speed_test")  # 275 * 0.1 * 0.2
    assert env.user_call("check_status_bar").endswith("🔒 VPN Connected | 🔋 80%")
    assert env.user_call("toggle_airplane_mode") == (
        "Airplane Mode is now ON.\nStatus Bar: ✈️ Airplane Mode | 🔋 80%")
    assert env.user.device.network_connection_status == "no_service"
    assert not env.user.device.vpn_connected
    assert env.user_call("run_speed_test") == "Speed test failed: No Connection."
    assert env.user_call("toggle_wifi") == (
        "Cannot change Wi-Fi settings while Airplane Mode is ON.\n"
        "Status Bar: ✈️ Airplane Mode | 🔋 80%")
    env.user_call("toggle_data_saver_mode")
    assert env.user_call("toggle_airplane_mode") == "Airplane Mode is now OFF.\nStatus Bar: " + BAR
    assert env.user_call("toggle_data") == (
        "Mobile Data is now OFF.\nStatus Bar: 📶⁴ Excellent | 5G | 📵 Data Disabled | 🔋 80%")
    env.user_call("toggle_data")
    assert env.user_call("set_network_mode_preference", mode="5g") == (
        "Failed to set network mode: '5g' is not a valid option. Please use one of: "
        "4g_5g_preferred, 4g_only, 3g_only, 2g_only\nStatus Bar: " + BAR)
    for mode, result in (("2g_only", "0.05 Mbps (Very Poor)"), ("3g_only", "1.50 Mbps (Poor)"),
                         ("4g_only", "44.00 Mbps (Good)")):
        assert env.user_call("set_network_mode_preference", mode=mode).startswith(
            f"Preferred Network Mode set to: {mode}\nStatus Bar: ")
        assert result in env.user_call("run_speed_test")
    assert env.user_call("can_send_mms") == "Your messaging app can send MMS messages."
    assert env.user_call("grant_app_permission", app_name="camera", permission="sms") == (
        "Error. App 'camera' not found. Cannot grant permission.\nStatus Bar: "
        "📶³ Good | 4G | 📱 Data Enabled | 🔋 80%")
    grant = env.kits["user"].tools["grant_app_permission"].fn
    assert grant(app_name="browser", permission="GPS").startswith(
        "Error. Permission 'gps' not tracked for app 'browser', available permissions: "
        "['sms', 'storage', 'phone', 'network']\n")
    assert grant(app_name="browser", permission="SMS").startswith(
        "Success. Permission 'sms' granted to app 'browser'.\n")
    assert env.user_call("connect_vpn").startswith("VPN connected successfully.\n")
    assert env.user_call("connect_vpn") == "VPN already connected."
    assert env.user_call("disconnect_vpn").startswith("VPN disconnected successfully.\n")
    fresh = Env()
    fresh.helper("user", "simulate_network_search")
    fresh.user_call("connect_vpn")  # another env's broken VPN is not shared (quirk 7)
    assert fresh.user.device.vpn_details.server_performance == "excellent"


def test_sync_links_the_line_and_the_payment_request():
    env = Env()
    surroundings = env.user.surroundings
    assert surroundings.line_active and surroundings.roaming_allowed
    env.helper("assistant", "set_data_usage", customer_id="C1001", line_id="L1002",
               data_used_gb=15.1)
    sync(env.agent, env.user)
    assert surroundings.mobile_data_usage_exceeded
    assert not env.helper("user", "assert_mobile_data_status", expected_status=True)
    env.call("refuel_data", customer_id="C1001", line_id="L1002", gb_amount=2.0)
    assert not surroundings.mobile_data_usage_exceeded
    env.call("suspend_line", customer_id="C1001", line_id="L1002", reason="r")
    assert not surroundings.line_active
    assert env.user.device.network_connection_status == "connected"  # sync never searches
    assert env.user_call("check_payment_request") == "No payment request has been made."
    assert env.user_call("make_payment") == "You do not have a payment request."
    env.call("send_payment_request", customer_id="C1001", bill_id="B1002")
    assert surroundings.payment_request.model_dump() == {
        "bill_id": "B1002", "amount_due": 150.0, "paid": False}
    assert env.user_call("check_payment_request") == (
        "You have a payment request for bill B1002 of 150.0 USD.")
    assert env.user_call("make_payment") == "Payment of 150.0 USD has been made for bill B1002."
    assert surroundings.payment_request is None
    assert next(b for b in env.agent.bills if b.bill_id == "B1002").status == "Paid"


@pytest.mark.parametrize("task", TASKS, ids=[t.id for t in TASKS])
def test_gold_actions_replayed_live_meet_every_assertion(task):
    trajectory, env = gold_trajectory(task, "telecom")
    assert not [m["content"] for m in trajectory if m["role"] == "tool" and m["error"]]
    assert env_assertion_component(task, env) == (1.0, [])


def test_gold_path_without_sync_differs_on_four_tasks():
    differ = [t.id.split("[PERSONA")[0] for t in TASKS
              if gold_trajectory(t, "telecom")[1].hashes()
              != gold_environment(t, "telecom").hashes()]
    assert differ == ["[mobile_data_issue]user_abroad_roaming_disabled_on",
                      "[mobile_data_issue]user_abroad_roaming_disabled_off",
                      "[mobile_data_issue]data_usage_exceeded",
                      "[service_issue]overdue_bill_suspension"]


# tau2-bench's replay: these tasks' setups run no network search (set_user_info and
# set_user_location set the surroundings only, §6.3), so the phone keeps its stored signal
NO_SEARCH_AT_SETUP = {
    "[mobile_data_issue]data_saver_mode_on[PERSONA:Easy]",
    "[mobile_data_issue]bad_vpn[PERSONA:None]",
    "[mobile_data_issue]data_usage_exceeded[PERSONA:Easy]",
    "[mms_issue]bad_wifi_calling[PERSONA:Easy]",
    "[mms_issue]break_app_sms_permission[PERSONA:None]",
    "[mms_issue]break_app_storage_permission[PERSONA:Easy]",
    "[mms_issue]break_app_both_permissions[PERSONA:Hard]",
}


@pytest.mark.parametrize("task", [t for t in TASKS if t.id in NO_SEARCH_AT_SETUP],
                         ids=lambda t: t.id)
def test_a_setup_without_a_searching_helper_keeps_the_stored_signal(task):
    env = build(task, "telecom", history=False)
    device, stored = env.user_db.device, pristine()[1].device
    assert (device.network_signal_strength, device.network_technology_connected) == (
        stored.network_signal_strength, stored.network_technology_connected) == ("good", "5G")
    bar = TelecomUserTools(env.user_db).toolkit().tools["check_status_bar"].fn()
    assert bar.startswith("Status Bar: 📶³ Good | 5G | ")


def test_bad_vpns_first_gold_output_is_tau2_benchs():
    (task,) = [t for t in TASKS if t.id == "[mobile_data_issue]bad_vpn[PERSONA:None]"]
    trajectory, _ = gold_trajectory(task, "telecom")
    first = next(m["content"] for m in trajectory if m["role"] == "tool")
    assert first == ("VPN disconnected successfully.\n"
                     "Status Bar: 📶³ Good | 5G | 📱 Data Enabled | 🔋 80%")
