"""Several hosts of one rack running hot point at the rack's cooling: ONE ticket for the rack, listing
its hot hosts and their sensors, through the real ingest path from the real `ipmitool sensor list` of a
CPU past its upper critical threshold. Each host's own firing is still recorded; a host hot alone, or
in another rack, keeps its own airflow ticket."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from sqlalchemy.orm import Session

from bench.samples import sample
from checker.sim import SimulatedFleet
from remediator import rack_heat
from remediator.ingest import ingest
from remediator.inventory import HostInventory, apply_inventory
from remediator.models import Decision, Host, Signal
from tests.builders.observations import T0
from tests.decisions.harness import RULES, SnapHost, register, remediations, run, to_ticket
from tests.decisions.harness import T0 as SCENARIO_T0
from ticketing import service as tickets
from ticketing.models import Ticket
from ticketing.schemas import Resolution

HOT_CPU = "thermal/ipmitool-sensor-list-cpu2-temp-cr-above-upper-critical.txt"
NR_CPU = "thermal/ipmitool-sensor-list-supermicro-dual-socket-cpu2-temp-nr-lowered-thresholds.txt"


def quiet_datacenter(session: Session) -> None:
    # a datacenter of 100 hosts, so the firings stay within the rule's breaker (5 %)
    rows = [HostInventory(hostname=f"dt-quiet-{n:03d}", datacenter="ams1", rack=f"q{n // 20}") for n in range(100)]
    apply_inventory(session, rows, actor="test")


def run_hot(session: Session, tmp: Path, hostname: str, rack: str, minute: int = 0, listing: str = HOT_CPU) -> SnapHost:
    host = SnapHost(tmp, hostname)
    host.sensors(sample(listing) if "/" in listing else listing)
    register(session, host, rack=rack)
    run(session, host, [host.cycle(minute)])
    return host


def decisions_of(session: Session, hostname: str, *, rules: bool = False) -> list[str]:
    host_id = session.query(Host.id).filter(Host.hostname == hostname).scalar()
    found = session.query(Decision).filter(Decision.host_id == host_id).order_by(Decision.id)
    return [f"{d.rule_id}: {d.reason}" if rules else d.reason for d in found]


def ticket_of(session: Session, hostname: str) -> Ticket:
    (remediation,) = [r for r in remediations(session, hostname) if r.rule_id == "sensor-critical-temperature"]
    ticket = to_ticket(session, remediation)
    assert ticket is not None
    return ticket


def test_hot_hosts_of_one_rack_share_one_cooling_ticket(session: Session, tmp_path: Path) -> None:
    quiet_datacenter(session)
    run_hot(session, tmp_path, "dt-hot-01", "r12")
    alone = ticket_of(session, "dt-hot-01")
    assert (alone.part_type, alone.part) == ("airflow", "host")  # the first hot host of the rack: its own
    assert alone.holds_host is False  # the heat's cause is around the host: it keeps working

    run_hot(session, tmp_path, "dt-hot-02", "r12")
    rack = ticket_of(session, "dt-hot-02")
    assert (rack.part_type, rack.part, rack.rack) == ("rack_airflow", "rack r12", "r12")
    assert rack.title.startswith("Cooling check of rack r12 (ams1): 2 hosts run hot"), rack.title
    assert "dt-hot-01 (CPU2 Temp)" in rack.title
    assert "dt-hot-02 (CPU2 Temp)" in rack.title
    listed = {h["hostname"]: h["sensors"] for h in rack.evidence["rack_heat"]["hosts"]}
    assert listed["dt-hot-01"]["CPU2 Temp"]["thresholds"]["ucr"] == 30.0  # the reading and what it crossed
    assert rack.holds_host is False
    # the first host's own airflow ticket is linked from the rack's (one fault, the rack's ticket says so)
    assert [t["id"] for t in rack.evidence["rack_heat"]["host_tickets"]] == [alone.id]

    # a third hot host of the rack: its firing is recorded and goes to the rack's ticket, no ticket of its own
    run_hot(session, tmp_path, "dt-hot-03", "r12")
    assert remediations(session, "dt-hot-03") == []
    assert f"ticket {rack.id}" in " ".join(decisions_of(session, "dt-hot-03"))
    session.refresh(rack)
    assert rack.detections == 2  # the opening, and the third host
    assert [d.get("host") for d in rack.evidence["detections"]] == ["dt-hot-03"]
    assert session.query(Ticket).filter(Ticket.part_type == "rack_airflow").count() == 1

    run_hot(session, tmp_path, "dt-hot-04", "r13")
    other = ticket_of(session, "dt-hot-04")
    assert (other.part_type, other.part) == ("airflow", "host")  # alone in its rack

    # every host's own firing is recorded, whichever ticket it went to
    for name in ("dt-hot-01", "dt-hot-02", "dt-hot-03", "dt-hot-04"):
        assert any(d.startswith("sensor-critical-temperature") for d in decisions_of(session, name, rules=True))


def test_a_hot_host_s_later_detections_go_to_its_rack_s_ticket(session: Session, tmp_path: Path) -> None:
    quiet_datacenter(session)
    run_hot(session, tmp_path, "dt-hot-01", "r12")
    ticket_of(session, "dt-hot-01")
    second = run_hot(session, tmp_path, "dt-hot-02", "r12")
    rack = ticket_of(session, "dt-hot-02")
    run(session, second, [second.cycle(90)])  # still hot an hour and a half later
    reasons = decisions_of(session, "dt-hot-02")
    assert any(f"ticket {rack.id}" in reason for reason in reasons), reasons
    assert len(remediations(session, "dt-hot-02")) == 1  # no new remediation per report


def test_the_demo_fleet_shows_one_cooling_ticket_for_its_hot_rack(session: Session) -> None:
    """`make run`'s fleet (50 hosts, showcase): the rack_hot fault heats its host and a healthy neighbour of
    its rack; both report in the same cycle, so both plans open the rack's one ticket, none its own."""
    fleet = SimulatedFleet(50, seed=1, fault_fraction=0.5, showcase=True)
    hot = sorted(h.hostname for h in fleet.hosts if h.rack_heat is not None)
    assert len(hot) >= 2
    apply_inventory(session, [HostInventory(**row) for row in fleet.inventory()], actor="test")
    for minute in (0, 1):
        ingest(session, fleet.reports(T0 + dt.timedelta(minutes=minute)), ruleset=RULES)
    heat_rules = {"sensor-critical-temperature", "cpu-package-throttling", "thermal-throttling"}
    for hostname in hot:
        for remediation in remediations(session, hostname):
            if remediation.rule_id in heat_rules:
                to_ticket(session, remediation)
    # the BMC's threshold entries (checker/sim/heat.py log_thresholds): sel-temperature-high decides on each hot host
    sel_rule = session.query(Decision.host_id).filter(Decision.rule_id == "sel-temperature-high").distinct().count()
    assert sel_rule == len(hot)
    tickets = session.query(Ticket).filter(Ticket.part_type.in_(["rack_airflow", "airflow"])).all()
    assert [(t.part_type, t.part) for t in tickets] == [("rack_airflow", f"rack {fleet.by_name(hot[0]).rack}")]
    listed = sorted(h["hostname"] for h in tickets[0].evidence["rack_heat"]["hosts"])
    assert listed == hot
    # and its evidence shows the BMC's entries of the host it opened on, asserted once per threshold
    logged = [(e["sensor_name"], e["event"]) for e in tickets[0].evidence["sel"] if e["sensor_type"] == "Temperature"]
    assert ("CPU1 Temp", "Upper Critical going high") in logged
    assert len(logged) == len(set(logged))


# -- the review's findings (each failed on the code before) -----------------------------------------


def signal_on(
    session: Session, hostname: str, rack: str, kind: str, subject: str, value: float, **detail: object
) -> None:
    register(session, SnapHost(Path("/nonexistent"), hostname), rack=rack)
    host_id = session.query(Host.id).filter(Host.hostname == hostname).scalar()
    session.add(
        Signal(host_id=host_id, kind=kind, subject=subject, value=value, detail=detail, observed_at=SCENARIO_T0)
    )
    session.flush()


def test_one_throttle_event_on_a_neighbour_is_no_rack_fault(session: Session, tmp_path: Path) -> None:
    """Before: any throttle signal of a neighbour within the hour (one event, 1% of a minute) made a host's
    own airflow ticket the rack's. Only a neighbour at a heat rule's threshold counts now."""
    quiet_datacenter(session)
    signal_on(session, "dt-warm-01", "r12", "cpu_throttle_events", "package 0", 60.0)
    signal_on(session, "dt-warm-01", "r12", "cpu_throttle_percent", "package 0", 1.0)
    signal_on(session, "dt-warm-01", "r12", "kernel_event_count", "thermal_throttle", 1.0)
    run_hot(session, tmp_path, "dt-hot-02", "r12")
    own = ticket_of(session, "dt-hot-02")
    assert (own.part_type, own.part) == ("airflow", "host")


def test_a_host_with_a_fan_fault_keeps_its_own_ticket(session: Session, tmp_path: Path) -> None:
    quiet_datacenter(session)
    run_hot(session, tmp_path, "dt-hot-01", "r12")
    signal_on(session, "dt-fan-02", "r12", "fan_failure", "FAN3", 1.0)
    run_hot(session, tmp_path, "dt-fan-02", "r12")
    own = ticket_of(session, "dt-fan-02")
    assert (own.part_type, own.part, own.hostname) == ("airflow", "host", "dt-fan-02")  # its fan, not the rack
    assert session.query(Ticket).filter(Ticket.part_type == "rack_airflow").count() == 0


def test_a_host_past_non_recoverable_is_drained_not_grouped(session: Session, tmp_path: Path) -> None:
    """Before: every temperature firing left the host in service, and beside a rack ticket an nr host only
    added a detection to it."""
    quiet_datacenter(session)
    run_hot(session, tmp_path, "dt-hot-01", "r12")
    run_hot(session, tmp_path, "dt-hot-02", "r12")
    rack = ticket_of(session, "dt-hot-02")
    assert rack.part_type == "rack_airflow"
    run_hot(session, tmp_path, "dt-nr-03", "r12", listing=NR_CPU)
    (remediation,) = remediations(session, "dt-nr-03")
    assert (remediation.rule_id, remediation.disruptive) == ("sensor-critical-temperature-nr", True)  # drain first
    reasons = decisions_of(session, "dt-nr-03", rules=True)
    assert not any(f"ticket {rack.id}" in reason for reason in reasons), reasons
    own = to_ticket(session, remediation)
    assert own is not None
    assert (own.part_type, own.part, own.hostname, own.holds_host) == ("airflow", "host", "dt-nr-03", True)
    assert "ucr 30, unr 30" in own.title


def test_a_stale_rack_ticket_takes_new_heat_only_from_a_hot_rack(session: Session, tmp_path: Path) -> None:
    """The route's view (end to end: tests/decisions/test_rack_heat_findings.py): within FRESH_WITHIN a hot
    host of the rack joins its ticket; later, only while the rack runs hot as a rack (here dt-hot-01 and -02
    still are, around dt-hot-02's heat), never a lone hot host (dt-hot-03, days later)."""
    quiet_datacenter(session)
    run_hot(session, tmp_path, "dt-hot-01", "r12")
    run_hot(session, tmp_path, "dt-hot-02", "r12")
    rack = ticket_of(session, "dt-hot-02")
    host = session.query(Host).filter(Host.hostname == "dt-hot-02").one()
    later = (rack.last_detected_at or SCENARIO_T0) + rack_heat.FRESH_WITHIN
    assert rack_heat.open_rack_ticket(session, host, later) is not None
    assert rack_heat.open_rack_ticket(session, host, later + dt.timedelta(minutes=1)) is not None
    signal_on(session, "dt-hot-03", "r12", "cpu_throttle_percent", "package 0", 40.0)
    lone = session.query(Host).filter(Host.hostname == "dt-hot-03").one()
    for signal in session.query(Signal).filter(Signal.host_id == lone.id):
        signal.observed_at = SCENARIO_T0 + dt.timedelta(days=3)
    session.flush()
    assert rack_heat.open_rack_ticket(session, lone, later + dt.timedelta(days=3)) is None


def on_the_scenario_clock(session: Session, ticket: Ticket) -> None:
    """The ticket opened and was last detected at the scenario's start (the runner opens it on the wall clock)."""
    ticket.created_at = ticket.last_detected_at = SCENARIO_T0
    session.flush()


def test_a_rack_hot_for_over_an_hour_keeps_its_one_ticket(session: Session, tmp_path: Path) -> None:
    """Before (review of issue 16, M1): the rack's ticket took detections only when detected within the hour,
    but a detection within the hour of the last one does not move `last_detected_at`: at 61 minutes of
    continuous heat the ticket was stale and a third hot host opened a second rack ticket."""
    quiet_datacenter(session)
    run_hot(session, tmp_path, "dt-hot-01", "r12")
    second = run_hot(session, tmp_path, "dt-hot-02", "r12")
    rack = ticket_of(session, "dt-hot-02")
    on_the_scenario_clock(session, rack)
    run(session, second, [second.cycle(30)])  # still hot: the same detection, the ticket's time does not move
    session.refresh(rack)
    assert rack.last_detected_at == SCENARIO_T0
    run_hot(session, tmp_path, "dt-hot-03", "r12", minute=61)
    for remediation in remediations(session, "dt-hot-03"):
        to_ticket(session, remediation)
    assert session.query(Ticket).filter(Ticket.part_type == "rack_airflow").count() == 1
    assert remediations(session, "dt-hot-03") == []
    assert f"ticket {rack.id}" in " ".join(decisions_of(session, "dt-hot-03"))
    session.refresh(rack)
    assert rack.last_detected_at == SCENARIO_T0 + dt.timedelta(minutes=61)


def test_a_closed_rack_ticket_reopens_when_the_rack_runs_hot_again(session: Session, tmp_path: Path) -> None:
    """Before (review of issue 16, M1): a closed rack ticket was never found again, so the rack running hot
    the next day opened a new ticket instead of reopening it, as a host's ticket is reopened when its fault
    returns within the reopen window. One host hot alone is its own heat: the rack's ticket stays closed."""
    quiet_datacenter(session)
    first = run_hot(session, tmp_path, "dt-hot-01", "r12")
    second = run_hot(session, tmp_path, "dt-hot-02", "r12")
    rack = ticket_of(session, "dt-hot-02")
    on_the_scenario_clock(session, rack)
    fixed = SCENARIO_T0 + dt.timedelta(hours=2)
    tickets.claim(session, rack, actor="user:tech", now=fixed)
    tickets.resolve(session, rack, Resolution(note="blanking panels refitted"), actor="user:tech", now=fixed)
    tickets.begin_verification(session, rack, actor="system:remediator", settle=dt.timedelta(minutes=30), now=fixed)
    tickets.close(session, rack, actor="system:remediator", reason="verified", now=fixed + dt.timedelta(hours=1))
    next_day = 24 * 60
    run_hot(session, tmp_path, "dt-hot-03", "r12", minute=next_day)  # alone: the rack's ticket stays closed
    session.refresh(rack)
    assert (rack.state.value, rack.reopened) == ("closed", 0)
    run(session, second, [second.cycle(next_day + 5)])  # a second host: the rack runs hot again
    session.refresh(rack)
    assert (rack.state.value, rack.reopened) == ("open", 1)
    assert f"ticket {rack.id} reopened" in " ".join(decisions_of(session, "dt-hot-02"))
    run(session, first, [first.cycle(next_day + 6)])
    assert session.query(Ticket).filter(Ticket.part_type == "rack_airflow").count() == 1


def test_one_hot_host_has_one_airflow_ticket(session: Session, tmp_path: Path) -> None:
    """Before: each sensor and package was a part of its own (up to five airflow tickets for one host)."""
    quiet_datacenter(session)
    both = sample(HOT_CPU).replace(
        "CPU1 Temp        | 30.000     | degrees C  | ok ", "CPU1 Temp        | 95.000     | degrees C  | cr "
    )
    run_hot(session, tmp_path, "dt-hot-01", "r12", listing=both)
    fired = [r for r in remediations(session, "dt-hot-01") if r.rule_id == "sensor-critical-temperature"]
    for remediation in fired:
        to_ticket(session, remediation)
    tickets = session.query(Ticket).filter(Ticket.hostname == "dt-hot-01").all()
    assert [(t.part_type, t.part) for t in tickets] == [("airflow", "host")]


def test_the_hot_thresholds_are_the_rules() -> None:
    rules = {r.id: r for r in RULES.rules}
    assert rack_heat.HOT_AT["cpu_throttle_percent"] == rules["cpu-package-throttling"].when.value
    assert rack_heat.HOT_AT["kernel_event_count"] == rules["thermal-throttling"].when.value
