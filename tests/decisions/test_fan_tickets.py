"""One ticket per fan (issue 16 leftovers): a Critical fan whose Redfish fan redundancy group is lost gave a
sensor-critical-fan ticket keyed by the fan and a fan-redundancy-lost ticket keyed by the group; now the
redundancy's ticket is keyed by its one failing fan, so the fan's one ticket holds both detections, whichever
came first, in one report or in two."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.orm import Session

from checker.schemas import RedfishRedundancy, RedfishState, Report, SensorReading
from tests.decisions.cases import supermicro_sensors
from tests.decisions.cases_fans import sdr_elist
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


def test_a_slowing_fan_s_ticket_takes_the_priority_and_title_of_its_critical_sensor(
    session: Session, tmp_path: Path
) -> None:
    """Review r4, finding 2: fan-degraded opened an in-service priority-4 'slowing' ticket; the same fan then
    read 400 `cr` and sensor-critical-fan's request took the host out of service on that ticket but left it
    at priority 4 with the 'slowing' title. sdr elist, as the agent sends it."""
    host = SnapHost(tmp_path)
    register(session, host)
    host.sensors(sdr_elist(supermicro_sensors(), FAN1=("lnc", "600 RPM")))
    run(session, host, [host.cycle(m) for m in (0, 10, 20, 31)])
    ((part, _state, _),) = fan_tickets(session, host)
    (slowing,) = tickets_of(session, host.hostname)
    assert (part, slowing.priority, slowing.holds_host) == ("FAN1", 4, False)
    host.sensors(sdr_elist(supermicro_sensors(), FAN1=("lcr", "400 RPM")))
    run(session, host, [host.cycle(40)])
    fan_tickets(session, host)
    (ticket,) = tickets_of(session, host.hostname)
    assert (ticket.id, ticket.holds_host, ticket.priority) == (slowing.id, True, 3)  # sensor-critical-fan: 3
    assert ticket.title.startswith("Fan FAN1 past its critical threshold")


def _with_fans(host: SnapHost, minute: int, fans: list[SensorReading]) -> Report:
    made = report(host, minute, CRITICAL, lost=True)
    return made.model_copy(update={"observations": made.observations.model_copy(update={"sensors": fans})})


def test_the_lost_redundancy_stays_on_its_fan_s_ticket_while_the_fan_is_unread_or_pulled(
    session: Session, tmp_path: Path
) -> None:
    """Review r4, finding 4: the redundancy's key is its one failing fan; when that fan reads nothing (ns) or is
    pulled for its swap (the Redfish parser drops an Absent member), no fan is failing, the key fell back to the
    group and a second ticket opened for the same fan."""
    host = SnapHost(tmp_path)
    register(session, host)
    run(session, host, [report(host, 0, CRITICAL, lost=True)])
    assert [(p, s) for p, s, _ in fan_tickets(session, host)] == [("Fan2A", "open")]
    unread = CRITICAL.model_copy(update={"status": "ns", "reading": None})
    run(session, host, [_with_fans(host, 65, [FAN1A, unread])])
    run(session, host, [_with_fans(host, 130, [FAN1A])])  # Fan2A pulled: only Fan1A listed, reading ok
    ((part, _state, detections),) = fan_tickets(session, host)
    assert part == "Fan2A"
    assert detections >= 3


def test_two_failing_fans_and_the_lost_redundancy_in_one_report_are_the_fans_tickets(
    session: Session, tmp_path: Path
) -> None:
    """Review r4, finding 4: two failing fans gave the group's key, a third ticket beside the fans' own."""
    host = SnapHost(tmp_path)
    register(session, host)
    failing = FAN1A.model_copy(update={"status": "cr", "reading": 200})
    run(session, host, [_with_fans(host, 0, [failing, CRITICAL])])
    assert sorted(p for p, _s, _d in fan_tickets(session, host)) == ["Fan1A", "Fan2A"]


def test_an_open_ticket_keyed_by_the_group_still_takes_the_lost_redundancy(session: Session, tmp_path: Path) -> None:
    """Review r4, finding 4: a ticket keyed by the group before the fan key (or with no single failing fan)
    is found again when the key names a fan."""
    host = SnapHost(tmp_path)
    register(session, host)
    run(session, host, [_with_fans(host, 0, [FAN1A, NOT_YET.model_copy(update={"reading": 9000})])])
    assert [p for p, _s, _d in fan_tickets(session, host)] == [GROUP.name]  # every fan reads ok: the group's
    run(session, host, [report(host, 65, NOT_YET, lost=True)])  # now Fan2A below its lcr, the BMC still ok
    ((part, _state, detections),) = fan_tickets(session, host)
    assert (part, detections) == (GROUP.name, 2)


# Review r7, finding 1: a slowing fan (the BMC's lnc, above its lcr) with its in-service ticket took every lost
# redundancy (and the host) as the oldest candidate's ticket. The reviewer's scenarios (/tmp/r7/test_r7_fans.py).
LIMITS = {"lnc": 840.0, "lcr": 480.0}
SLOW5 = SensorReading(name="Fan5A", kind="fan", status="lnc", reading=700, unit="RPM", thresholds=LIMITS)
CRIT2 = SensorReading(name="Fan2A", kind="fan", status="cr", reading=240, unit="RPM", thresholds=LIMITS)


def _ok(name: str) -> SensorReading:
    return SensorReading(name=name, kind="fan", status="ok", reading=9000, unit="RPM", thresholds=LIMITS)


def _fans_report(host: SnapHost, minute: int, fans: list[SensorReading], *, lost: bool) -> Report:
    made = with_bmc(host.cycle(minute), redfish=RedfishState(service=SERVICE, redundancy=[GROUP] if lost else []))
    return made.model_copy(update={"observations": made.observations.model_copy(update={"sensors": fans})})


def _slowing_fan5a_ticket(session: Session, host: SnapHost) -> int:
    register(session, host)
    fans = [_ok("Fan1A"), _ok("Fan2A"), _ok("Fan3A"), _ok("Fan4A"), SLOW5]
    run(session, host, [_fans_report(host, m, fans, lost=False) for m in (0, 10, 20, 31)])
    fan_tickets(session, host)
    (slowing,) = tickets_of(session, host.hostname)
    assert (slowing.part, slowing.priority, slowing.holds_host) == ("Fan5A", 4, False)
    return int(slowing.id)


def _slowing_ticket_untouched(session: Session, host: SnapHost, slowing_id: int) -> None:
    fan_tickets(session, host)
    slowing = next(t for t in tickets_of(session, host.hostname) if t.id == slowing_id)
    assert (slowing.priority, slowing.holds_host) == (4, False)  # Fan5A's own fan-degraded may detect again
    assert "redundancy" not in slowing.title


def test_a_lost_redundancy_goes_to_the_failing_fan_not_to_the_slowing_fan_s_ticket(
    session: Session, tmp_path: Path
) -> None:
    """Case A, one report: Fan2A reads 240 cr and the group is lost while Fan5A's slowing ticket is open."""
    host = SnapHost(tmp_path)
    slowing_id = _slowing_fan5a_ticket(session, host)
    fans = [_ok("Fan1A"), CRIT2, _ok("Fan3A"), _ok("Fan4A"), SLOW5]
    run(session, host, [_fans_report(host, 40, fans, lost=True)])
    run(session, host, [_fans_report(host, 110, fans, lost=True)])
    _slowing_ticket_untouched(session, host, slowing_id)
    (fan2a,) = [t for t in tickets_of(session, host.hostname) if t.part == "Fan2A"]
    assert fan2a.holds_host
    assert fan2a.detections >= 2


def test_a_lost_redundancy_after_the_failing_fan_s_own_ticket_goes_there(session: Session, tmp_path: Path) -> None:
    """Case A, two reports: Fan2A's ticket opens first, then the group is lost (age no longer wins)."""
    host = SnapHost(tmp_path)
    slowing_id = _slowing_fan5a_ticket(session, host)
    fans = [_ok("Fan1A"), CRIT2, _ok("Fan3A"), _ok("Fan4A"), SLOW5]
    run(session, host, [_fans_report(host, 40, fans, lost=False)])
    run(session, host, [_fans_report(host, 45, fans, lost=True)])
    _slowing_ticket_untouched(session, host, slowing_id)
    (fan2a,) = [t for t in tickets_of(session, host.hostname) if t.part == "Fan2A"]
    assert fan2a.detections == 2


def test_a_lost_redundancy_with_every_fan_read_ok_is_not_a_slowing_fan_s(session: Session, tmp_path: Path) -> None:
    """Case B: Fan5A recovered and every fan reads ok (a module fault): the group's own ticket."""
    host = SnapHost(tmp_path)
    slowing_id = _slowing_fan5a_ticket(session, host)
    fans = [_ok("Fan1A"), _ok("Fan2A"), _ok("Fan3A"), _ok("Fan4A"), _ok("Fan5A")]
    run(session, host, [_fans_report(host, 40, fans, lost=True)])
    _slowing_ticket_untouched(session, host, slowing_id)
    assert GROUP.name in [p for p, _s, _d in fan_tickets(session, host)]


def test_a_lost_redundancy_in_a_report_without_fan_sensors_is_not_a_fan_s(session: Session, tmp_path: Path) -> None:
    """Case C: no fan sensors this cycle: no fan counts as 'missing from the sensors' (being swapped)."""
    host = SnapHost(tmp_path)
    slowing_id = _slowing_fan5a_ticket(session, host)
    run(session, host, [_fans_report(host, 40, [], lost=True)])
    _slowing_ticket_untouched(session, host, slowing_id)
    assert GROUP.name in [p for p, _s, _d in fan_tickets(session, host)]


def test_a_lost_redundancy_lagging_a_swap_does_not_reopen_the_swapped_fan_s_ticket(
    session: Session, tmp_path: Path
) -> None:
    """Review r7, finding 1: the BMC's Redundancy status can lag a fan swap while every fan reads ok; the
    swapped fan's resolved (verifying) ticket was taken, so the lag reopened it. Only a fan failing again
    takes its settling ticket."""
    from ticketing import service as tickets
    from ticketing.schemas import Resolution

    host = SnapHost(tmp_path)
    register(session, host)
    run(session, host, [report(host, 0, CRITICAL, lost=True)])
    assert [(p, s) for p, s, _ in fan_tickets(session, host)] == [("Fan2A", "open")]
    (fan2a,) = tickets_of(session, host.hostname)
    ticket = tickets.lock_ticket(session, fan2a.id)
    tickets.claim(session, ticket, actor="user:alice")
    tickets.start(session, ticket, actor="user:alice")
    tickets.resolve(session, ticket, Resolution(note="fan replaced"), actor="user:alice")
    swapped = CRITICAL.model_copy(update={"status": "ok", "reading": 9000})
    run(session, host, [_with_fans(host, 65, [FAN1A, swapped])])  # every fan ok, the group still lost
    fan_tickets(session, host)
    by_part = {t.part: t for t in tickets_of(session, host.hostname) if t.part_type == "fan"}
    assert by_part["Fan2A"].state.value in ("resolved", "verifying")
    assert GROUP.name in by_part  # the lag is the group's, not the swapped fan's
