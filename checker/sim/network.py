"""A virtual host's NIC ports as the `network` collector reports them, and the `nic_crc_errors` fault.

Every port counts from its boot: a healthy port a handful of drops, a faulty one (the fault's variant)
`crc`: one port's frames arriving with a bad FCS at `per_hour`, a steady stream (a dirty optic);
`flapping`: one port's link going down `per_hour` times an hour (carrier_down_count and the PHY's count);
`every_port`: every port of the NIC erring at once (the NIC, not a cable; one port on a one-port class).
Counters are computed from the time since the later of the boot and the fault's start, so a reboot
starts them again as the kernel does. LLDP names the rack's two top-of-rack switches.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from checker.schemas import CollectorRun, CollectorStatus, LldpNeighbor, NetworkState, NicPort

if TYPE_CHECKING:
    from checker.sim.host import VirtualHost

FAULT = "nic_crc_errors"
VARIANTS = ("crc", "flapping", "every_port")
SPEED_MBPS = {"mlx5_core": 25000, "i40e": 10000, "e1000e": 1000, "igb": 1000}


def bus_info(index: int) -> str:
    return f"0000:3b:00.{index}"


def _hours_since(host: VirtualHost, start: dt.datetime | None, now: dt.datetime) -> float:
    marks = [t for t in (start, host.boot_at) if t is not None]
    since = max(marks) if marks else (host.first_at or now)
    return max(0.0, (now - since).total_seconds() / 3600)


def network_state(host: VirtualHost, now: dt.datetime) -> NetworkState:
    hw = host.hardware
    fault = next((f for f in host.faults if f.kind == FAULT), None)
    up_hours = _hours_since(host, None, now)
    ports: list[NicPort] = []
    for index, interface in enumerate(hw.nic_interfaces):
        crc = downs = 0
        if fault is not None and (index == 0 or fault.variant == "every_port"):
            hours = _hours_since(host, fault.started_at, now)
            if fault.variant == "flapping":
                downs = int(fault.per_hour * hours)
            else:
                crc = int(fault.per_hour * hours * (1.0 if index == 0 else 0.8))
        packets = int(up_hours * 3600 * 20000)
        ports.append(
            NicPort(
                interface=interface,
                physical=True,
                operstate="up",
                carrier=True,
                speed_mbps=SPEED_MBPS.get(hw.nic_driver, 10000),
                driver=hw.nic_driver,
                bus_info=bus_info(index),
                carrier_changes=1 + 2 * downs,  # the first link up after the driver loaded
                carrier_down_count=downs,
                statistics={
                    "rx_packets": packets,
                    "tx_packets": packets // 2,
                    "rx_errors": crc,
                    "rx_crc_errors": crc,
                    "rx_frame_errors": 0,
                    "rx_missed_errors": 0,
                    "rx_dropped": 0,
                    "tx_dropped": 0,
                },
                lldp=LldpNeighbor(
                    chassis=f"{host.datacenter}-{host.rack}-tor{index % 2 + 1}",
                    chassis_id=f"b8:59:9f:3a:{index % 2 + 1:02x}:00",
                    port=f"Ethernet{host.slot.lstrip('U') or index}",
                    port_descr=f"{host.hostname}:{interface}",
                ),
            )
        )
    return NetworkState(ports=ports, lldp_source="lldpctl", ethtool=False)


def collector_run(host: VirtualHost) -> CollectorRun:
    return CollectorRun(status=CollectorStatus.ok, duration_ms=0.8, source="sysfs")
