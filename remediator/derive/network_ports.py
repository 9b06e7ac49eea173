"""The parts behind the network signals (remediator/derive/network.py): a port's NIC and switch port, the
ports that back it up, and the candidates when every port errs at once."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from checker.schemas import Identity, NetworkState, NicPort
from remediator.signals import SignalValue


def _where(port: NicPort, firmware: str | None, network: NetworkState) -> str:
    nic = " ".join(x for x in (port.driver, port.bus_info) if x) or "NIC unknown"
    if firmware:
        nic += f" firmware {firmware}"
    lldp = port.lldp
    if lldp is not None and (lldp.chassis or lldp.chassis_id or lldp.port):
        switch = f"switch {lldp.chassis or lldp.chassis_id or '?'} port {lldp.port or '?'}"
    else:
        switch = f"switch port unknown ({network.lldp_missing or 'no LLDP neighbour'})"
    return f"{nic}, {switch}"


def part_of(port: NicPort, identity: Identity | None, network: NetworkState) -> dict[str, Any]:
    """What a ticket names: interface, NIC (driver, PCI address, firmware) and the switch port."""
    firmware = None
    if identity is not None:
        firmware = next((n.firmware for n in identity.firmware.nics if n.interface == port.interface), None)
    lldp = port.lldp
    return {
        "interface": port.interface,
        "driver": port.driver,
        "bus_info": port.bus_info,
        "firmware": firmware,
        "speed_mbps": port.speed_mbps,
        "operstate": port.operstate,
        "bond": port.master,
        "switch": (lldp.chassis or lldp.chassis_id) if lldp else None,
        "switch_port": lldp.port if lldp else None,
        "switch_port_descr": lldp.port_descr if lldp else None,
        "switch_mgmt_ip": lldp.mgmt_ip if lldp else None,
        "where": _where(port, firmware, network),
    }


def _linked(port: NicPort) -> bool:
    return port.physical and (port.operstate == "up" or port.carrier is True)


FLAPPING_DOWNS = 3  # downs in a day: nic-link-flapping's and nic-carrier-flapping's `value` (a test holds them equal)


def flapping_ports(downs: Mapping[str, Sequence[tuple[int, int]]]) -> set[str]:
    """The ports with FLAPPING_DOWNS or more downs in the day kept (NetMemory.downs): no backup for another."""
    return {name for name, entries in downs.items() if sum(count for _, count in entries) >= FLAPPING_DOWNS}


def _why_unreported(port: NicPort, ports: list[NicPort]) -> str:
    """Why a bond member's state is missing: its master has no bonding directory (the agent reads the bond's
    state from master/bonding: checker/collectors/network.py), or the agent predates that read."""
    if port.master == OVS_MASTER:
        return "its master is Open vSwitch, not a bond"
    if any(p.bond_mode for p in ports):
        return f"{port.master} is not a bond (a bridge or a team: no bonding state)"
    return f"an agent from before the bond state was read, or {port.master} is not a bond"


OVS_MASTER = "ovs-system"  # every port Open vSwitch holds has this master, whatever bridge or bond it is in
RESELECTED = "aggregator_reselection"  # a partner's `failover`: it carries once the port's aggregator is down


def _partner_counts(partner: NicPort, port: NicPort, members: list[NicPort]) -> bool | str | None:
    """Whether a linked bond partner carries this port's traffic when it is down: True, RESELECTED, False, or
    None when the report cannot tell (the member's bond state not read: an older agent, or a master that is no
    bond). `members`: the bond's linked members that are not flapping. In 802.3ad only a member of the active
    aggregator carries traffic (bonding marks the others `backup`: drivers/net/bonding/bond_3ad.c); a member
    of another aggregator (two independent switches, each with LACP: two aggregators in one bond) takes over
    once every port of the active one is down and bonding reselects (kernel commit 0622cab0341c, "bonding: fix
    802.3ad aggregator reselection", Linux 4.7), so it backs up a port that is the only linked member of its
    own aggregator (third review, finding 3) or whose other members there flap too (they go down with it: two
    ports on one switch that reloads; fourth review, finding 3), and not one whose aggregator keeps another
    steady member up. In the other modes a linked member takes over (active-backup's backup is there for that;
    Documentation/networking/bonding.rst)."""
    mode = port.bond_mode or partner.bond_mode
    if mode is None:
        return None
    if mode != "802.3ad":
        return True
    active = port.bond_active_aggregator or partner.bond_active_aggregator
    if partner.bond_state is not None:
        carries = partner.bond_state == "active" and (
            active is None or partner.bond_aggregator is None or partner.bond_aggregator == active
        )
    elif active is None or partner.bond_aggregator is None:
        return None
    else:
        carries = partner.bond_aggregator == active
    if carries:
        return True
    own = port.bond_aggregator
    if own is None or partner.bond_aggregator is None:
        return None if own is None else False  # the port's own aggregator unread: whether it is alone is unknown
    if partner.bond_aggregator == own:
        return False  # the same aggregator, not carrying: an individual or detached member
    alone = not any(p.bond_aggregator == own for p in members if p.interface not in (port.interface, partner.interface))
    return RESELECTED if alone else False


def port_redundancy(port: NicPort, ports: list[NicPort], flapping: Collection[str] = ()) -> dict[str, Any]:
    """Whether the host keeps its link without this port. A bond member is backed up only by a linked
    partner of its bond (another linked port, a provisioning or storage network, does not carry the bond's
    traffic: second review of the Redfish rules, finding 4) that is neither flapping itself (`flapping`:
    the ports with FLAPPING_DOWNS or more downs in the same day: two flapping members are no backup for each
    other) nor outside the bond's active 802.3ad aggregator (second review, finding 3); a port in no bond by
    any other linked port that is not flapping. `redundant` false: nothing carries this port's traffic while
    it is down, the one answer that holds the host; "unreported": a linked partner under the same master
    whose place in a bond the report does not give (an agent from before `bond_mode`, or a master that is no
    bond: a bridge, Open vSwitch's ovs-system, a team), which keeps the host in service as a linked partner
    did before the bond's state was read (third review, finding 2: holding on not knowing held every bonded
    host of a rack on a switch reload, uncapped, until their agents were upgraded, and OVS or team members
    for ever). `backup` says in words what carries the traffic, or why that is not known."""
    others = [p for p in ports if p.interface != port.interface and _linked(p)]
    partners = [p for p in others if port.master and p.master == port.master]
    steady = [p for p in partners if p.interface not in flapping]
    # whether the port is alone in its aggregator by the steady members only: a flapping one goes down with it
    # (one switch reloading takes both its ports: the fourth review, finding 3)
    verdicts = {p.interface: _partner_counts(p, port, steady) for p in steady}
    redundant: bool | str
    counted = [name for name, v in verdicts.items() if v in (True, RESELECTED)]
    unreported = [name for name, v in verdicts.items() if v is None]
    reselected = [name for name, v in verdicts.items() if v == RESELECTED]
    if port.master and counted:
        redundant, backup = True, f"bond partner {', '.join(counted)}"
        if reselected:
            backup += f" ({', '.join(reselected)} in another 802.3ad aggregator: once LACP reselects)"
    elif port.master == OVS_MASTER and unreported:  # a storage or tunnel port beside a br-ex uplink: no partner
        redundant = "unreported"
        backup = (
            f"another port under Open vSwitch is linked ({', '.join(unreported)}); whether it carries this port's "
            "traffic is not reported"
        )
    elif port.master and unreported:
        redundant = "unreported"
        backup = f"bond partner {', '.join(unreported)} linked; bond state not reported: {_why_unreported(port, ports)}"
    elif port.master:
        redundant, backup = False, "none"
    else:
        steady_others = [p.interface for p in others if p.interface not in flapping]
        redundant = bool(steady_others)
        backup = f"linked port {', '.join(steady_others)}" if steady_others else "none"
    return {
        "redundant": redundant,
        "backup": backup,
        "bond_partners_linked": [p.interface for p in partners],
        "bond_partners_counted": counted,
        "failover": RESELECTED if reselected and len(reselected) == len(counted) else None,
        "flapping_linked": [p.interface for p in others if p.interface in flapping],
        "other_linked": [p.interface for p in others],
    }


MAX_PORTS_COUNTED = 4  # every-port signals carry each port's own buckets up to this many ports (a NIC's)


def every_port_signal(
    linked: list[NicPort], details: dict[str, dict[str, Any]], floors: dict[str, float] | None = None
) -> SignalValue:
    """Errors on every port at once: a cable cannot do that. The candidates, most likely first. `floors`:
    each port's count from which it is over its allowance (remediator.derive.network.error_floor)."""
    devices = {(p.bus_info or "").rsplit(".", 1)[0] for p in linked}
    switches = {details[p.interface].get("switch") for p in linked}
    one_nic = len(devices) == 1 and "" not in devices
    candidates = []
    if one_nic:
        first = details[linked[0].interface]
        candidates.append(
            f"the NIC at {next(iter(devices))} ({first.get('driver')}, firmware {first.get('firmware')}): "
            "every port of it errs"
        )
    else:
        candidates.append(f"the NICs at {', '.join(sorted(d for d in devices if d)) or 'unknown addresses'}")
    candidates.append("the host: its PCIe slot or riser, or its power (errors on every port at once)")
    if len(switches) == 1 and None not in switches:
        candidates.append(f"the switch {next(iter(switches))}: every port goes to it")
    else:
        candidates.append("not a cable or optic: one cable cannot touch every port")
    counted: dict[int, int] = {}
    for p in linked:
        for at, n in details[p.interface]["counted"]:
            counted[at] = counted.get(at, 0) + n
    sinces = [str(details[p.interface]["since"]) for p in linked if details[p.interface].get("since")]
    detail = {
        "ports": [p.interface for p in linked],
        "where": _where_every(linked, details),
        "last_hour": {p.interface: details[p.interface]["last_hour"] for p in linked},
        "over_allowance": all(details[p.interface]["over_allowance"] for p in linked),
        "one_nic": one_nic,
        "candidates": candidates,
        "ambiguous": True,
        "since": min(sinces) if sinces else None,
        "counted": [[at, counted[at]] for at in sorted(counted)],
        "counted_s": details[linked[0].interface].get("counted_s"),  # the ports' bucket width
    }
    if len(linked) <= MAX_PORTS_COUNTED:  # each port's own, so a repair's recount is the smallest port's
        detail["counted_ports"] = {p.interface: details[p.interface]["counted"] for p in linked}
        detail["port_floors"] = {p.interface: (floors or {}).get(p.interface) for p in linked}
    subject = next(iter(devices)) if one_nic else "host"
    value = float(min(details[p.interface]["last_hour"] for p in linked))
    return SignalValue("nic_errors_every_port", subject, value, detail)


def _where_every(linked: list[NicPort], details: dict[str, dict[str, Any]]) -> str:
    """One line for the title: the NICs with their ports, and the switches they reach."""
    nics: dict[str, list[str]] = {}
    for port in linked:
        nic = " ".join(x for x in (port.driver, (port.bus_info or "").rsplit(".", 1)[0]) if x) or "NIC unknown"
        nics.setdefault(nic, []).append(port.interface)
    switches = sorted({str(details[p.interface].get("switch")) for p in linked if details[p.interface].get("switch")})
    text = "; ".join(f"{nic}: {', '.join(ports)}" for nic, ports in nics.items())
    return text + (f"; switch {', '.join(switches)}" if switches else "; switch ports unknown")


def note_link_redundancy(
    signals: list[SignalValue], network: NetworkState | None, flapping_today: Collection[str] = ()
) -> None:
    """Give the kernel log's link-down counts (device_event_count, kind nic_link_down) the same `redundant`
    the NIC counters' nic_link_flaps carry, so a flapping port beside another linked port leaves the host in
    service whichever source saw the flaps (default_rules.yaml nic-link-flapping / -redundant). Without the
    network section (an older agent, the collector failed) the answer is "unknown" (no linked partner is known
    at all), which nic-link-flapping takes, as before the bond's state was read: not knowing of another link
    is not having one. A partner under the same master whose bond state is missing is "unreported"."""
    ports = list(network.ports) if network is not None else []
    by_name = {p.interface: p for p in ports if p.physical}
    # a partner with its own day of flaps, by either source, is no backup (second review, 3): the counters'
    # day (`flapping_today`, as nic_link_flaps judges it: third review, note 9) or a signal of this report
    flapping = set(flapping_today) | {
        s.subject
        for s in signals
        if s.value >= FLAPPING_DOWNS
        and (s.kind == "nic_link_flaps" or (s.kind == "device_event_count" and s.detail.get("kind") == "nic_link_down"))
    }
    for signal in signals:
        if signal.kind != "device_event_count" or signal.detail.get("kind") != "nic_link_down":
            continue
        port = by_name.get(signal.subject)
        if port is None:
            signal.detail.update(redundant="unknown", backup="unknown: the report has no network section for it")
            continue
        signal.detail.update(port_redundancy(port, ports, flapping))
