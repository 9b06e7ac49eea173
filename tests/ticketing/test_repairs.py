"""One file on purpose: every test takes the same host through reports, its ticket and its repair with
the helpers of tests/builders/repairs.py.

The remediator's side of tickets: the evidence bundle, detections reaching their ticket,
verification after a repair, and the fault coming back.

Reports go through the real ingest path on PostgreSQL and SQLite, inside a
rolled-back transaction; the clock of each step is the reports' own time.
"""

from __future__ import annotations

import datetime as dt

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from api.settings import load_central_settings
from checker.schemas import (
    DiskHealth,
    KernelEvent,
    KernelLogState,
    SelEntry,
    SelState,
)
from checker.sim.standalone import standalone_host
from core.db import utcnow
from core.dispatch import pending_tasks
from remediator import repairs
from remediator.evaluate import Firing
from remediator.evidence import part_evidence
from remediator.models import Decision, Host, HostState, Remediation, RemediationState, RemediationStep, StepState
from remediator.signals import SignalValue
from remediator.tasks import mark_unreachable, probe_silent_host
from tests.builders.repairs import (
    RULES,
    SETTLE,
    at,
    healthy,
    host_state,
    load_test_answers,
    located,
    repaired,
    send,
    storm,
    ticketed,
)
from tests.builders.reports import LABEL, edac_report
from ticketing import service as tickets
from ticketing.models import Repair, TicketState
from ticketing.schemas import TicketOpen

pytestmark = pytest.mark.usefixtures("remediator_reacts")  # a resolve starts verification, as in production
EDAC_LINE = (
    "EDAC MC0: 1 CE memory read error on CPU_SrcID#0_Ha#0_Chan#2_DIMM#0 (channel:2 slot:0 page:0x3f2a1 "
    "offset:0x0 grain:32 syndrome:0x0 - area:DRAM err_code:0001:0090 socket:0 ha:0 channel_mask:4 rank:0)"
)


def test_the_evidence_bundle_says_where_what_why_and_what_was_tried(session: Session) -> None:
    ticket = ticketed(session)
    evidence = ticket.evidence
    assert evidence["location"] == {
        "datacenter": "ams1",
        "row": "R12",
        "rack": "R12-07",
        "slot": "U21",
        "hardware_class": "compute-skx-2s",
        "cluster": "",
    }
    assert (ticket.datacenter, ticket.rack, ticket.part_type, ticket.part) == ("ams1", "R12-07", "dimm", LABEL)
    part = evidence["part"]
    # The class's label map puts EDAC mc0 channel 2 slot 0 in slot A3, which this host does not list: the
    # DIMM whose bank locator fits is a candidate, and nothing on the ticket claims its serial.
    assert (part["certain"], part["locator"], part["serial"]) == (False, None, None)
    assert [
        (c["locator"], c["bank_locator"], c["size_mb"], c["part_number"], c["serial"]) for c in part["candidates"]
    ] == [("Chan#2_DIMM#0", "NODE 0 CHANNEL 2 DIMM 0", 32768, "M393A4K40CB2-CVF", "1A2B3C4D")]
    assert part["model"] == "M393A4K40CB2-CVF"  # every candidate is the same part
    assert (part["edac"]["mc"], part["edac"]["channel"], part["edac"]["slot"]) == (0, 2, 0)
    assert "in slot A3; this host's dmidecode does not list it" in part["note"]
    assert part["note"].endswith("confirm the slot before pulling.")
    # the DIMM's CE counter through each stored observation state, and the rates derived from it
    assert [(h["ce"], h["ue"]) for h in evidence["counter_history"]] == [(0, 0), (3000, 0), (6000, 0)]
    assert [s["value"] for s in evidence["signals"] if s["kind"] == "dimm_ce_rate"] == [50.0, 50.0]
    assert evidence["rule"] == "dimm-ce-storm"
    assert ticket.title.endswith("50.0 CE/s")
    [attempt] = evidence["remediations"]
    assert (attempt["rule"], [s["action"] for s in attempt["steps"]]) == ("dimm-ce-storm", ["drain", "ticket"])
    assert evidence["frozen_at"]
    assert ticket.state == TicketState.open


def test_the_bundle_carries_sel_kernel_lines_and_the_logs_of_earlier_attempts(session: Session) -> None:
    host = located(session)
    report = edac_report("web-1", ce=12, at=at(0))
    report.observations.sel = SelState(
        entries=[
            SelEntry(
                record_id=0x1A,
                timestamp=at(0),
                sensor_type="Memory",
                sensor_name="Memory #0x01",
                event="Correctable ECC",
                direction="asserted",
                raw=" 1a | 03/01/2026 | 12:00:05 | Memory #0x01 | Correctable ECC | Asserted",
            ),
            SelEntry(
                record_id=0x1B,
                timestamp=at(0),
                sensor_type="Power Supply",
                sensor_name="PS2 Status",
                event="Failure detected",
                direction="asserted",
                component="PS2",
                raw=" 1b | 03/01/2026 | 12:00:09 | Power Supply PS2 Status | Failure detected | Asserted",
            ),
        ]
    )
    report.observations.kernel_log = KernelLogState(
        source="kmsg",
        events=[
            KernelEvent(kind="edac_ce", seq=812, timestamp=at(0), subject=LABEL, count=1, lines=[EDAC_LINE]),
            KernelEvent(kind="block_io_error", seq=813, timestamp=at(0), subject="sdb", lines=["I/O error, dev sdb"]),
        ],
    )
    send(session, report)
    earlier = Remediation(
        host_id=host.id,
        rule_id="dimm-ce-ppr",
        state=RemediationState.failed,
        subject=LABEL,
        reason="CEs persist",
        steps=[
            RemediationStep(
                index=0,
                action="hard_ppr",
                state=StepState.failed,
                result={"log": [{"argv": ["ipmitool", "raw", "0x30"], "exit": 1, "stderr": "x" * 20000}]},
            )
        ],
    )
    session.add(earlier)
    session.flush()
    evidence = part_evidence(session, host, "dimm", LABEL, reason="by hand")
    assert [e["record_id"] for e in evidence["sel"]] == [0x1A]  # the memory entry, not the PSU's
    assert [e["lines"] for e in evidence["kernel_log"]] == [[EDAC_LINE]]
    [attempt] = evidence["remediations"]
    log = attempt["steps"][0]["result"]["log"][0]
    assert (attempt["rule"], attempt["state"], log["argv"], log["exit"]) == (
        "dimm-ce-ppr",
        "failed",
        ["ipmitool", "raw", "0x30"],
        1,
    )
    assert len(log["stderr"]) < 8100
    assert log["stderr"].endswith("[12000 more]")
    psu = part_evidence(session, host, "psu", "PS2", reason="by hand")
    assert [e["record_id"] for e in psu["sel"]] == [0x1B]
    assert psu["part"]["id"] == "PS2"


def test_a_disk_bundle_has_its_model_serial_and_smart_history(session: Session) -> None:
    host = located(session)
    for minute, reallocated in ((0, 296), (60, 304)):
        report = edac_report("web-1", at=at(minute))
        report.observations.disks = [
            DiskHealth(
                device="/dev/sda",
                protocol="ATA",
                model="ST3500418AS",
                serial="9VM8RT2K",
                firmware="CC49",
                smart_passed=True,
                reallocated_sectors=reallocated,
                pending_sectors=0,
            )
        ]
        send(session, report)
    evidence = part_evidence(session, host, "disk", "9VM8RT2K", reason="by hand")
    assert {k: evidence["part"][k] for k in ("model", "serial", "device", "firmware")} == {
        "model": "ST3500418AS",
        "serial": "9VM8RT2K",
        "device": "/dev/sda",
        "firmware": "CC49",
    }
    assert [h["reallocated_sectors"] for h in evidence["counter_history"]] == [296, 304]
    assert evidence["smart"]["reallocated_sectors"] == 304


def test_repeat_detections_go_to_the_open_ticket(session: Session) -> None:
    ticket = ticketed(session)
    assert send(session, *storm("web-1", 120, ce0=6000)) == []  # two hours later, still storming
    assert send(session, *storm("web-1", 130, ce0=15000)) == []  # ten minutes after that: the same detection
    assert ticket.detections == 2
    assert [e.kind for e in ticket.events] == ["opened", "detected_again"]
    assert ticket.events[-1].detail["rule"] == "dimm-ce-storm"
    held = session.scalars(select(Decision.reason).where(Decision.outcome == "held")).all()
    assert held == [f"ticket {ticket.id} (open) holds this part: detection added"]
    assert session.scalars(select(Remediation)).all()[-1].state == RemediationState.escalated  # nothing new planned


def test_a_verified_repair_closes_the_ticket_and_returns_the_host(session: Session) -> None:
    ticket = ticketed(session)
    assert host_state(session) == HostState.awaiting_repair
    repaired(session, ticket, at(60))
    assert ticket.state == TicketState.verifying
    assert ticket.verify_until == at(60) + SETTLE
    [check] = [s for s in pending_tasks(session) if s.task == "checker.run_check_now"]
    assert check.options["queue"] == "host.web-1"
    assert check.options["expires"] == 900
    settle_minutes = SETTLE.total_seconds() / 60
    send(session, *healthy("web-1", 61, 60 + settle_minutes - 1))
    assert repairs.settle_repairs(session, now=at(60 + settle_minutes)) == {"verifying": 0, "closed": 0, "reopened": 0}
    send(session, *healthy("web-1", 60 + settle_minutes, 60 + settle_minutes))
    assert repairs.settle_repairs(session, now=at(61 + settle_minutes))["closed"] == 0  # a DIMM: under load too
    load_test_answers(session, ticket.id, at(61 + settle_minutes))  # (tests/ticketing/test_repair_load.py)
    assert repairs.settle_repairs(session, now=at(61 + settle_minutes))["closed"] == 1
    assert ticket.state == TicketState.closed
    assert host_state(session) == HostState.in_service
    [repair] = ticket.repairs
    assert repair.verified_at == at(61 + settle_minutes)
    assert repair.returned_at is None


def test_the_fault_returning_while_verifying_reopens_the_ticket(session: Session) -> None:
    ticket = ticketed(session)
    repaired(session, ticket, at(60))
    assert send(session, *storm("web-1", 70, boot="boot-2")) == []
    assert ticket.state == TicketState.open
    assert ticket.reopened == 1
    assert ticket.assignee is None
    assert ticket.events[-1].kind == "reopened"
    assert ticket.events[-1].note.startswith("fault returned while verifying the repair: dimm-ce-storm")
    [repair] = ticket.repairs
    assert repair.returned_at == at(72)
    assert host_state(session) == HostState.awaiting_repair
    [stat] = tickets.repair_stats(session)
    assert (stat.model, stat.replaced, stat.returned) == ("M393A4K40CB2-CVF", 1, 1)


def test_the_fault_returning_after_closing_reopens_within_the_window_only(session: Session) -> None:
    for hostname, gap in (("web-1", dt.timedelta(days=2)), ("web-2", dt.timedelta(days=45))):
        ticket = ticketed(session, hostname)
        repaired(session, ticket, at(60))
        tickets.close(session, ticket, actor="test", reason="verified", now=at(61))
        repairs.release_host(
            session, session.scalars(select(Host).where(Host.hostname == hostname)).one(), at(61), reason="t"
        )
        ticket.closed_at = utcnow() - gap  # when it closed, measured against the next detection
        session.flush()
        later = (utcnow() - at(0)).total_seconds() / 60 - 5
        planned = send(session, *storm(hostname, later, boot="boot-3"))
        if hostname == "web-1":
            assert planned == []
            assert ticket.state == TicketState.open
            assert ticket.reopened == 1
            assert ticket.events[-1].note.startswith("fault returned after the ticket closed")
            assert host_state(session, hostname) == HostState.awaiting_repair
        else:
            assert len(planned) == 1
            assert ticket.state == TicketState.closed
    returned = session.scalars(select(Repair.hostname).where(Repair.returned_at.is_not(None))).all()
    assert returned == ["web-1"]


def test_a_host_that_stays_silent_after_the_repair_fails_verification(session: Session) -> None:
    ticket = ticketed(session)
    repaired(session, ticket, at(60))
    host = session.scalars(select(Host).where(Host.hostname == "web-1")).one()
    grace = dt.timedelta(seconds=host.report_interval_s * load_central_settings().stale_after_intervals)
    still_waiting = at(60) + SETTLE
    assert repairs.settle_repairs(session, now=still_waiting)["reopened"] == 0
    assert repairs.settle_repairs(session, now=still_waiting + grace)["reopened"] == 1
    assert ticket.state == TicketState.open
    assert ticket.events[-1].note.startswith("verification failed: no report from the host since")
    assert ticket.repairs[0].returned_at is None  # silence is not the fault coming back


def test_a_ticket_opened_by_hand_freezes_evidence_and_holds_the_host(session: Session) -> None:
    located(session)
    send(session, edac_report("web-1", ce=5, at=at(0)))
    ticket_id, created = repairs.open_by_hand(
        session,
        TicketOpen(hostname="web-1", part_type="dimm", part=LABEL, title="Reseat DIMM", note="seen on the console"),
        actor="user:op",
    )
    ticket = tickets.get_ticket(session, ticket_id)
    assert created
    assert ticket.evidence["part"]["serial"] is None  # the slot is not certain (see the test above)
    assert [c["serial"] for c in ticket.evidence["part"]["candidates"]] == ["1A2B3C4D"]
    assert ticket.evidence["reason"] == "seen on the console"
    assert host_state(session) == HostState.awaiting_repair
    tickets.cancel(session, ticket, actor="user:op", reason="reseated by the on-call")  # the host is released with it
    assert host_state(session) == HostState.in_service


def test_the_evidence_names_a_dimm_and_its_serial_only_when_the_label_map_makes_it_certain(session: Session) -> None:
    """A simulated compute-skx-2s host: skx_edac's mc3 channel 2 slot 0 is slot B6 by the class's label map."""
    sim = standalone_host("web-1", hardware_class="compute-skx-2s")
    host = located(session)
    send(session, sim.report(at(0)))
    [dimm] = [d for d in sim.dimms if (d.mc, d.channel) == (3, 2)]
    part = part_evidence(session, host, "dimm", dimm.label, reason="by hand")["part"]
    assert (part["certain"], part["locator"], part["serial"], part["candidates"]) == (True, "B6", dimm.serial, [])
    assert (part["vendor"], part["method"], part["edac"]["coordinates"]) == (
        "Samsung",
        "label map compute-skx-2s",
        "3.2.0",
    )
    # Without a label map for its class, the same host's DIMM is one of twelve: no serial is claimed.
    host.hardware_class = "unknown"
    part = part_evidence(session, host, "dimm", dimm.label, reason="by hand")["part"]
    assert (part["certain"], part["locator"], part["serial"], len(part["candidates"])) == (False, None, None, 12)
    assert "EDAC mc3 (socket 1, MC#1) channel 2 slot 0 could not be mapped" in part["note"]


def test_a_firing_reaches_only_a_ticket_of_its_own_part_type(session: Session) -> None:
    """A PSU ticket opened by hand has an empty part, as has the host_unreachable signal: the PSU's
    ticket must neither hold the host's silence nor be reopened by it (counting the PSU as returned)."""
    host = located(session)
    send(session, edac_report("web-1", ce=0, at=at(0)))
    psu_id, _ = repairs.open_by_hand(
        session, TicketOpen(hostname="web-1", part_type="psu", title="PSU 2 buzzes"), actor="user:op", now=at(1)
    )
    psu = tickets.get_ticket(session, psu_id)
    unreachable = RULES.get("host-hung")
    assert unreachable is not None
    silence = Firing(unreachable, SignalValue("host_unreachable", "", 900.0, {"verdict": "hung"}))
    assert repairs.route_detection(session, host, silence, at(2)) is None  # not held while the PSU ticket is open
    assert psu.detections == 1
    repaired(session, psu, at(60))
    tickets.close(session, psu, actor="system:remediator", reason="verified", now=at(61))
    assert repairs.release_host(session, host, at(61), reason="psu repaired")
    # two weeks later the host goes silent
    psu.closed_at = utcnow() - dt.timedelta(days=14)
    host.last_report_at = utcnow() - dt.timedelta(hours=1)
    session.commit()
    assert mark_unreachable() == 1
    assert probe_silent_host("web-1") == "unconfirmed"  # no BMC address, and no such name to ping
    session.expire_all()
    psu = tickets.get_ticket(session, psu_id)
    assert (psu.state, psu.reopened) == (TicketState.closed, 0)
    assert [r.returned_at for r in psu.repairs] == [None]
    [stat] = tickets.repair_stats(session, part_type="psu")
    assert (stat.replaced, stat.verified, stat.returned) == (1, 1, 0)
    decided = session.scalars(select(Decision.outcome).where(Decision.rule_id == "host-unreachable-unconfirmed")).all()
    assert decided == ["planned", "admitted"]  # the rules decide about the silence: a person, nothing proves it hung
    # a host ticket without a part is about the whole host: that one does hold the firing
    host_ticket_id, _ = repairs.open_by_hand(
        session, TicketOpen(hostname="web-1", part_type="host", title="Reseat the host"), actor="user:op"
    )
    held = repairs.route_detection(session, host, silence, utcnow())
    assert held == f"ticket {host_ticket_id} (open) holds this part: detection added"


def test_the_part_types_a_firing_can_be_ticketed_as() -> None:
    def types(rule_id: str, kind: str) -> set[str]:
        rule = RULES.get(rule_id)
        assert rule is not None
        return set(repairs.part_types(Firing(rule, SignalValue(kind, "x", 1.0, {}))))

    assert types("dimm-ce-storm", "dimm_ce_rate") == {"dimm"}
    assert types("sel-memory-uncorrectable", "sel_memory_ecc") == {"dimm"}
    assert types("disk-smart-failing", "smart_failing") == {"disk"}
    assert types("nvme-critical-warning", "nvme_critical_warning") == {"disk"}
    assert types("psu-failure", "psu_failure") == {"psu"}
    assert types("fan-failure", "fan_failure") == {"fan"}
    assert types("host-hung", "host_unreachable") == {"host"}
    assert types("cmci-storm", "cmci_storm") == {"dimm"}
    assert types("psu-input-lost", "psu_input_lost") == {"power_feed"}  # its feed, not the PSU
    assert types("edac-polling-interval", "edac_poll_interval") == {"host"}  # no ticket step: the ladder ends in one


def test_a_ticket_for_owners_holds_only_the_detections_of_rules_for_owners(session: Session) -> None:
    """A configuration ticket that leaves the host in service (part `host`) must not swallow a firing that
    acts on the host or takes it out (an SMI storm's ticket, restore_cmci): that one plans as usual. A
    firing of a rule whose tickets are all for owners still goes to it."""
    host = located(session)
    send(session, edac_report("web-1", ce=0, at=at(0)))
    owners_id, _ = repairs.open_by_hand(
        session,
        TicketOpen(
            hostname="web-1",
            part_type="host",
            part="host",
            title="BIOS set to firmware-first",
            take_out_of_service=False,
        ),
        actor="user:op",
        now=at(1),
    )

    def firing(rule_id: str, kind: str) -> Firing:
        rule = RULES.get(rule_id)
        assert rule is not None
        return Firing(rule, SignalValue(kind, "host", 8.0, {}))

    assert repairs.for_owners(RULES.get("error-reporting-mode-mismatch"))  # type: ignore[arg-type]
    assert not repairs.for_owners(RULES.get("smi-storm-no-errors"))  # type: ignore[arg-type]
    assert not repairs.for_owners(RULES.get("smi-firmware-first-left"))  # type: ignore[arg-type]
    assert repairs.route_detection(session, host, firing("smi-storm-no-errors", "smi_rate"), at(2)) is None
    assert (
        repairs.route_detection(session, host, firing("smi-firmware-first-left", "smi_rate_firmware_first"), at(2))
        is None
    )
    held = repairs.route_detection(
        session, host, firing("error-reporting-mode-mismatch", "error_reporting_mode"), at(2)
    )
    assert held == f"ticket {owners_id} (open) holds this part: detection added"
    assert host.state == HostState.in_service
