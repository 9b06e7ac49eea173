"""A DIMM's ticket resolved after its swap, and the detections that follow it (repairs.route_detection):
counts from before the repair do not reopen it (issue 16's S1), and a renamed part type's open ticket takes
a new request for its part (S5). Each test says what the code before the fix did."""

from __future__ import annotations

import datetime as dt

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from checker.schemas import Observations, RasdaemonState, RasMemoryEvent
from remediator import host_evaluation, planning, repairs
from remediator.derive.pages import page_signals
from remediator.evaluate import Firing
from remediator.models import Host, RemediationState, StepState
from remediator.rules import Rule, Step
from remediator.signals import SignalValue
from tests.builders.policies import host
from tests.builders.repairs import RULES, at, healthy, load_test_answers, repaired, send, ticketed
from tests.builders.reports import LABEL, edac_report
from ticketing import lifecycle
from ticketing import service as tickets
from ticketing.models import Ticket, TicketState
from ticketing.schemas import TicketRequest

pytestmark = pytest.mark.usefixtures("remediator_reacts")  # a resolve starts verification, as in production


def rule(rule_id: str) -> Rule:
    found = RULES.get(rule_id)
    assert found is not None
    return found


def page_errors(first_id: int, times: list[dt.datetime]) -> Observations:
    """rasdaemon's mc_event rows of corrected errors on one page of LABEL at these times."""
    rows = [
        RasMemoryEvent(
            id=first_id + i,
            timestamp=when.strftime("%Y-%m-%d %H:%M:%S +0000"),
            err_type="Corrected",
            label=LABEL,
            mc=0,
            address=0x849923380,
            grain=5,
        )
        for i, when in enumerate(times)
    ]
    last = first_id + len(times) - 1
    return Observations(rasdaemon=RasdaemonState(memory_events=rows, last_id=last, last_ids={"mc_event": last}))


def test_s1_page_errors_from_before_the_dimm_swap_do_not_reopen_the_dimms_ticket(session: Session) -> None:
    """The DIMM's ticket (dimm-ce-storm) is resolved at minute 60; at minute 70 the page rule fires on the
    page's day (remediator/derive/pages.py): ten errors two hours before the swap and one after. Before: the
    signal carried no counted span and the ticket reopened ("fault returned while verifying the repair")."""
    ticket = ticketed(session)
    repaired(session, ticket, at(60))
    assert ticket.state == TicketState.verifying
    web1 = session.scalars(select(Host).where(Host.hostname == "web-1")).one()
    _, memory = page_signals(page_errors(1, [at(-120 + i) for i in range(10)]), None, now=at(-110))
    signals, _ = page_signals(page_errors(11, [at(65)]), memory, now=at(69))
    (signal,) = [s for s in signals if s.kind == "page_ce_count"]
    assert (signal.value, signal.detail["dimm"]) == (11, LABEL)
    reason = repairs.route_detection(session, web1, Firing(rule("page-ce-soft-offline"), signal), at(70))
    assert ticket.state == TicketState.verifying
    assert ticket.reopened == 0
    assert reason is not None
    assert reason.startswith(
        f"ticket {ticket.id} (verifying): counted since {signal.detail['since']}, before the repair"
    )
    # a page signal without a counted span (the code before): the same detection reopens the ticket
    bare = SignalValue(signal.kind, signal.subject, signal.value, {k: signal.detail[k] for k in ("dimm", "page")})
    reopened = repairs.route_detection(session, web1, Firing(rule("page-ce-soft-offline"), bare), at(71))
    assert reopened == f"fault returned after the repair: ticket {ticket.id} reopened"


def test_a_held_detection_is_kept_on_the_ticket_and_said_in_its_close_reason(session: Session) -> None:
    """Review of the counted spans, finding 3: the held detection is added to the ticket with its recount,
    without changing its state or version (a technician's ETag), and the close reason no longer says the host
    reported "without the fault". Before: nothing on the ticket, and the close reason was untrue."""
    ticket = ticketed(session)
    repaired(session, ticket, at(60))
    version, detections = ticket.version, ticket.detections
    web1 = session.scalars(select(Host).where(Host.hostname == "web-1")).one()
    _, memory = page_signals(page_errors(1, [at(-120 + i) for i in range(10)]), None, now=at(-110))
    signals, _ = page_signals(page_errors(11, [at(65)]), memory, now=at(69))
    (signal,) = [s for s in signals if s.kind == "page_ce_count"]
    repairs.route_detection(session, web1, Firing(rule("page-ce-soft-offline"), signal), at(70))
    session.refresh(ticket)
    assert (ticket.state, ticket.version, ticket.reopened) == (TicketState.verifying, version, 0)
    assert ticket.detections == detections + 1
    seen = ticket.events[-1]
    assert seen.kind == "detected_again"
    assert "held, not a returned fault: 1 after it does not fire the rule (11 counted in all)" in seen.note
    assert seen.detail["recount"] == {
        "held": "before the repair",
        "since": signal.detail["since"],
        "resolved_at": at(60).isoformat(),
        "counted": 11.0,
        "after_low": 1.0,
        "after_high": 1.0,
    }
    settle = (ticket.verify_until - at(60)).total_seconds() / 60
    send(session, *healthy("web-1", 61, 60 + settle))
    load_test_answers(session, ticket.id, at(61 + settle))
    assert repairs.settle_repairs(session, now=at(61 + settle))["closed"] == 1
    closed = ticket.events[-1]
    assert closed.kind == "closed"
    assert "without the fault" not in closed.note
    assert "1 held as counted before it (on the ticket)" in closed.note


def offline_pages(session: Session, on: Host, pages: list[int], when: dt.datetime) -> None:
    """Succeeded soft_offline_page steps of boot-1 for these pages of LABEL, finished at `when`."""
    page_rule = rule("page-ce-soft-offline")
    for page in pages:
        address = f"0x{page:x}"
        evidence = {"signal": {"kind": "page_ce_count", "subject": address, "value": 10.0, "detail": {"dimm": LABEL}}}
        made = planning.create(
            session, on, page_rule, [Step(action="soft_offline_page")], evidence, address, 0, None, when
        )
        assert made is not None
        made.state, made.finished_at = RemediationState.succeeded, when
        made.steps[0].started_at = made.steps[0].finished_at = when
        made.steps[0].state = StepState.succeeded
        made.steps[0].result = {
            "boot_id_before": "boot-1",
            "changed": {"address": address, "offlined": True, "already_offlined": False},
        }
    session.flush()


def dimm_offlined(session: Session, on: Host, now: dt.datetime) -> SignalValue:
    hour = int(now.timestamp()) // 3600
    memory = {"derive": {"v": 1, "at": now.isoformat(), "pages": {"pages": {"0x849963000": {"hours": [[hour, 3]]}}}}}
    signals = host_evaluation.report_signals(on, edac_report(on.hostname, at=now, boot_id="boot-1"), memory)
    (dimm,) = [s for s in signals if s.kind == "dimm_offlined_pages"]
    return dimm


def test_s1_pages_offlined_before_the_repair_do_not_reopen_the_dimms_ticket(session: Session) -> None:
    """Three pages of the DIMM offlined at minute 10, its ticket resolved at minute 60 while the old boot still
    reports: the DIMM's count of the boot is 3, dimm-offlined-pages fires. Before: no counted span, reopened."""
    web1 = host(session, "web-1")
    page = 0x849923000
    offline_pages(session, web1, [page, page + 0x10000, page + 0x20000], at(10))
    dimm = dimm_offlined(session, web1, at(65))
    assert dimm.value == 3
    assert dimm.detail["since"] == dt.datetime.fromtimestamp(int(at(10).timestamp()), dt.UTC).isoformat()
    assert dimm.detail["counted"] == [[int(at(10).timestamp()), 1]] * 3
    firing = Firing(rule("dimm-offlined-pages"), dimm)
    assert repairs.counted_before_repair(firing, at(60)) is not None
    # three more offlined after the repair: the DIMM's cells are still failing
    offline_pages(session, web1, [page + 0x30000, page + 0x40000, page + 0x50000], at(70))
    again = dimm_offlined(session, web1, at(75))
    assert again.value == 6
    assert repairs.counted_before_repair(Firing(rule("dimm-offlined-pages"), again), at(60)) is None


def test_s1_the_counted_offlines_stay_bounded(session: Session) -> None:
    """Twenty pages: sixteen entries, the five oldest merged into one at the newest of their times."""
    web1 = host(session, "web-1")
    for n in range(20):
        offline_pages(session, web1, [0x849923000 + n * 0x1000], at(n))
    dimm = dimm_offlined(session, web1, at(30))
    assert dimm.value == 20
    counted = dimm.detail["counted"]
    assert len(counted) == 16
    assert counted[0] == [int(at(4).timestamp()), 5]
    assert sum(n for _, n in counted) == 20


def test_s5_a_new_part_types_request_joins_the_open_ticket_of_its_old_name(session: Session) -> None:
    """A `pcie` ticket opened before the rename is open; the remediator asks for a `pcie_device` ticket of the
    same function. Before: open_ticket's dedup looked up the new key only and opened a second ticket."""
    now = at(0)
    old = TicketRequest(hostname="web-1", part_type="pcie", part="0000:03:00.0", title="PCIe errors (old name)")
    first, created = tickets.open_ticket(session, old, actor="system:remediator", now=now)
    assert created
    new = old.model_copy(update={"part_type": "pcie_device", "title": "PCIe errors (new name)"})
    second, created = tickets.open_ticket(session, new, actor="system:remediator", now=now + dt.timedelta(hours=2))
    assert (second.id, created) == (first.id, False)
    assert session.scalars(select(Ticket).where(Ticket.hostname == "web-1")).all() == [first]
    assert first.detections == 2  # the opening and this request
    # another part, or another part type, still opens its own
    other, created = tickets.open_ticket(
        session, new.model_copy(update={"part": "0000:04:00.0"}), actor="system:remediator", now=now
    )
    assert created
    assert other.id != first.id
    disk, created = tickets.open_ticket(
        session, old.model_copy(update={"part_type": "disk"}), actor="system:remediator", now=now
    )
    assert created
    assert disk.id != first.id
    # once the old ticket is closed, a new one opens under the new name
    lifecycle.cancel(session, tickets.lock_ticket(session, first.id), actor="user:op", reason="renamed", now=now)
    fresh, created = tickets.open_ticket(session, new, actor="system:remediator", now=now + dt.timedelta(hours=3))
    assert created
    assert fresh.part_type == "pcie_device"
