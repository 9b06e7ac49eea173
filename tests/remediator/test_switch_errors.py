"""CRC errors on three hosts behind one switch: one `switch` ticket, the hosts in service (review S4)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from remediator import switch_errors
from remediator.inventory import HostInventory, apply_inventory
from remediator.models import Host, Signal
from remediator.rules import load_ruleset
from ticketing import service as tickets
from ticketing.models import TicketState
from ticketing.schemas import TicketRequest

NOW = dt.datetime.now(dt.UTC).replace(microsecond=0) - dt.timedelta(hours=1)
RULES = {rule.id: rule for rule in load_ruleset([]).rules}


def erring(session: Session, hostname: str, *, switch: str = "ams1-r07-tor1", minutes_ago: int = 5) -> Host:
    apply_inventory(session, [HostInventory(hostname=hostname, datacenter="ams1", rack="r07")], actor="test")
    host = session.scalars(select(Host).where(Host.hostname == hostname)).one()
    detail = {"scope": "one-port", "rising": True, "over_allowance": True, "switch": switch, "switch_port": "Ethernet1"}
    session.add(
        Signal(
            host_id=host.id,
            kind="nic_crc_error_rate",
            subject="ens1f0np0",
            value=400.0,
            detail=detail,
            observed_at=NOW - dt.timedelta(minutes=minutes_ago),
        )
    )
    session.flush()
    return host


def cable_request(host: Host, **over: Any) -> TicketRequest:
    base = {
        "hostname": host.hostname,
        "datacenter": "ams1",
        "rack": "r07",
        "part_type": "nic",
        "part": "ens1f0np0",
        "title": f"CRC errors on {host.hostname} ens1f0np0",
        "evidence": {"part": {"interface": "ens1f0np0", "switch": "ams1-r07-tor1"}},
        "holds_host": False,
    }
    return TicketRequest(**{**base, **over})


def test_three_hosts_behind_one_switch_make_one_switch_ticket(session: Session) -> None:
    first, second = erring(session, "h1"), erring(session, "h2")
    erring(session, "h9", switch="ams1-r08-tor1")  # another switch: not counted
    assert switch_errors.grouped(session, first, cable_request(first), NOW).part_type == "nic"  # two: cables
    third = erring(session, "h3")
    request = switch_errors.grouped(session, third, cable_request(third), NOW)
    assert (request.part_type, request.part, request.holds_host) == ("switch", "switch ams1-r07-tor1", False)
    assert [h["hostname"] for h in request.evidence["switch_errors"]["hosts"]] == ["h1", "h2", "h3"]
    assert request.title.startswith("CRC errors on 3 hosts behind switch ams1-r07-tor1")
    ticket, created = tickets.open_ticket(session, request, actor="test")
    assert created
    again = switch_errors.grouped(session, second, cable_request(second), NOW)
    assert again.dedup_key == ticket.dedup_key  # the second host's request is a detection of that ticket
    found = switch_errors.switch_ticket_for(
        session, second, RULES["nic-crc-errors"], cable_request(second).evidence["part"] | {"scope": "one-port",
        "rising": True, "over_allowance": True}, NOW,
    )  # fmt: skip
    assert found is not None
    assert found.id == ticket.id
    assert switch_errors.has_heard_from(ticket.evidence, "h2")


def test_a_holding_ticket_or_old_errors_stay_the_hosts(session: Session) -> None:
    hosts = [erring(session, f"h{n}") for n in range(1, 4)]
    held = cable_request(hosts[0], holds_host=True)  # the host's only link flapping: its own ticket
    assert switch_errors.grouped(session, hosts[0], held, NOW).part_type == "nic"
    later = NOW + dt.timedelta(hours=2)  # an hour and more after the errors: another episode
    assert switch_errors.grouped(session, hosts[0], cable_request(hosts[0]), later).part_type == "nic"
    no_lldp = cable_request(hosts[0], evidence={"part": {"interface": "ens1f0np0", "switch": None}})
    assert switch_errors.grouped(session, hosts[0], no_lldp, NOW).part_type == "nic"


def test_the_switch_s_hosts_are_found_among_a_datacenter_of_other_switches(session: Session, monkeypatch: Any) -> None:
    """The hosts behind one switch are chosen in SQL (a WHERE on the switch, each port's newest erring row),
    not from the datacenter's CRC rows of every switch cut at 4000 in hostname order: there, hosts sorting
    first behind other switches filled the limit and this switch's three were never seen. Since a repair's
    resolve, each port's newest row too, erring or not (review r4, finding 8: every row since the resolve,
    cut at 4000 in hostname order, dropped the last hosts of a switch with ~66 erring ports)."""
    for n in range(12):  # hostnames sorting before ours, behind other switches, each erring twice
        erring(session, f"a{n:02}", switch=f"ams1-r{n:02}-tor9")
        erring(session, f"a{n:02}", switch=f"ams1-r{n:02}-tor9", minutes_ago=15)
    for name in ("z1", "z2", "z3"):
        erring(session, name)
        erring(session, name, minutes_ago=20)  # an older row of the same port: the newest is the one read
    read: list[int] = []
    execute = session.execute

    def counting(*args: Any, **kwargs: Any) -> Any:
        frozen = execute(*args, **kwargs).freeze()
        read.append(len(frozen().all()))
        return frozen()

    monkeypatch.setattr(session, "execute", counting)
    hosts = switch_errors.erring_hosts(session, "ams1", "ams1-r07-tor1", NOW)
    assert [h["hostname"] for h in hosts] == ["z1", "z2", "z3"]
    assert hosts[0]["ports"] == {"ens1f0np0": {"last_hour": 400.0, "switch_port": "Ethernet1"}}
    assert read == [3]  # one row per port of this switch: not the datacenter's 30 CRC rows, nor 10 of them
    fixed = NOW - dt.timedelta(minutes=30)  # since a repair's resolve: each port's newest row, of this switch only
    assert [h["hostname"] for h in switch_errors.erring_hosts(session, "ams1", "ams1-r07-tor1", NOW, fixed)] == [
        "z1",
        "z2",
        "z3",
    ]
    assert read == [3, 3]  # not the six rows of this switch since then (the older row of each port is left)


def test_after_a_switch_ticket_closed_the_request_counts_from_its_repair_as_the_route(session: Session) -> None:
    """Review r4, finding 5: resolved 40 minutes ago, closed 5 minutes ago; h1 and h2 erred 50 minutes ago, h3
    errs now. The route recounted from the resolve (one host: no switch ticket); grouped() found no open switch
    ticket, counted the whole hour and opened a new switch ticket listing h1 and h2, whose errors came before
    the repair."""
    erring(session, "h1", minutes_ago=50)
    erring(session, "h2", minutes_ago=50)
    h3 = erring(session, "h3", minutes_ago=50)
    request = switch_errors.grouped(session, h3, cable_request(h3), NOW - dt.timedelta(minutes=49))
    ticket, _created = tickets.open_ticket(session, request, actor="test")
    assert ticket.part_type == "switch"
    ticket.state = TicketState.closed
    ticket.resolved_at = NOW - dt.timedelta(minutes=40)
    ticket.closed_at = NOW - dt.timedelta(minutes=5)
    session.flush()
    erring(session, "h3", minutes_ago=1)  # h3 still erring on its own cable after the repair
    crc = {**cable_request(h3).evidence["part"], "scope": "one-port", "rising": True, "over_allowance": True}
    window = dt.timedelta(days=30)
    assert switch_errors.switch_ticket_for(session, h3, RULES["nic-crc-errors"], crc, NOW, window) is None
    again = switch_errors.grouped(session, h3, cable_request(h3), NOW)
    assert (again.part_type, again.part) == ("nic", "ens1f0np0")  # h3's cable, as the route judged
    # three hosts erring after the repair: the switch again
    erring(session, "h1", minutes_ago=2)
    erring(session, "h2", minutes_ago=2)
    assert switch_errors.grouped(session, h3, cable_request(h3), NOW).part_type == "switch"
