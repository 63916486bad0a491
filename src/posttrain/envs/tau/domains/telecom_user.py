"""The ``telecom`` user's phone (TAU_ENV.md §6.3): tools the simulated customer uses to read and
change the device's settings, helpers that break it for a task, and assertions on it. Write
tools report refusals as plain text (not tool errors) and most end with the status bar."""

from __future__ import annotations

from collections.abc import Callable

from posttrain.envs.tau.domains.telecom_db import (
    APNSettings,
    AppPermissions,
    MobileDevice,
    TelecomUserDB,
    VpnDetails,
)
from posttrain.envs.tau.domains.telecom_device import (
    can_send_mms,
    data_works,
    network_search,
    speed,
    status_bar,
)
from posttrain.envs.tau.toolkit import READ, WRITE, Toolkit

MODES = ("4g_5g_preferred", "4g_only", "3g_only", "2g_only")
ADVICE = {"Very Poor": "Connection is very slow; even basic browsing may fail.",
          "Poor": "Connection is slow; web pages may load sluggishly.",
          "Fair": "Fine for browsing and standard-quality video.",
          "Good": "Good for most activities, including HD streaming.",
          "Excellent": "Excellent for all activities, including large downloads."}
READ_TOOLS = ("check_status_bar", "check_network_status", "check_network_mode_preference",
              "check_sim_status", "check_data_restriction_status", "check_apn_settings",
              "check_wifi_status", "check_wifi_calling_status", "check_vpn_status",
              "check_installed_apps", "check_app_status", "check_app_permissions",
              "can_send_mms", "run_speed_test", "check_payment_request")
WRITE_TOOLS = ("toggle_airplane_mode", "toggle_data", "toggle_roaming", "toggle_data_saver_mode",
               "toggle_wifi_calling", "toggle_wifi", "set_network_mode_preference",
               "reseat_sim_card", "reset_apn_settings", "set_apn_settings", "reboot_device",
               "connect_vpn", "disconnect_vpn", "grant_app_permission", "make_payment")
HELPERS = ("set_user_info", "set_user_location", "simulate_network_search", "unseat_sim_card",
           "lock_sim_card", "break_apn_settings", "break_apn_mms_setting", "break_vpn",
           "remove_app_permission", "set_wifi_calling", "turn_data_on", "turn_data_off",
           "turn_airplane_mode_on", "turn_airplane_mode_off", "turn_roaming_on",
           "turn_roaming_off", "turn_data_saver_mode_on", "turn_data_saver_mode_off",
           "assert_airplane_mode_status", "assert_service_status", "assert_mobile_data_status",
           "assert_mobile_roaming_status", "assert_mobile_data_saver_mode_status",
           "assert_can_send_mms", "assert_mobile_data_usage_exceeded", "assert_internet_speed",
           "assert_internet_not_excellent")


def on_off(flag: bool) -> str:
    return "ON" if flag else "OFF"


class TelecomUserTools:
    def __init__(self, db: TelecomUserDB) -> None:
        self.db = db

    @property
    def device(self) -> MobileDevice:
        return self.db.device

    # -- derived state ---------------------------------------------------------------------
    def simulate_network_search(self) -> str:
        """Connects by SIM state and mode preference (``telecom_device.network_search``)."""
        status, tech, signal = network_search(self.device, self.db.surroundings)
        return f"Network search done: {status}, {tech}, signal {signal}."

    def _can_send_mms(self) -> bool:
        return can_send_mms(self.device, self.db.surroundings)

    def _speed(self) -> tuple[float | None, str]:
        return speed(self.device, self.db.surroundings)

    def _sb(self, text: str) -> str:
        return f"{text}\nStatus Bar: {status_bar(self.device)}"

    def _drop_wifi(self) -> None:
        d = self.device
        d.wifi_connected, d.wifi_ssid, d.wifi_signal_strength = False, None, "none"

    # -- read tools ------------------------------------------------------------------------
    def check_status_bar(self) -> str:
        """Look at your phone's status bar: signal strength, network type, mobile data, Wi-Fi, VPN
        and battery level.
        """
        return "Status Bar: " + status_bar(self.device)

    def check_network_status(self) -> str:
        """Open your phone's network overview: airplane mode, SIM card, cellular connection, signal,
        network type, mobile data, data roaming and Wi-Fi.
        """
        d = self.device
        sim = "missing" if d.sim_card_missing else d.sim_card_status
        return "\n".join([
            f"Airplane Mode: {on_off(d.airplane_mode)}", f"SIM Card Status: {sim}",
            f"Cellular Connection: {d.network_connection_status}",
            f"Cellular Signal: {d.network_signal_strength}",
            f"Cellular Network Type: {d.network_technology_connected}",
            f"Mobile Data: {on_off(d.data_enabled)}", f"Data Roaming: {on_off(d.roaming_enabled)}",
            f"Wi-Fi Radio: {on_off(d.wifi_enabled)}",
            f"Wi-Fi Connected: {'Yes' if d.wifi_connected else 'No'}",
            f"Wi-Fi SSID: {d.wifi_ssid or 'None'}"])

    def check_network_mode_preference(self) -> str:
        """See which cellular network types your phone is set to use (e.g. 4G/5G preferred)."""
        return f"Network Mode Preference: {self.device.network_mode_preference}"

    def check_sim_status(self) -> str:
        """Check whether your SIM card is working, missing, or locked with a PIN or PUK code."""
        d = self.device
        sim = "missing" if d.sim_card_missing else d.sim_card_status
        return {"active": "Your SIM card is active and working.",
                "missing": "No SIM card detected in the phone.",
                "locked_pin": "The SIM card is locked with a PIN code.",
                "locked_puk": "The SIM card is locked with a PUK code."}[sim]

    def check_data_restriction_status(self) -> str:
        """Check whether Data Saver mode, which limits mobile data speed, is on."""
        return f"Data Saver Mode is {on_off(self.device.data_saver_mode)}."

    def check_apn_settings(self) -> str:
        """See your phone's APN (mobile data access point) name and the MMSC URL used for picture
        messages.
        """
        apn = self.device.active_apn_settings
        return (f"Current APN Name: {apn.apn_name}\n"
                f"MMSC URL (for picture messages): {apn.mmsc_url or 'Not Set'}")

    def check_wifi_status(self) -> str:
        """Check whether Wi-Fi is on and which network, if any, your phone is connected to."""
        d = self.device
        if not d.wifi_enabled:
            return "Wi-Fi is turned OFF."
        if d.wifi_connected:
            return (f"Wi-Fi is ON and connected to {d.wifi_ssid} "
                    f"(signal: {d.wifi_signal_strength}).")
        return "Wi-Fi is ON but not connected to any network."

    def check_wifi_calling_status(self) -> str:
        """Check whether Wi-Fi Calling and MMS over Wi-Fi are turned on."""
        d = self.device
        return (f"Wi-Fi Calling is {on_off(d.wifi_calling_enabled)}. "
                f"MMS over Wi-Fi is {on_off(d.wifi_calling_mms_over_wifi)}.")

    def check_vpn_status(self) -> str:
        """Check whether a VPN is connected, and to which server with what performance."""
        d = self.device
        if d.vpn_connected and d.vpn_details is not None:
            v = d.vpn_details
            return (f"VPN is connected to {v.server_address} ({v.protocol}). "
                    f"Server performance: {v.server_performance}.")
        return "VPN is not connected."

    def check_installed_apps(self) -> str:
        """List the apps installed on your phone."""
        return "Installed apps: " + ", ".join(self.device.app_statuses)

    def check_app_status(self, app_name: str) -> str:
        """Check whether an app is installed and which permissions it has.

        Args:
            app_name: Name of the app as listed by check_installed_apps, e.g. 'messaging'.
        """
        app = self.device.app_statuses.get(app_name)
        if app is None:
            return f"App '{app_name}' is not installed."
        return f"App '{app_name}' is installed.\n" + self.check_app_permissions(app_name)

    def check_app_permissions(self, app_name: str) -> str:
        """See which permissions (sms, storage, phone, network) an app has been granted.

        Args:
            app_name: Name of the app as listed by check_installed_apps, e.g. 'messaging'.
        """
        app = self.device.app_statuses.get(app_name)
        if app is None:
            return f"App '{app_name}' is not installed."
        granted = [p for p, on in app.permissions.model_dump().items() if on]
        return f"App '{app_name}' permissions granted: {', '.join(granted) or 'none'}"

    def can_send_mms(self) -> str:
        """Check whether your messaging app can currently send MMS (picture) messages."""
        return ("Your messaging app can send MMS messages." if self._can_send_mms()
                else "Your messaging app cannot send MMS messages.")

    def run_speed_test(self) -> str:
        """Run a mobile internet speed test; shows the speed in Mbps with a rating, or that there is
        no connection.
        """
        speed, label = self._speed()
        if speed is None:
            return "Speed test failed: No Connection."
        return f"Speed Test Result: {speed:.2f} Mbps ({label}). {ADVICE[label]}"

    def check_payment_request(self) -> str:
        """Check whether your phone company has sent you a request to pay a bill, and for how
        much.
        """
        request = self.db.surroundings.payment_request
        if request is None:
            return "No payment request has been made."
        return (f"You have a payment request for bill {request.bill_id} of "
                f"{request.amount_due} USD.")

    # -- write tools -----------------------------------------------------------------------
    def toggle_airplane_mode(self) -> str:
        """Switch airplane mode on if it is off, or off if it is on. Turning it on cuts cellular
        service and disconnects Wi-Fi and VPN.
        """
        d = self.device
        d.airplane_mode = not d.airplane_mode
        if not d.airplane_mode:
            d.network_connection_status = "searching"
            if d.wifi_enabled:
                self._drop_wifi()
        else:
            self._drop_wifi()
            d.vpn_connected = False
        self.simulate_network_search()
        return self._sb(f"Airplane Mode is now {on_off(d.airplane_mode)}.")

    def toggle_data(self) -> str:
        """Switch mobile data on if it is off, or off if it is on."""
        self.device.data_enabled = not self.device.data_enabled
        self.simulate_network_search()
        return self._sb(f"Mobile Data is now {on_off(self.device.data_enabled)}.")

    def toggle_roaming(self) -> str:
        """Switch data roaming on your phone on if it is off, or off if it is on; mobile data abroad
        needs it on.
        """
        self.device.roaming_enabled = not self.device.roaming_enabled
        self.simulate_network_search()
        return self._sb(f"Data Roaming is now {on_off(self.device.roaming_enabled)}.")

    def toggle_data_saver_mode(self) -> str:
        """Switch Data Saver mode (which limits data speed) on if it is off, or off if it is on."""
        self.device.data_saver_mode = not self.device.data_saver_mode
        return self._sb(f"Data Saver Mode is now {on_off(self.device.data_saver_mode)}.")

    def toggle_wifi_calling(self) -> str:
        """Switch Wi-Fi Calling on if it is off, or off if it is on."""
        self.device.wifi_calling_enabled = not self.device.wifi_calling_enabled
        return self._sb(f"Wi-Fi Calling is now {on_off(self.device.wifi_calling_enabled)}.")

    def toggle_wifi(self) -> str:
        """Switch Wi-Fi on if it is off, or off if it is on; not possible while airplane mode is
        on.
        """
        d = self.device
        if d.airplane_mode:
            return self._sb("Cannot change Wi-Fi settings while Airplane Mode is ON.")
        d.wifi_enabled = not d.wifi_enabled
        if not d.wifi_enabled:
            self._drop_wifi()
        return self._sb(f"Wi-Fi is now {on_off(d.wifi_enabled)}.")

    def set_network_mode_preference(self, mode: str) -> str:
        """Choose which cellular network types your phone uses; it then searches for a network
        again.

        Args:
            mode: One of '4g_5g_preferred', '4g_only', '3g_only' or '2g_only'.
        """
        if mode not in MODES:
            return self._sb(f"Failed to set network mode: '{mode}' is not a valid option. "
                            f"Please use one of: {', '.join(MODES)}")
        self.device.network_mode_preference = mode
        self.simulate_network_search()
        return self._sb(f"Preferred Network Mode set to: {mode}")

    def reseat_sim_card(self) -> str:
        """Take the SIM card out and put it back in; the phone then searches for a network again."""
        self.device.sim_card_missing = False
        self.simulate_network_search()
        return self._sb("SIM card re-seated successfully.")

    def reset_apn_settings(self) -> str:
        """Have your APN settings restored to their defaults; this takes effect at the next
        reboot.
        """
        self.device.active_apn_settings.reset_at_reboot = True
        self.simulate_network_search()
        return self._sb("APN settings will reset at reboot.")

    def set_apn_settings(self, apn_settings: dict) -> str:
        """Replace your phone's APN settings with the given values; fields left out get their
        defaults.

        Args:
            apn_settings: An object with any of: apn_name ('internet'), reset_at_reboot (bool),
                mms_apn, mmsc_url, mms_proxy (strings) and mms_port (int).
        """
        self.device.active_apn_settings = APNSettings.model_validate(apn_settings)
        self.simulate_network_search()
        return self._sb(f"APN settings set to: {self.device.active_apn_settings.apn_name}")

    def reboot_device(self) -> str:
        """Restart your phone; applies a pending APN reset and reconnects to the network."""
        d, lines = self.device, []
        if d.active_apn_settings.reset_at_reboot:
            d.active_apn_settings = APNSettings()
            lines.append("Resetting APN settings...")
        lines.append("Restarting network services...")
        d.network_connection_status = "searching"
        self.simulate_network_search()
        return self._sb("\n".join(lines))

    def connect_vpn(self) -> str:
        """Connect your phone to its VPN."""
        d = self.device
        if d.vpn_connected:
            return "VPN already connected."
        d.vpn_connected = True
        d.vpn_details = VpnDetails(server_address="192.168.1.1", protocol="OpenVPN",
                                   server_performance="excellent")  # a fresh copy (quirk 7)
        return self._sb("VPN connected successfully.")

    def disconnect_vpn(self) -> str:
        """Disconnect your phone's active VPN connection."""
        d = self.device
        if not d.vpn_connected:
            return self._sb("No active VPN connection to disconnect.")
        d.vpn_connected, d.vpn_details = False, None
        return self._sb("VPN disconnected successfully.")

    def grant_app_permission(self, app_name: str, permission: str) -> str:
        """Give an app a permission.

        Args:
            app_name: Name of the app as listed by check_installed_apps, e.g. 'messaging'.
            permission: The permission to grant: 'sms', 'storage', 'phone' or 'network'.
        """
        return self._sb(self._set_permission(app_name, permission, True))

    def make_payment(self) -> str:
        """Pay the bill named in the payment request your phone company sent you."""
        request = self.db.surroundings.payment_request
        if request is None:
            return "You do not have a payment request."
        request.paid = True
        return f"Payment of {request.amount_due} USD has been made for bill {request.bill_id}."

    def _set_permission(self, app_name: str, permission: str, value: bool) -> str:
        p = permission.lower()
        app = self.device.app_statuses.get(app_name)
        if app is None:
            return f"Error. App '{app_name}' not found. Cannot grant permission."
        if p not in AppPermissions.model_fields:
            return (f"Error. Permission '{p}' not tracked for app '{app_name}', available "
                    f"permissions: {list(AppPermissions.model_fields)}")
        setattr(app.permissions, p, value)
        verb = "granted to" if value else "removed from"
        return f"Success. Permission '{p}' {verb} app '{app_name}'."

    # -- helpers (task setup) --------------------------------------------------------------
    def set_user_info(self, name: str, phone_number: str) -> None:
        """Sets the surroundings' fields only: the device keeps its stored signal until a
        tool that searches runs (§6.3)."""
        self.db.surroundings.name, self.db.surroundings.phone_number = name, phone_number

    def set_user_location(self, abroad: bool) -> None:
        """Sets the surroundings' field only (no search, like ``set_user_info``)."""
        self.db.surroundings.is_abroad = abroad

    def unseat_sim_card(self) -> str:
        self.device.sim_card_missing = True
        return self.simulate_network_search()

    def lock_sim_card(self, mode: str) -> str:
        self.device.sim_card_status = {"pin": "locked_pin", "puk": "locked_puk"}[mode]
        return self.simulate_network_search()

    def break_apn_settings(self) -> str:
        self.device.active_apn_settings.apn_name = "broken"
        return self.simulate_network_search()

    def break_apn_mms_setting(self) -> str:
        self.device.active_apn_settings.mmsc_url = None
        return "MMSC URL removed."

    def break_vpn(self) -> str:
        self.connect_vpn()
        self.device.vpn_details.server_performance = "poor"
        return "VPN connected to a poorly performing server."

    def remove_app_permission(self, app_name: str, permission: str) -> str:
        return self._set_permission(app_name, permission, False)

    def set_wifi_calling(self, enabled: bool, mms_over_wifi: bool | None = None) -> str:
        self.device.wifi_calling_enabled = enabled
        if mms_over_wifi is not None:
            self.device.wifi_calling_mms_over_wifi = mms_over_wifi
        return self.check_wifi_calling_status()

    def turn_data_on(self) -> str:
        self.device.data_enabled = True  # no network search
        return "Mobile Data is now ON."

    def _turn(self, toggle: Callable[[], str], field: str, wanted: bool) -> str:
        """Toggle, and toggle again when that did not reach ``wanted`` (both take effect)."""
        out = toggle()
        return toggle() if getattr(self.device, field) != wanted else out

    def turn_data_off(self) -> str:
        return self._turn(self.toggle_data, "data_enabled", False)

    def turn_airplane_mode_on(self) -> str:
        return self._turn(self.toggle_airplane_mode, "airplane_mode", True)

    def turn_airplane_mode_off(self) -> str:
        return self._turn(self.toggle_airplane_mode, "airplane_mode", False)

    def turn_roaming_on(self) -> str:
        return self._turn(self.toggle_roaming, "roaming_enabled", True)

    def turn_roaming_off(self) -> str:
        return self._turn(self.toggle_roaming, "roaming_enabled", False)

    def turn_data_saver_mode_on(self) -> str:
        return self._turn(self.toggle_data_saver_mode, "data_saver_mode", True)

    def turn_data_saver_mode_off(self) -> str:
        return self._turn(self.toggle_data_saver_mode, "data_saver_mode", False)

    # -- assertions ------------------------------------------------------------------------
    def assert_airplane_mode_status(self, expected_status: bool) -> bool:
        return self.device.airplane_mode == expected_status

    def assert_service_status(self, expected_status: str) -> bool:
        return self.device.network_connection_status == expected_status

    def assert_mobile_data_status(self, expected_status: bool) -> bool:
        return data_works(self.device, self.db.surroundings) == expected_status

    def assert_mobile_roaming_status(self, expected_status: bool) -> bool:
        return self.device.roaming_enabled == expected_status

    def assert_mobile_data_saver_mode_status(self, expected_status: bool) -> bool:
        return self.device.data_saver_mode == expected_status

    def assert_can_send_mms(self, expected_status: bool) -> bool:
        return self._can_send_mms() == expected_status

    def assert_mobile_data_usage_exceeded(self, expected_status: bool) -> bool:
        return self.db.surroundings.mobile_data_usage_exceeded == expected_status

    def assert_internet_speed(self, expected_speed: float,
                              expected_desc: str | None = None) -> bool:
        speed, label = self._speed()
        if (speed or 0) < expected_speed:
            return False
        return expected_desc is None or label.lower() == expected_desc.lower()

    def assert_internet_not_excellent(self) -> bool:
        return self._speed()[1] != "Excellent"

    def toolkit(self) -> Toolkit:
        return Toolkit.of(self, [(READ, READ_TOOLS), (WRITE, WRITE_TOOLS)], HELPERS)
