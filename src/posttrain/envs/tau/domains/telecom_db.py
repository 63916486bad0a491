"""The ``telecom`` domain's databases (TAU_ENV.md §6.1, §6.3): the carrier's plans, devices,
lines, bills and customers (agent side, lists scanned by id) and the customer's phone and its
surroundings (user side). Field order as declared is the order tool results print in."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Literal

from pydantic import Field

from posttrain.envs.tau.db import DB, Record


def load_toml(model: type[DB], path: Path) -> DB:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: the same parser as the ``tomli`` package
        import tomli as tomllib
    with path.open("rb") as f:
        return model.model_validate(tomllib.load(f))


# -- agent side ------------------------------------------------------------------------------
class Plan(Record):
    plan_id: str
    name: str
    data_limit_gb: float
    price_per_month: float
    data_refueling_price_per_gb: float


class Device(Record):
    device_id: str
    device_type: Literal["phone", "router", "tablet", "watch", "other"]
    model: str
    imei: str | None = None
    is_esim_capable: bool
    activated: bool = False
    activation_date: dt.datetime | None = None
    last_esim_transfer_date: dt.datetime | None = None


class Line(Record):
    line_id: str
    phone_number: str
    status: Literal["Active", "Suspended", "Pending Activation", "Closed"]
    plan_id: str
    device_id: str | None = None
    data_used_gb: float = 0.0
    data_refueling_gb: float = 0.0
    roaming_enabled: bool = False
    contract_end_date: dt.date | None = None
    last_plan_change_date: dt.date | None = None
    last_sim_replacement_date: dt.date | None = None
    suspension_start_date: dt.date | None = None


class LineItem(Record):
    description: str
    amount: float
    date: dt.date
    item_type: str


class Bill(Record):
    bill_id: str
    customer_id: str
    period_start: dt.date
    period_end: dt.date
    issue_date: dt.date
    total_due: float
    due_date: dt.date
    line_items: list[LineItem]
    status: Literal["Draft", "Issued", "Awaiting Payment", "Paid", "Overdue", "Disputed"]


class Address(Record):
    street: str
    city: str
    state: str
    zip_code: str


class PaymentMethod(Record):
    method_type: Literal["Credit Card", "Debit Card", "PayPal"]
    account_number_last_4: str
    expiration_date: str


class Customer(Record):
    customer_id: str
    full_name: str
    date_of_birth: str
    email: str
    phone_number: str
    address: Address
    account_status: Literal["Active", "Suspended", "Pending Verification", "Closed"]
    payment_methods: list[PaymentMethod]
    line_ids: list[str]
    bill_ids: list[str]
    created_at: dt.datetime
    last_extension_date: dt.date | None = None
    goodwill_credit_used_this_year: float = 0.0


class TelecomDB(Record):
    plans: list[Plan]
    devices: list[Device]
    lines: list[Line]
    bills: list[Bill]
    customers: list[Customer]


# -- user side -------------------------------------------------------------------------------
Signal = Literal["none", "poor", "fair", "good", "excellent"]
Technology = Literal["none", "2G", "3G", "4G", "5G"]
NetworkMode = Literal["4g_5g_preferred", "4g_only", "3g_only", "2g_only"]


class APNSettings(Record):
    apn_name: Literal["internet", "broken"] = "internet"
    reset_at_reboot: bool = False
    mms_apn: str | None = "mms"
    mmsc_url: str | None = "http://mms.carrier.com/mms/wapenc"
    mms_proxy: str | None = None
    mms_port: int | None = None


class VpnDetails(Record):
    server_address: str
    protocol: str
    server_performance: Literal["unknown", "poor", "fair", "good", "excellent"] = "unknown"


class AppPermissions(Record):
    sms: bool = False
    storage: bool = False
    phone: bool = False
    network: bool = False


class AppStatus(Record):
    app_name: str
    permissions: AppPermissions = Field(default_factory=AppPermissions)


def _default_apps() -> dict[str, AppStatus]:
    return {"messaging": AppStatus(app_name="messaging", permissions=AppPermissions(
                sms=True, storage=True, phone=True)),
            "browser": AppStatus(app_name="browser", permissions=AppPermissions(
                storage=True, network=True))}


class MobileDevice(Record):
    sim_card_status: Literal["active", "missing", "locked_pin", "locked_puk"] = "active"
    sim_card_missing: bool = False
    airplane_mode: bool = False
    network_signal_strength: Signal = "good"
    network_technology_connected: Technology = "5G"
    network_connection_status: Literal["connected", "searching", "no_service",
                                       "emergency_only"] = "connected"
    battery_level: int = 80
    data_enabled: bool = True
    roaming_enabled: bool = False
    network_mode_preference: NetworkMode = "4g_5g_preferred"
    active_apn_settings: APNSettings = Field(default_factory=APNSettings)
    wifi_enabled: bool = False
    wifi_connected: bool = False
    wifi_ssid: str | None = None
    wifi_signal_strength: Signal = "none"
    wifi_calling_enabled: bool = False
    wifi_calling_mms_over_wifi: bool = False
    data_saver_mode: bool = False
    vpn_enabled_setting: bool = False
    vpn_connected: bool = False
    vpn_details: VpnDetails | None = None
    app_statuses: dict[str, AppStatus] = Field(default_factory=_default_apps)


class PaymentRequest(Record):
    bill_id: str
    amount_due: float
    paid: bool = False


def _default_signal() -> dict[str, Signal]:
    return {"2G": "poor", "3G": "fair", "4G": "good", "5G": "excellent"}


class Surroundings(Record):
    name: str | None = None
    phone_number: str | None = None
    is_abroad: bool = False
    roaming_allowed: bool = False
    signal_strength: dict[str, Signal] = Field(default_factory=_default_signal)
    mobile_data_usage_exceeded: bool = False
    line_active: bool = True
    payment_request: PaymentRequest | None = None


class TelecomUserDB(Record):
    device: MobileDevice = Field(default_factory=MobileDevice)
    surroundings: Surroundings = Field(default_factory=Surroundings)
