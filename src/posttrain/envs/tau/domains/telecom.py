"""The ``telecom`` domain (TAU_ENV.md §6): an agent that looks up customers, lines and bills,
suspends and resumes lines, toggles roaming, sells data refuels and requests payments; the user
side (the phone) is ``telecom_user``, linked by ``sync`` after every call. Today is 2025-02-25."""

from __future__ import annotations

import calendar
import datetime as dt
import uuid
from typing import Any

from posttrain.envs.tau.db import data_dir
from posttrain.envs.tau.domains.telecom_db import (
    Bill,
    Customer,
    Device,
    Line,
    LineItem,
    PaymentRequest,
    Plan,
    TelecomDB,
    TelecomUserDB,
    load_toml,
)
from posttrain.envs.tau.toolkit import (
    GENERIC,
    READ,
    WRITE,
    DomainError,
    Toolkit,
    transfer_to_human_agents,
)

TODAY = dt.date(2025, 2, 25)


def pristine() -> tuple[TelecomDB, TelecomUserDB]:
    """The shipped telecom databases (agent, user)."""
    return (load_toml(TelecomDB, data_dir("telecom") / "db.toml"),
            load_toml(TelecomUserDB, data_dir("telecom") / "user_db.toml"))


def policy() -> str:
    """The agent's policy: the main policy and the tech-support manual, each in its tag."""
    main = (data_dir("telecom") / "main_policy.md").read_text()
    tech = (data_dir("telecom") / "tech_support_manual.md").read_text()
    return (f"<main_policy>\n{main}\n</main_policy>\n"
            f"<tech_support_policy>\n{tech}\n</tech_support_policy>")


class TelecomTools:
    def __init__(self, db: TelecomDB) -> None:
        self.db = db

    # -- lookups (linear scan by id) -------------------------------------------------------
    def _find(self, items: list, key: str, value: str, kind: str) -> Any:
        for item in items:
            if getattr(item, key) == value:
                return item
        raise DomainError(f"{kind} with ID {value} not found")

    def _line(self, line_id: str) -> Line:
        return self._find(self.db.lines, "line_id", line_id, "Line")

    def _plan(self, plan_id: str) -> Plan:
        return self._find(self.db.plans, "plan_id", plan_id, "Plan")

    def _device(self, device_id: str) -> Device:
        return self._find(self.db.devices, "device_id", device_id, "Device")

    def _bill(self, bill_id: str) -> Bill:
        return self._find(self.db.bills, "bill_id", bill_id, "Bill")

    def _customer(self, customer_id: str) -> Customer:
        return self._find(self.db.customers, "customer_id", customer_id, "Customer")

    def _target_line(self, customer_id: str, line_id: str) -> Line:
        customer = self._customer(customer_id)
        if line_id not in customer.line_ids:
            raise DomainError(f"Line {line_id} not found for customer {customer_id}")
        return self._line(line_id)

    # -- read ------------------------------------------------------------------------------
    def get_customer_by_phone(self, phone_number: str) -> Customer:
        """Find the customer whose contact number, or the number of one of whose lines, is the given
        phone number.

        Args:
            phone_number: The phone number, e.g. '555-123-4567'.

        Returns:
            The customer record (contact details, account status, payment methods, line and bill
            ids).
        """
        for customer in self.db.customers:
            if customer.phone_number == phone_number or any(
                    self._line(i).phone_number == phone_number for i in customer.line_ids):
                return customer
        raise DomainError(f"Customer with phone number {phone_number} not found")

    def get_customer_by_id(self, customer_id: str) -> Customer:
        """Get a customer's record by id.

        Args:
            customer_id: The customer's id, e.g. 'C1001'.

        Returns:
            The customer record (contact details, account status, payment methods, line and bill
            ids).
        """
        return self._customer(customer_id)

    def get_customer_by_name(self, full_name: str, dob: str) -> list[Customer]:
        """Find customers by full name (case-insensitive) and date of birth, e.g. to identify a
        caller.

        Args:
            full_name: The customer's full name, e.g. 'Jane Doe'.
            dob: The customer's date of birth as 'YYYY-MM-DD'.

        Returns:
            The matching customer records; empty when none match.
        """
        return [c for c in self.db.customers
                if c.full_name.lower() == full_name.lower() and c.date_of_birth == dob]

    def get_details_by_id(self, id: str) -> Any:
        """Get the record of a line, device, bill, customer or plan; the first letter of the id
        tells which: L line, D device, B bill, C customer, P plan.

        Args:
            id: The id to look up, e.g. 'L1001', 'D1001', 'B1001', 'C1001' or 'P1001'.

        Returns:
            The matching record.
        """
        lookup = {"L": self._line, "D": self._device, "B": self._bill, "C": self._customer,
                  "P": self._plan}.get(id[:1])
        if lookup is None:
            raise DomainError(f"Unknown ID format or type: {id}")
        return lookup(id)

    def get_bills_for_customer(self, customer_id: str, limit: int = 12) -> list[Bill]:
        """List a customer's bills, most recently issued first, with amounts, line items and status.

        Args:
            customer_id: The customer's id, e.g. 'C1001'.
            limit: The maximum number of bills to return (default 12).

        Returns:
            The bills.
        """
        bills = [self._bill(b) for b in self._customer(customer_id).bill_ids]
        return sorted(bills, key=lambda b: b.issue_date, reverse=True)[:limit]  # stable

    def get_data_usage(self, customer_id: str, line_id: str) -> dict:
        """Show a line's mobile data use in the current billing cycle: data used, the plan's data
        limit, extra data refueled, and when the cycle ends.

        Args:
            customer_id: The customer's id, e.g. 'C1001'.
            line_id: Id of one of the customer's lines, e.g. 'L1001'.

        Returns:
            The usage figures (in GB) and the cycle end date.
        """
        line = self._target_line(customer_id, line_id)
        plan = self._plan(line.plan_id)
        last_day = calendar.monthrange(TODAY.year, TODAY.month)[1]
        return {"line_id": line_id, "data_used_gb": line.data_used_gb,
                "data_limit_gb": plan.data_limit_gb, "data_refueling_gb": line.data_refueling_gb,
                "cycle_end_date": TODAY.replace(day=last_day)}

    transfer_to_human_agents = staticmethod(transfer_to_human_agents)

    # -- write -----------------------------------------------------------------------------
    def suspend_line(self, customer_id: str, line_id: str, reason: str) -> dict:
        """Suspend one of the customer's lines; only an active line can be suspended. A $5/month
        holding fee applies while it stays suspended.

        Args:
            customer_id: The customer's id, e.g. 'C1001'.
            line_id: Id of one of the customer's lines, e.g. 'L1001'.
            reason: Why the line is being suspended.

        Returns:
            A confirmation message and the updated line.
        """
        line = self._target_line(customer_id, line_id)
        if line.status != "Active":
            raise DomainError("Line must be active to suspend")
        line.status, line.suspension_start_date = "Suspended", TODAY
        return {"message": "Line suspended successfully. $5/month holding fee will apply.",
                "line": line}

    def resume_line(self, customer_id: str, line_id: str) -> dict:
        """Reactivate one of the customer's lines that is suspended or pending activation.

        Args:
            customer_id: The customer's id, e.g. 'C1001'.
            line_id: Id of one of the customer's lines, e.g. 'L1001'.

        Returns:
            A confirmation message and the updated line.
        """
        line = self._target_line(customer_id, line_id)
        if line.status not in ("Suspended", "Pending Activation"):
            raise DomainError("Line must be suspended to resume")
        line.status, line.suspension_start_date = "Active", None
        return {"message": "Line resumed successfully", "line": line}

    def send_payment_request(self, customer_id: str, bill_id: str) -> str:
        """Send the customer a request to pay one of their bills; it appears on their phone, where
        they can pay it. Not possible while another of their bills is already awaiting payment.

        Args:
            customer_id: The customer's id, e.g. 'C1001'.
            bill_id: Id of one of the customer's bills, e.g. 'B1001'.

        Returns:
            A confirmation message.
        """
        customer = self._customer(customer_id)
        if any(self._bill(b).status == "Awaiting Payment" for b in customer.bill_ids):
            raise DomainError("A bill is already awaiting payment for this customer")
        if bill_id not in customer.bill_ids:
            raise DomainError(f"Bill {bill_id} not found for customer {customer_id}")
        self._bill(bill_id).status = "Awaiting Payment"  # no check that it is unpaid
        return f"Payment request sent to the customer for bill {bill_id}"

    def enable_roaming(self, customer_id: str, line_id: str) -> str:
        """Turn on international roaming for one of the customer's lines (the network side; the
        customer may also need data roaming on in their phone settings).

        Args:
            customer_id: The customer's id, e.g. 'C1001'.
            line_id: Id of one of the customer's lines, e.g. 'L1001'.

        Returns:
            A message saying roaming is now enabled, or already was.
        """
        line = self._target_line(customer_id, line_id)
        if line.roaming_enabled:
            return "Roaming was already enabled"
        line.roaming_enabled = True
        return "Roaming enabled successfully"

    def disable_roaming(self, customer_id: str, line_id: str) -> str:
        """Turn off international roaming for one of the customer's lines.

        Args:
            customer_id: The customer's id, e.g. 'C1001'.
            line_id: Id of one of the customer's lines, e.g. 'L1001'.

        Returns:
            A message saying roaming is now disabled, or already was.
        """
        line = self._target_line(customer_id, line_id)
        if not line.roaming_enabled:
            return "Roaming was already disabled"
        line.roaming_enabled = False
        return "Roaming disabled successfully"

    def refuel_data(self, customer_id: str, line_id: str, gb_amount: float) -> dict:
        """Add extra mobile data to one of the customer's lines for the current cycle. The cost (GB
        times the plan's refuel price per GB) is added to the customer's draft bill.

        Args:
            customer_id: The customer's id, e.g. 'C1001'.
            line_id: Id of one of the customer's lines, e.g. 'L1001'.
            gb_amount: How many GB to add; must be positive.

        Returns:
            A confirmation message, the line's new total of refueled GB, and the charge.
        """
        line = self._target_line(customer_id, line_id)
        if gb_amount <= 0:
            raise DomainError("Refuel amount must be positive")
        price = self._plan(line.plan_id).data_refueling_price_per_gb
        charge = gb_amount * price
        line.data_refueling_gb += gb_amount
        bill = self._draft_bill(self._customer(customer_id))
        bill.line_items.append(LineItem(
            description=f"Data refueling: {gb_amount} GB at ${price}/GB", amount=charge,
            date=TODAY, item_type="Credit" if charge < 0 else "Charge"))
        bill.total_due += charge
        return {"message": f"Successfully added {gb_amount} GB of data for line {line_id} "
                           f"for ${charge:.2f}",
                "new_data_refueling_gb": line.data_refueling_gb, "charge": charge}

    def _draft_bill(self, customer: Customer) -> Bill:
        for bill_id in customer.bill_ids:
            bill = self._bill(bill_id)
            if bill.status == "Draft":
                return bill
        # Non-deterministic, as in tau2 (quirk 8); not reached by tasks_small (C1001 has B1003).
        bill = Bill(bill_id=f"B{uuid.uuid4().hex[:8].upper()}", customer_id=customer.customer_id,
                    period_start=dt.date(2025, 3, 1), period_end=dt.date(2025, 3, 31),
                    issue_date=dt.date(2025, 3, 1), total_due=0.0,
                    due_date=dt.date(2025, 3, 15), line_items=[], status="Draft")
        self.db.bills.append(bill)
        customer.bill_ids.append(bill.bill_id)
        return bill

    # -- helpers (task setup) --------------------------------------------------------------
    def set_data_usage(self, customer_id: str, line_id: str, data_used_gb: float) -> str:
        self._target_line(customer_id, line_id).data_used_gb = data_used_gb
        return f"Data usage of line {line_id} set to {data_used_gb} GB"

    def suspend_line_for_overdue_bill(self, customer_id: str, line_id: str, new_bill_id: str,
                                      contract_ended: bool) -> str:
        line = self._line(line_id)
        if line.status != "Active":
            raise DomainError("Line must be active to suspend")
        amount = self._plan(line.plan_id).price_per_month
        if amount <= 0:
            raise DomainError("Plan price must be positive")
        customer = self._customer(customer_id)
        if any(self._bill(b).status == "Overdue" for b in customer.bill_ids):
            raise DomainError(f"Customer {customer_id} already has an overdue bill")
        self.db.bills.append(Bill(
            bill_id=new_bill_id, customer_id=customer_id, period_start=dt.date(2025, 1, 1),
            period_end=dt.date(2025, 1, 31), issue_date=dt.date(2025, 1, 1), total_due=amount,
            due_date=dt.date(2025, 1, 15), status="Overdue",
            line_items=[LineItem(description=f"Charge for line {line_id}", amount=amount,
                                 date=TODAY, item_type="Charge")]))
        customer.bill_ids.append(new_bill_id)
        line.status, line.suspension_start_date = "Suspended", TODAY
        if contract_ended:
            line.contract_end_date = dt.date(2025, 1, 31)
        return f"Line {line_id} suspended for overdue bill {new_bill_id}"

    # -- assertions ------------------------------------------------------------------------
    def assert_data_refueling_amount(self, customer_id: str, line_id: str,
                                     expected_amount: float) -> bool:
        line = self._target_line(customer_id, line_id)
        return abs(line.data_refueling_gb - expected_amount) < 1e-6

    def assert_line_status(self, customer_id: str, line_id: str, expected_status: str) -> bool:
        return self._target_line(customer_id, line_id).status == expected_status

    def assert_overdue_bill_exists(self, customer_id: str, overdue_bill_id: str) -> bool:
        customer = self._customer(customer_id)
        return overdue_bill_id in customer.bill_ids and any(
            b.bill_id == overdue_bill_id and b.status == "Overdue" for b in self.db.bills)

    def assert_no_overdue_bill(self, overdue_bill_id: str) -> bool:
        bill = next((b for b in self.db.bills if b.bill_id == overdue_bill_id), None)
        return bill is None or bill.status == "Paid"

    def toolkit(self) -> Toolkit:
        return Toolkit.of(self, [
            (READ, ("get_customer_by_phone", "get_customer_by_id", "get_customer_by_name",
                    "get_details_by_id", "get_bills_for_customer", "get_data_usage")),
            (WRITE, ("suspend_line", "resume_line", "send_payment_request", "enable_roaming",
                     "disable_roaming", "refuel_data")),
            (GENERIC, ("transfer_to_human_agents",))],
            ("set_data_usage", "suspend_line_for_overdue_bill", "assert_data_refueling_amount",
             "assert_line_status", "assert_overdue_bill_exists", "assert_no_overdue_bill"))


def sync(agent_db: TelecomDB, user_db: TelecomUserDB) -> None:
    """§6.4: the phone's surroundings follow the customer's line (active, roaming, usage) and
    bills (a paid request settles its bill; the first bill awaiting payment becomes the
    request). Never runs a network search. No-op until the user's phone number is set."""
    s = user_db.surroundings
    if s.phone_number is None:
        return
    tools = TelecomTools(agent_db)
    line = next((x for x in agent_db.lines if x.phone_number == s.phone_number), None)
    if line is None:
        raise DomainError(f"Line with phone number {s.phone_number} not found")
    plan = tools._plan(line.plan_id)
    s.line_active = line.status == "Active"
    s.roaming_allowed = line.roaming_enabled
    s.mobile_data_usage_exceeded = (
        line.data_used_gb >= plan.data_limit_gb + line.data_refueling_gb)
    if s.payment_request is not None and s.payment_request.paid:
        tools._bill(s.payment_request.bill_id).status = "Paid"
        s.payment_request = None
    if s.payment_request is None:
        customer = tools.get_customer_by_phone(s.phone_number)
        for bill_id in customer.bill_ids:
            bill = tools._bill(bill_id)
            if bill.status == "Awaiting Payment":
                s.payment_request = PaymentRequest(bill_id=bill_id, amount_due=bill.total_due)
                break
