"""A silent host, looked at from outside before any rule decides what it needs.

Silence from the agent alone is not proof of a hung host: the agent may have died on a healthy
machine, the host may be powered off, or nothing may be reachable at all. `probe` has cyborg ask the
BMC for the chassis power state and ping the host's address (`Cyborg.look`), and names what it saw:

| BMC power | ping       | verdict        | what can help                                  |
|-----------|------------|----------------|------------------------------------------------|
| off       | —          | `powered_off`  | power it on; a person if it stays off          |
| any       | answers    | `agent_silent` | restart the agent; a person — never a power cycle |
| on        | no answer  | `hung`         | a power cycle through the BMC                  |
| unknown   | no answer  | `unconfirmed`  | a person: nothing proves the host is hung      |

A `hung` verdict becomes `unconfirmed` when other hosts of the same rack are silent too: the ping
comes from the centre, and a rack's switch or power failing silences every host behind it, which a
power cycle of one host cannot help (`rack_silent`); and when the host's own network was failing: its
last report showed link flaps or CRC errors on its only linked port, or a NIC ticket of it is open
(`network_suspect`): a port that stopped passing frames silences a running host too. The signal's
detail has `ping_sent` and `ping_received` from ping's summary (null when not pinged).

The probe runs on a central worker (`remediator.probe_silent_host`), one task per silent host,
and hands the `host_unreachable` signal, with that verdict in its detail, to the rules.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from cyborg.central import Cyborg, Target
from remediator.models import Host, Signal
from remediator.signals import SignalValue
from ticketing import queries


@dataclass(frozen=True)
class Probe:
    power: str  # on, off, unknown
    ping: str  # answered, no_answer, not_probed
    verdict: str  # hung, powered_off, agent_silent, unconfirmed
    bmc: str | None  # the BMC's address, if any
    address: str
    notes: list[str]
    commands: list[dict[str, object]]


def verdict_of(power: str, ping: str) -> str:
    if power == "off":
        return "powered_off"
    if ping == "answered":
        return "agent_silent"
    if power == "on" and ping == "no_answer":
        return "hung"
    return "unconfirmed"


def probe(target: Target, cyborg: Cyborg) -> Probe:
    """What cyborg sees of the host from outside, and the verdict; no database is touched (the caller holds
    no transaction)."""
    seen = cyborg.look(target)
    verdict = verdict_of(seen.power, seen.ping)
    return Probe(seen.power, seen.ping, verdict, seen.bmc, seen.address, list(seen.notes), list(seen.commands))


MAX_PEERS = 20


def rack_silent(session: Session, host: Host, now: dt.datetime, stale_s: float) -> list[str]:
    """The other hosts of this host's rack, in any state, that are silent now (nothing for `stale_s`)
    and went silent about when this one did (their last reports within two report intervals of its):
    hosts that a rack's switch or power silenced together, even where one was marked unreachable a
    sweep before the others, and not a peer that has been off for days."""
    if not host.rack or host.last_report_at is None:
        return []
    near = dt.timedelta(seconds=2 * host.report_interval_s)
    return list(
        session.scalars(
            select(Host.hostname)
            .where(
                Host.datacenter == host.datacenter,
                Host.rack == host.rack,
                Host.id != host.id,
                Host.last_report_at.is_not(None),
                Host.last_report_at >= host.last_report_at - near,
                Host.last_report_at <= host.last_report_at + near,
                Host.last_report_at < now - dt.timedelta(seconds=stale_s),
            )
            .order_by(Host.hostname)
            .limit(MAX_PEERS)
        ).all()
    )


def with_rack(seen: Probe, rack: str | None, peers: list[str]) -> Probe:
    """A hung verdict is not proof when the rack's other hosts are silent as well."""
    if seen.verdict != "hung" or not peers:
        return seen
    note = (
        f"{len(peers)} other host(s) of rack {rack} are silent too ({', '.join(peers[:5])}): "
        "the rack's switch or power, not this host, may be what failed"
    )
    return dataclasses.replace(seen, verdict="unconfirmed", notes=[*seen.notes, note])


_PING_SUMMARY = re.compile(r"(\d+) packets transmitted, (\d+) (?:packets )?received")
NETWORK_KINDS = ("nic_link_flaps", "nic_crc_error_rate")
UNSHOWN_BACKUP = ("unreported", "unknown")  # port_redundancy's answers where no backup was shown to carry


def ping_counts(commands: list[dict[str, Any]]) -> tuple[int | None, int | None]:
    """Echo requests sent and replies received, from ping's -q summary in the command log."""
    for record in reversed(commands):
        argv = record.get("argv") or []
        if argv and argv[0] == "ping" and (m := _PING_SUMMARY.search(str(record.get("output") or ""))):
            return int(m.group(1)), int(m.group(2))
    return None, None


def network_suspect(session: Session, host: Host) -> str | None:
    """Why the host's own network may be what silenced it: an open NIC ticket, or its last report's link
    flaps or CRC errors on a port that was its only linked one, or whose backup the report could not show
    (`redundant` "unreported" or "unknown": an Open vSwitch port beside another linked one, a bond member whose
    bond state an older agent did not read; the fourth review of the Redfish rules, finding 5: a power cycle
    must not follow a "hung" verdict on a backup nobody saw). None when nothing says so."""
    nic = [t for t in queries.open_tickets_of_host(session, host.hostname) if t.part_type == "nic"]
    if nic:
        return f"NIC ticket {nic[0].id} is open ({nic[0].part}): its network may be what failed"
    if host.last_report_at is None:
        return None
    rows = session.scalars(
        select(Signal).where(
            Signal.host_id == host.id,
            Signal.kind.in_(NETWORK_KINDS),
            Signal.observed_at >= host.last_report_at - dt.timedelta(seconds=host.report_interval_s),
        )
    ).all()
    for row in rows:
        redundant = (row.detail or {}).get("redundant")
        if redundant is False:
            return f"its last report showed {row.kind} on {row.subject}, its only linked port"
        if redundant in UNSHOWN_BACKUP:
            return f"its last report showed {row.kind} on {row.subject}, and no port shown to carry its traffic"
    return None


def with_network(seen: Probe, why: str | None) -> Probe:
    """A hung verdict is not proof when the host's only link was failing: a person, not a power cycle."""
    if seen.verdict != "hung" or why is None:
        return seen
    return dataclasses.replace(seen, verdict="unconfirmed", notes=[*seen.notes, why])


def unreachable_signal(host: Host, seen: Probe, now: dt.datetime) -> SignalValue:
    silent = (now - host.last_report_at).total_seconds() if host.last_report_at else 0.0
    sent, received = ping_counts(seen.commands)
    detail: dict[str, object] = {
        "last_report_at": host.last_report_at.isoformat() if host.last_report_at else None,
        "verdict": seen.verdict,
        "power": seen.power,
        "ping": seen.ping,
        "ping_sent": sent,
        "ping_received": received,
        "address": seen.address,
        "bmc": seen.bmc,
        "notes": seen.notes,
        "commands": seen.commands[-6:],
    }
    return SignalValue("host_unreachable", "", silent, detail)
