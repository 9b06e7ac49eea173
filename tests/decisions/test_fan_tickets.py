"""One ticket per fan (issue 16 leftovers): a Critical fan whose Redfish fan redundancy group is lost gave a
sensor-critical-fan ticket keyed by the fan and a fan-redundancy-lost ticket keyed by the group; now the
redundancy's ticket is keyed by its one failing fan, so the fan's one ticket holds both detections, whichever
came first, in one report or in two."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.orm import Session

from checker.schemas import RedfishRedundancy, RedfishState, Report, SensorReading
from tests.decisions.cases_redfish import SERVICE, with_bmc
from tests.decisions.harness import SnapHost, register, remediations, run, tickets_of, to_ticket

GROUP = RedfishRedundancy(name="System Board Fan Redundancy", of="fan", health="Critical", state="Enabled")
FAN1A = SensorReading(name="Fan1A", kind="fan", status="ok", reading=9000, unit="RPM", thresholds={"lcr": 600})
# Fan2A below its lower critical threshold: the BMC's cr (a sensor_critical), or, before the BMC says so, ok
CRITICAL = SensorReading(name="Fan2A", kind="fan", status="cr", reading=240, unit="RPM", thresholds={"lcr": 600})
NOT_YET = CRITICAL.model_copy(update={"status": "ok"})


def report(host: SnapHost, minute: int, fan2a: SensorReading, *, lost: bool) -> Report:
    made = with_bmc(host.cycle(minute), redfish=RedfishState(service=SERVICE, redundancy=[GROUP] if lost else []))
    observations = made.observations.model_copy(update={"sensors": [FAN1A, fan2a]})
    return made.model_copy(update={"observations": observations})


def fan_tickets(session: Session, host: SnapHost) -> list[tuple[str, str, int]]:
    for remediation in remediations(session, host.hostname):
        to_ticket(session, remediation)
    return [(t.part, t.state.value, t.detections) for t in tickets_of(session, host.hostname) if t.part_type == "fan"]


def rules_planned(session: Session, host: SnapHost) -> set[str]:
    return {r.rule_id for r in remediations(session, host.hostname)}


def test_a_critical_fan_and_its_lost_redundancy_in_one_report_are_one_ticket(session: Session, tmp_path: Path) -> None:
    host = SnapHost(tmp_path)
    register(session, host)
    run(session, host, [report(host, 0, CRITICAL, lost=True)])
    # one rule plans; the other's ticket opens beside it (remediator.preemption): the same fan's ticket
    assert rules_planned(session, host) <= {"sensor-critical-fan", "fan-redundancy-lost"}
    ((part, state, detections),) = fan_tickets(session, host)
    assert (part, state) == ("Fan2A", "open")
    assert detections >= 2  # the second rule's request was a detection of the fan's ticket


def test_the_fan_s_ticket_first_then_the_lost_redundancy(session: Session, tmp_path: Path) -> None:
    host = SnapHost(tmp_path)
    register(session, host)
    run(session, host, [report(host, 0, CRITICAL, lost=False)])
    assert fan_tickets(session, host) == [("Fan2A", "open", 1)]
    run(session, host, [report(host, 5, CRITICAL, lost=True)])
    assert "fan-redundancy-lost" not in rules_planned(session, host)  # routed to the fan's ticket
    assert fan_tickets(session, host) == [("Fan2A", "open", 2)]


def test_the_lost_redundancy_first_then_the_fan_s_critical_sensor(session: Session, tmp_path: Path) -> None:
    host = SnapHost(tmp_path)
    register(session, host)
    run(session, host, [report(host, 0, NOT_YET, lost=True)])
    assert fan_tickets(session, host) == [("Fan2A", "open", 1)]
    run(session, host, [report(host, 5, CRITICAL, lost=True)])
    assert "sensor-critical-fan" not in rules_planned(session, host)  # routed to the fan's ticket
    ((part, _state, detections),) = fan_tickets(session, host)
    assert part == "Fan2A"
    assert detections >= 2
