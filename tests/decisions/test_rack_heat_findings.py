"""The rack's cooling ticket under the review of the group tickets (findings 1, 2, 4, 6, 10), through the
real ingest path from the real `ipmitool sensor list` of a CPU past its upper critical threshold: an old
open rack ticket takes a new heat wave of the rack (no breaker trip), a resolved one is reopened only on
heat from after its repair, a returning wave brings its hosts into the ticket, and a host with its own fan
fault neither counts toward the rack nor is listed as its heat. Each test failed on the code before."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from bench.samples import sample
from remediator import rack_heat
from remediator.ingest import ingest
from remediator.models import RuleState
from tests.decisions.harness import RULES, SnapHost, register, remediations, run
from tests.decisions.harness import T0 as SCENARIO_T0
from tests.decisions.test_rack_heat import (
    HOT_CPU,
    decisions_of,
    on_the_scenario_clock,
    quiet_datacenter,
    run_hot,
    signal_on,
    ticket_of,
)
from ticketing import groups
from ticketing import service as tickets
from ticketing.models import Ticket, TicketEvent
from ticketing.schemas import Resolution

DAY = 24 * 60


def rack_tickets(session: Session) -> list[Ticket]:
    return session.query(Ticket).filter(Ticket.part_type == "rack_airflow").order_by(Ticket.id).all()


def claimed_rack_ticket(session: Session, tmp_path: Path, actor: str = "user:tech") -> Ticket:
    """dt-hot-01 and dt-hot-02 of ams1/r12 ran hot at the scenario's start: the rack's ticket, claimed."""
    quiet_datacenter(session)
    run_hot(session, tmp_path, "dt-hot-01", "r12")
    run_hot(session, tmp_path, "dt-hot-02", "r12")
    rack = ticket_of(session, "dt-hot-02")
    on_the_scenario_clock(session, rack)
    tickets.claim(session, rack, actor=actor, now=SCENARIO_T0 + dt.timedelta(minutes=5))
    return rack


@pytest.mark.parametrize("gap_days", [0, 3])
def test_a_heat_wave_on_an_old_open_rack_ticket_plans_nothing(session: Session, tmp_path: Path, gap_days: int) -> None:
    """Finding 1. Before: with the rack's ticket last detected three days ago, 8 hosts of the rack hot in one
    batch each planned a remediation (the route found the ticket stale), whose ticket step then joined the
    same ticket anyway; the fifth tripped the heat rule's breaker for the datacenter (6 of 110 > 5%), so
    every sensor-critical-temperature firing of ams1 was skipped until an operator reset it."""
    rack = claimed_rack_ticket(session, tmp_path)
    hosts = []
    for n in range(3, 11):
        host = SnapHost(tmp_path, f"dt-hot-{n:02d}")
        host.sensors(sample(HOT_CPU))
        register(session, host, rack="r12")
        hosts.append(host)
    result = ingest(session, [h.cycle(gap_days * DAY + 30) for h in hosts], ruleset=RULES)
    assert not result.refused
    assert {h.hostname: remediations(session, h.hostname) for h in hosts} == {h.hostname: [] for h in hosts}
    assert not [s.rule_id for s in session.query(RuleState).all() if s.breaker_open]
    for host in hosts:
        assert f"ticket {rack.id} (claimed) holds this part" in " ".join(decisions_of(session, host.hostname))
    assert [t.id for t in rack_tickets(session)] == [rack.id]
    session.refresh(rack)
    listed = [h["hostname"] for h in rack.evidence["rack_heat"]["hosts"]]
    assert set(listed) >= {h.hostname for h in hosts}  # the wave's hosts are on the ticket now
    returned = [e.note for e in session.query(TicketEvent).filter_by(ticket_id=rack.id, kind="comment")]
    if gap_days:
        assert len(returned) == 1
        assert returned[0].startswith("heat returned after 3 days quiet: hosts dt-hot-03"), returned
    else:
        assert returned == []  # a rack hot for minutes is never "quiet"


def test_a_stale_rack_ticket_gives_a_lone_hot_host_its_own_ticket(session: Session, tmp_path: Path) -> None:
    """Finding 10: end to end, not the helper's return value. A lone hot host of a rack whose ticket was last
    detected days ago is its own heat: its own airflow ticket, the rack's untouched."""
    rack = claimed_rack_ticket(session, tmp_path)
    run_hot(session, tmp_path, "dt-hot-05", "r12", minute=3 * DAY)
    own = ticket_of(session, "dt-hot-05")
    assert (own.part_type, own.part, own.hostname) == ("airflow", "host", "dt-hot-05")
    session.refresh(rack)
    assert rack.detections == 1


def test_a_resolved_rack_ticket_is_reopened_only_on_heat_after_its_repair(session: Session, tmp_path: Path) -> None:
    """Finding 2. Before: dt-hot-01's reading from before the fix and dt-hot-02's after it made two hot hosts,
    so one host hot after the repair reopened the rack's ticket ("fault returned after the repair")."""
    quiet_datacenter(session)
    first = run_hot(session, tmp_path, "dt-hot-01", "r12")
    second = run_hot(session, tmp_path, "dt-hot-02", "r12")
    rack = ticket_of(session, "dt-hot-02")
    on_the_scenario_clock(session, rack)
    fixed = SCENARIO_T0 + dt.timedelta(minutes=20)
    tickets.claim(session, rack, actor="user:tech", now=fixed)
    tickets.resolve(session, rack, Resolution(note="CRAC fixed"), actor="user:tech", now=fixed)
    run(session, second, [second.cycle(30)])  # only dt-hot-02 is hot after the fix
    session.refresh(rack)
    assert (rack.state.value, rack.reopened) == ("resolved", 0)
    assert not any("reopened" in reason for reason in decisions_of(session, "dt-hot-02"))
    run(session, first, [first.cycle(31)])  # dt-hot-01 too, after the fix: the rack runs hot again
    session.refresh(rack)
    assert (rack.state.value, rack.reopened) == ("open", 1)
    assert f"ticket {rack.id} reopened" in " ".join(decisions_of(session, "dt-hot-01"))


def test_a_returning_wave_brings_its_hosts_to_the_old_rack_ticket(session: Session, tmp_path: Path) -> None:
    """Finding 4. Before: a month after dt-hot-01 and -02, dt-hot-05 and -06 ran hot and landed on the old
    ticket, which still named dt-hot-01 and -02 in its title and hosts, heard from nobody, and said nothing
    of the heat's return. The claim is kept (a person's; see docs/tickets.md), the comment reaches them."""
    rack = claimed_rack_ticket(session, tmp_path, actor="user:tech-who-left")
    run_hot(session, tmp_path, "dt-hot-05", "r12", minute=30 * DAY)  # alone: its own ticket
    run_hot(session, tmp_path, "dt-hot-06", "r12", minute=30 * DAY + 1)  # the rack is hot again: its ticket
    assert remediations(session, "dt-hot-06") == []
    session.refresh(rack)
    assert rack.title.endswith("2 hosts run hot: dt-hot-05 (CPU2 Temp), dt-hot-06 (CPU2 Temp)"), rack.title
    listed = [h["hostname"] for h in rack.evidence["rack_heat"]["hosts"]]
    assert listed == ["dt-hot-01", "dt-hot-02", "dt-hot-05", "dt-hot-06"]  # the old picture kept, the new last
    assert groups.heard_from(rack.evidence) == {"dt-hot-06": {"CPU2 Temp"}}
    comments = [e.note for e in session.query(TicketEvent).filter_by(ticket_id=rack.id, kind="comment")]
    assert comments == ["heat returned after 30 days quiet: hosts dt-hot-05, dt-hot-06"]
    assert (rack.state.value, rack.assignee) == ("claimed", "user:tech-who-left")


def test_a_host_with_its_own_fan_fault_does_not_make_a_rack_hot(session: Session, tmp_path: Path) -> None:
    """Finding 6. Before: dt-fan-01 kept its own ticket for its fan, but counted toward the rack's two hot
    hosts: dt-hot-02 hot alone then opened a rack ticket listing both."""
    quiet_datacenter(session)
    signal_on(session, "dt-fan-01", "r12", "fan_failure", "FAN3", 1.0)
    run_hot(session, tmp_path, "dt-fan-01", "r12")
    fan_own = ticket_of(session, "dt-fan-01")
    run_hot(session, tmp_path, "dt-hot-02", "r12")
    alone = ticket_of(session, "dt-hot-02")
    assert (alone.part_type, alone.hostname) == ("airflow", "dt-hot-02")
    assert rack_tickets(session) == []
    # a second host without a cause of its own: the rack's, which lists the fan host apart, with its ticket
    run_hot(session, tmp_path, "dt-hot-03", "r12")
    rack = ticket_of(session, "dt-hot-03")
    assert rack.part_type == "rack_airflow"
    assert [h["hostname"] for h in rack.evidence["rack_heat"]["hosts"]] == ["dt-hot-02", "dt-hot-03"]
    (fan,) = rack.evidence["rack_heat"]["own_cause_hosts"]
    assert (fan["hostname"], fan["cause"]) == ("dt-fan-01", "its own fan: fan_failure on FAN3")
    assert [t["id"] for t in fan["tickets"]] == [fan_own.id]
    assert "dt-fan-01" not in rack.title


def test_quiet_after_is_the_rack_s_fresh_window() -> None:
    assert groups.QUIET_AFTER == rack_heat.FRESH_WITHIN
