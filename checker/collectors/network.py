"""Network ports: per physical interface, the kernel's error counters and link state from /sys/class/net,
the driver's own port counters (`ethtool -S`) and the switch port it is cabled to (`lldpctl -f json`).

Cheap and bounded: about twenty small sysfs reads per port; one `ethtool -S` per uplink port, each with a
5 s timeout; `lldpctl` once, its answer reused like the inventory commands (a switch port changes only when
someone recables). At most MAX_PORTS ports. Only uplinks are read (`uplink`): virtual interfaces (lo,
bridges, bonds, veth, VLANs: no /sys/class/net/X/device; their counters are their members' sums or
software's), SR-IOV VFs in the host's namespace (device/physfn), switchdev representors of VFs and SFs
(phys_port_name pfNvfM, pfNsfM), USB NICs such as a BMC's cdc_ether link (iDRAC, XCC, iLO: no PCI_SLOT_NAME)
and InfiniBand ports (type 32, not Ethernet's 1) are skipped before the cap, so 64 VFs never push the second
uplink out, and none of them cost an `ethtool -S`. A bond member costs four more reads (`_bonding`).

The switch port comes from lldpd only. The kernel parses no LLDP and sysfs has no neighbour table; NICs
whose firmware runs its own LLDP agent (i40e, ice, some mlx5 and bnxt setups) consume the frames before the
OS sees them, so such a host needs that agent off for lldpd to hear the switch: on ice `ethtool
--set-priv-flags IFACE fw-lldp-agent off`, on i40e `ethtool --set-priv-flags IFACE disable-fw-lldp on`.
Without lldpd the section says why (`lldp_missing`) and the ticket names the interface and NIC without the
switch port.
"""

from __future__ import annotations

import re

from checker.collectors.context import Context, Unavailable, command_failure
from checker.parsers.network import parse_ethtool_stats, parse_lldpctl_json, parse_sysfs_int, port_counters
from checker.schemas import LldpNeighbor, NetworkState, NicPort

NET = "/sys/class/net"
MAX_PORTS = 32
MAX_LISTED = 512  # interfaces looked at (a container host may have thousands of veths)
ETHTOOL_TIMEOUT_S = 5.0
LLDP_TIMEOUT_S = 5.0
LLDPCTL = ["lldpctl", "-f", "json"]
# The kernel's struct rtnl_link_stats64 counters that say something about the link or the NIC
# (Documentation/networking/statistics.rst); rx/tx packets for the error ratio.
STATISTICS = (
    "rx_packets",
    "tx_packets",
    "rx_errors",
    "tx_errors",
    "rx_crc_errors",
    "rx_frame_errors",
    "rx_length_errors",
    "rx_over_errors",
    "rx_fifo_errors",
    "rx_missed_errors",
    "rx_dropped",
    "tx_dropped",
    "tx_carrier_errors",
    "tx_aborted_errors",
    "tx_fifo_errors",
    "collisions",
)


def ethtool_stats_argv(interface: str) -> list[str]:
    return ["ethtool", "-S", interface]


def _uevent(text: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            fields[key.strip()] = value.strip()
    return fields


# A switchdev representor's phys_port_name: pf0vf3, c1pf0vf3, pf0sf1 (the uplink's own is p0 or none).
_REPRESENTOR = re.compile(r"^(?:c\d+)?pf\d+(?:vf|sf)\d+$")
ARPHRD_ETHER = "1"


def uplink(ctx: Context, interface: str, uevent: str) -> bool:
    """An Ethernet port of a PCI function of its own: what a cable or an optic plugs into."""
    base = f"{NET}/{interface}"
    if not _uevent(uevent).get("PCI_SLOT_NAME"):
        return False  # a USB NIC (a BMC's cdc_ether), a platform or virtio-mmio device
    kind = ctx.host.read_text(f"{base}/type")
    if kind is not None and kind.strip() != ARPHRD_ETHER:
        return False  # InfiniBand (32), IPoIB, anything not Ethernet
    if ctx.host.read_text(f"{base}/device/physfn/uevent") is not None:
        return False  # an SR-IOV VF in the host's namespace
    name = ctx.host.read_text(f"{base}/phys_port_name")
    return not (name and _REPRESENTOR.match(name.strip()))


def _port(ctx: Context, interface: str, uevent: str) -> NicPort:
    base = f"{NET}/{interface}"
    device = _uevent(uevent)
    master = _uevent(ctx.host.read_text(f"{base}/master/uevent") or "").get("INTERFACE")
    operstate = ctx.host.read_text(f"{base}/operstate")
    carrier = parse_sysfs_int(ctx.host.read_text(f"{base}/carrier"))
    statistics: dict[str, int] = {}
    for name in STATISTICS:
        value = parse_sysfs_int(ctx.host.read_text(f"{base}/statistics/{name}"))
        if value is not None:
            statistics[name] = value
    port = NicPort(
        interface=interface[:64],
        physical=True,
        operstate=operstate.strip()[:16] if operstate else None,
        carrier=None if carrier is None else carrier == 1,
        speed_mbps=parse_sysfs_int(ctx.host.read_text(f"{base}/speed")),
        driver=device.get("DRIVER", "")[:64] or None,
        bus_info=device.get("PCI_SLOT_NAME", "")[:64] or None,
        carrier_changes=parse_sysfs_int(ctx.host.read_text(f"{base}/carrier_changes")),
        carrier_down_count=parse_sysfs_int(ctx.host.read_text(f"{base}/carrier_down_count")),
        master=master[:64] if master else None,
        statistics=statistics,
    )
    if master:
        _bonding(ctx, base, port)
    return port


def _bonding(ctx: Context, base: str, port: NicPort) -> None:
    """A bond member's place in its bond (drivers/net/bonding/bond_sysfs.c and bond_sysfs_slave.c): the
    bond's mode, the member's state (active or backup: an 802.3ad member outside the active aggregator is
    backup) and its aggregator, so the centre can tell a partner that carries the bond's traffic from one
    that does not (second review of the Redfish rules, finding 3). Four small reads; none for a bridge."""
    mode = (ctx.host.read_text(f"{base}/master/bonding/mode") or "").split()
    if not mode:
        return  # a bridge or other master: no bonding directory
    state = (ctx.host.read_text(f"{base}/bonding_slave/state") or "").strip()
    port.bond_mode = mode[0][:32]
    port.bond_state = state[:16] or None
    port.bond_aggregator = parse_sysfs_int(ctx.host.read_text(f"{base}/bonding_slave/ad_aggregator_id"))
    port.bond_active_aggregator = parse_sysfs_int(ctx.host.read_text(f"{base}/master/bonding/ad_aggregator"))


def _driver_counters(ctx: Context, ports: list[NicPort]) -> bool:
    """`ethtool -S` for each port; False when ethtool is not there (then no port is asked)."""
    answered = False
    for port in ports:
        result = ctx.run(ethtool_stats_argv(port.interface), ETHTOOL_TIMEOUT_S)
        if result.missing:
            ctx.problem(f"driver counters: {command_failure(result)}")
            return False
        if result.returncode != 0 or result.timed_out:
            ctx.problem(f"{port.interface}: {command_failure(result)}")
            continue
        counters = ctx.take(parse_ethtool_stats(result.stdout), f"ethtool -S {port.interface}", result.stdout)
        port.driver_counters = port_counters(counters)
        answered = True
    return answered


def _lldp(ctx: Context) -> tuple[dict[str, LldpNeighbor], str | None]:
    result = ctx.run(LLDPCTL, LLDP_TIMEOUT_S, memo=True)
    if result.missing:
        return {}, "lldpctl not installed (lldpd): the switch port is not known"
    if result.returncode != 0 or result.timed_out:
        return {}, command_failure(result)
    neighbors = ctx.take(parse_lldpctl_json(result.stdout), "lldpctl -f json", result.stdout)
    if not neighbors:
        return {}, "lldpd hears no neighbour (the switch sends no LLDP, or the NIC's firmware agent takes it)"
    return neighbors, None


def collect(ctx: Context) -> None:
    names = ctx.host.list_dir(NET)
    if names is None:
        raise Unavailable(f"no {NET}")
    ports: list[NicPort] = []
    skipped: list[str] = []
    for interface in names[:MAX_LISTED]:
        uevent = ctx.host.read_text(f"{NET}/{interface}/device/uevent")
        if uevent is None or not uplink(ctx, interface, uevent):
            continue  # virtual (lo, bridges, bonds, veth, VLANs), a VF, a representor, USB, InfiniBand
        if len(ports) >= MAX_PORTS:
            skipped.append(interface[:64])
            continue
        ports.append(_port(ctx, interface, uevent))
    if not ports:
        raise Unavailable(f"no physical network interface in {NET} (no Ethernet port of a PCI function of its own)")
    state = NetworkState(ports=ports, skipped=skipped[:64])
    if skipped:
        ctx.problem(f"more than {MAX_PORTS} physical ports; {len(skipped)} not read")
    ctx.observations.network = state  # before the tools: a budget that runs out keeps the sysfs counters
    ctx.source = "sysfs"
    neighbors, missing = _lldp(ctx)  # first: memoised, so it costs a spawn once per inventory refresh
    for port in ports:
        port.lldp = neighbors.get(port.interface)
    state.lldp_source = "lldpctl" if neighbors else None
    state.lldp_missing = missing[:400] if missing else None
    state.ethtool = _driver_counters(ctx, ports)
    ctx.source = "sysfs+ethtool" if state.ethtool else "sysfs"
