"""The `network` section: each interface's error counters, link state and the switch port it is cabled to.

Counters are the kernel's and the driver's own, as read (absolute, since the driver loaded): the
centre turns them into rates and sees resets (remediator/derive/network.py).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from checker.report_types import Key, Model, NonNegativeInt

MAX_PORTS = 64
MAX_COUNTERS = 48


class LldpNeighbor(Model):
    """What the switch announced on this port over LLDP (`lldpctl -f json`)."""

    chassis: str | None = Field(None, max_length=256, description="The switch's system name (SysName).")
    chassis_id: str | None = Field(None, max_length=128, description="Its chassis id (usually a MAC address).")
    port: str | None = Field(None, max_length=128, description="The switch port's id (an ifname such as Ethernet12).")
    port_descr: str | None = Field(None, max_length=256, description="The switch port's description.")
    mgmt_ip: str | None = Field(None, max_length=64, description="The switch's management address.")


class NicPort(Model):
    interface: str = Field(max_length=64)
    physical: bool = Field(
        description="An uplink with a PCI device behind it: not a bridge, bond, veth, VF, representor, USB or IB port."
    )
    operstate: str | None = Field(None, max_length=16, description="up, down, lowerlayerdown, unknown …")
    carrier: bool | None = Field(None, description="/sys/class/net/X/carrier; null when the interface is down.")
    speed_mbps: NonNegativeInt | None = Field(None, description="Negotiated speed; null when unknown (link down).")
    driver: str | None = Field(None, max_length=64, description="The driver bound to the device (its uevent).")
    bus_info: str | None = Field(None, max_length=64, description="The device's PCI address (PCI_SLOT_NAME).")
    carrier_changes: NonNegativeInt | None = Field(None, description="Link up and down transitions since it loaded.")
    carrier_down_count: NonNegativeInt | None = Field(
        None, description="Link downs the kernel counted (carrier off), including administrative ones (Linux 4.16 on)."
    )
    master: str | None = Field(
        None, max_length=64, description="The bond or bridge it is enslaved to (/sys/class/net/X/master); null if none."
    )
    bond_mode: str | None = Field(
        None,
        max_length=32,
        description="Its master's bonding mode (the first word of /sys/class/net/MASTER/bonding/mode: 802.3ad, "
        "active-backup, balance-rr …); null when the master is no bond (a bridge) or was not read (an older agent).",
    )
    bond_state: str | None = Field(
        None, max_length=16, description="/sys/class/net/X/bonding_slave/state: active or backup (null: not read)."
    )
    bond_aggregator: NonNegativeInt | None = Field(
        None, description="/sys/class/net/X/bonding_slave/ad_aggregator_id: its 802.3ad aggregator (null otherwise)."
    )
    bond_active_aggregator: NonNegativeInt | None = Field(
        None, description="/sys/class/net/MASTER/bonding/ad_aggregator: the bond's active 802.3ad aggregator."
    )
    statistics: dict[Key, NonNegativeInt] = Field(
        default_factory=dict, max_length=MAX_COUNTERS, description="/sys/class/net/X/statistics/* error counters."
    )
    driver_counters: dict[Key, NonNegativeInt] = Field(
        default_factory=dict,
        max_length=MAX_COUNTERS,
        description="The driver's port-level error counters from `ethtool -S` (per-queue ones left out).",
    )
    lldp: LldpNeighbor | None = None


class NetworkState(Model):
    ports: list[NicPort] = Field(default_factory=list, max_length=MAX_PORTS)
    lldp_source: str | None = Field(None, max_length=32, description="lldpctl, or null when no LLDP was read.")
    lldp_missing: str | None = Field(None, max_length=400, description="Why no switch port is known.")
    ethtool: bool = Field(False, description="`ethtool -S` answered for the physical ports.")
    skipped: list[Annotated[str, Field(max_length=64)]] = Field(
        default_factory=list, max_length=64, description="Interfaces not read past the port cap."
    )
