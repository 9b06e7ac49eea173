"""A NIC port on a ticket: which interface, which NIC (PCI address, driver, firmware), which switch port.

From the host's latest stored report (its `network` section, and identity's `ethtool -i` for the firmware).
The subject is an interface (nic-crc-errors, nic-carrier-flapping, and the kernel log's nic-link-flapping
and nic-tx-timeouts), or for nic-errors-every-port the NIC's PCI device (`0000:3b:00`) or `host`: then
every port is listed, with the candidates the signal named.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from remediator.models import Signal

COUNTERS = ("rx_crc_errors", "rx_frame_errors", "rx_missed_errors", "rx_dropped", "tx_errors")


def _port(port: dict[str, Any], nics: dict[str, dict[str, Any]]) -> dict[str, Any]:
    lldp = port.get("lldp") or {}
    nic = nics.get(port.get("interface") or "") or {}
    stats = port.get("statistics") or {}
    return {
        "interface": port.get("interface"),
        "bus_info": port.get("bus_info") or nic.get("bus_info"),
        "driver": port.get("driver") or nic.get("driver"),
        "firmware": nic.get("firmware"),
        "speed_mbps": port.get("speed_mbps"),
        "operstate": port.get("operstate"),
        "bond": port.get("master"),
        "carrier_changes": port.get("carrier_changes"),
        "carrier_down_count": port.get("carrier_down_count"),
        "counters": {**{k: stats[k] for k in COUNTERS if k in stats}, **(port.get("driver_counters") or {})},
        "switch": lldp.get("chassis") or lldp.get("chassis_id"),
        "switch_port": lldp.get("port"),
        "switch_port_descr": lldp.get("port_descr"),
        "switch_mgmt_ip": lldp.get("mgmt_ip"),
    }


def nic_part(subject: str, observations: dict[str, Any], recent: Sequence[Signal] = ()) -> dict[str, Any]:
    """The part: one port when the subject is an interface, else every port (the candidates first)."""
    network = observations.get("network") or {}
    firmware = ((observations.get("identity") or {}).get("firmware") or {}).get("nics") or []
    nics: dict[str, dict[str, Any]] = {str(n.get("interface")): n for n in firmware if isinstance(n, dict)}
    ports = [_port(p, nics) for p in network.get("ports") or [] if isinstance(p, dict)]
    one = next((p for p in ports if p["interface"] == subject), None)
    if one is None and subject in nics:  # a kernel-log subject on a host without the network section
        nic = nics[subject]
        one = {"interface": subject, "bus_info": nic.get("bus_info"), "driver": nic.get("driver")}
        one["firmware"] = nic.get("firmware")
    lldp_missing = network.get("lldp_missing")
    if one is not None:
        return {
            "id": subject,
            **one,
            "slot": one.get("bus_info"),
            "vendor": None,
            "model": one.get("driver"),
            "serial": None,
            **({"lldp_missing": lldp_missing} if lldp_missing else {}),
        }
    every = next((s for s in recent if s.kind == "nic_errors_every_port"), None)
    detail = (every.detail if every is not None else None) or {}
    listed = [p for p in ports if subject == "host" or (p.get("bus_info") or "").startswith(subject)]
    return {
        "id": subject,
        "slot": subject if subject != "host" else None,
        "vendor": None,
        "model": next((p.get("driver") for p in listed if p.get("driver")), None),
        "serial": None,
        "ambiguous": True,
        "candidates": detail.get("candidates") or ["the NIC", "the host (PCIe slot, riser)", "the switch"],
        "ports": listed[:16],
        **({"lldp_missing": lldp_missing} if lldp_missing else {}),
    }


def nic_counters(subject: str, observations: dict[str, Any]) -> dict[str, Any] | None:
    """One stored report's counters of the port (its counter history on the ticket), or None."""
    network = observations.get("network") or {}
    port = next((p for p in network.get("ports") or [] if isinstance(p, dict) and p.get("interface") == subject), None)
    if port is None:
        return None
    stats = port.get("statistics") or {}
    return {
        **{k: stats.get(k) for k in ("rx_crc_errors", "rx_frame_errors", "rx_missed_errors")},
        "carrier_down_count": port.get("carrier_down_count"),
        "carrier_changes": port.get("carrier_changes"),
        **{k: v for k, v in (port.get("driver_counters") or {}).items() if "crc" in k or "symbol" in k or "fcs" in k},
    }
