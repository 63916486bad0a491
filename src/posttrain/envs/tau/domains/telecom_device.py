"""The telecom phone's derived state (TAU_ENV.md §6.3) as functions of the device and its
surroundings: network search, whether mobile data works and MMS sends, speed test and status bar."""

from __future__ import annotations

from posttrain.envs.tau.domains.telecom_db import MobileDevice, Surroundings

SPEED_RANGES = {"2G": (0.1, 0.4), "3G": (1.0, 5.0), "4G": (10.0, 100.0), "5G": (50.0, 500.0)}
SIGNAL_FACTOR = {"poor": 0.2, "fair": 0.5, "good": 0.8, "excellent": 1.0}
SIGNAL_ICON = {"none": "📵 No Signal", "poor": "📶¹ Poor", "fair": "📶² Fair",
               "good": "📶³ Good", "excellent": "📶⁴ Excellent"}
SPEED_LABELS = ((1, "Very Poor"), (5, "Poor"), (25, "Fair"), (100, "Good"))


def network_search(d: MobileDevice, s: Surroundings) -> tuple[str, str, str]:
    """Set and return (status, technology, signal): an active SIM connects by the mode
    preference (5G falling back to 4G where 5G has no signal); any other SIM state, airplane
    mode, a broken APN or an inactive line leave no service."""
    sim = "missing" if d.sim_card_missing else d.sim_card_status
    status, tech, signal = "no_service", "none", "none"
    if sim == "active":
        status = "connected"
        if d.network_mode_preference == "4g_5g_preferred":
            tech, signal = "5G", s.signal_strength["5G"]
            if signal == "none":
                tech, signal = "4G", s.signal_strength["4G"]
        else:
            tech = d.network_mode_preference[:2].upper()
            signal = s.signal_strength[tech]
    if d.airplane_mode or d.active_apn_settings.apn_name == "broken" or not s.line_active:
        status, tech, signal = "no_service", "none", "none"
    d.network_connection_status = status
    d.network_technology_connected, d.network_signal_strength = tech, signal
    return status, tech, signal


def data_works(d: MobileDevice, s: Surroundings) -> bool:
    """Not in airplane mode, with signal and service, roaming on and allowed when abroad, data
    enabled and the usage limit not exceeded."""
    return (not d.airplane_mode and d.network_signal_strength != "none"
            and d.network_connection_status != "no_service"
            and (not s.is_abroad or (d.roaming_enabled and s.roaming_allowed))
            and d.data_enabled and not s.mobile_data_usage_exceeded)


def can_send_mms(d: MobileDevice, s: Surroundings) -> bool:
    """Data works, not on 2G, not MMS over Wi-Fi calling, an MMSC URL, and a messaging app
    allowed SMS and storage."""
    app = d.app_statuses.get("messaging")
    return (data_works(d, s) and d.network_technology_connected != "2G"
            and not (d.wifi_calling_enabled and d.wifi_calling_mms_over_wifi)
            and bool(d.active_apn_settings.mmsc_url) and app is not None
            and app.permissions.sms and app.permissions.storage)


def speed(d: MobileDevice, s: Surroundings) -> tuple[float | None, str]:
    """``round(mid(technology range) x signal factor x factor, 2)`` Mbps and its label; the
    factor is 0.1 on a poor VPN, times 0.2 with data saver. No data: (None, "No Connection")."""
    span = SPEED_RANGES.get(d.network_technology_connected)
    if not data_works(d, s) or span is None:
        return None, "No Connection"
    factor = 1.0
    if d.vpn_connected and d.vpn_details and d.vpn_details.server_performance == "poor":
        factor = 0.1
    if d.data_saver_mode:
        factor *= 0.2
    mbps = round((span[0] + span[1]) / 2 * SIGNAL_FACTOR.get(d.network_signal_strength, 0.0)
                 * factor, 2)
    return mbps, next((label for bound, label in SPEED_LABELS if mbps < bound), "Excellent")


def status_bar(d: MobileDevice) -> str:
    """The parts of the phone's status bar joined by ``" | "``."""
    if d.airplane_mode:
        parts = ["✈️ Airplane Mode"]
    else:
        tech = d.network_technology_connected
        parts = [SIGNAL_ICON[d.network_signal_strength]] + ([tech] if tech != "none" else [])
        if d.data_enabled and tech != "none":
            parts += ["📱 Data Enabled"] + (["🔽 Data Saver"] if d.data_saver_mode else [])
        else:
            parts.append("📵 Data Disabled")
    if d.wifi_enabled and d.wifi_connected:
        parts.append(f"📡 Connected to {d.wifi_ssid}" if d.wifi_ssid else "📡 Enabled")
    if d.vpn_connected:
        parts.append("🔒 VPN Connected")
    parts.append(f"🔋 {d.battery_level}%")
    return " | ".join(parts)
