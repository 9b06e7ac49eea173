"""The ticket lifecycle as a service: states, dedup, who may do what, history, audit and repair stats.

Runs on PostgreSQL and SQLite inside a rolled-back transaction.
"""

from __future__ import annotations

import datetime as dt

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from core.dispatch import pending_tasks
from core.errors import Conflict
from core.models import AuditEntry
from ticketing import service as tickets
from ticketing.models import Repair, Ticket, TicketState
from ticketing.schemas import Replacement, Resolution, TicketRequest
from ticketing.sync import snapshot

NOW = dt.datetime(2026, 6, 1, 9, 0, tzinfo=dt.UTC)
ALICE, BOB = "user:alice", "user:bob"


def request(hostname: str = "web-1", part: str = "CPU0_DIMM_A1", **extra: object) -> TicketRequest:
    evidence = {"part": {"locator": "A1", "vendor": "Samsung", "model": "M393A4K40CB2-CVF", "serial": "1A2B3C4D"}}
    fields: dict[str, object] = {
        "part_type": "dimm",
        "part": part,
        "title": f"Replace DIMM {part}",
        "evidence": evidence,
    }
    fields.update(extra)
    return TicketRequest(hostname=hostname, **fields)  # type: ignore[arg-type]


def minutes(n: float) -> dt.datetime:
    return NOW + dt.timedelta(minutes=n)


def replaced(old: str = "1A2B3C4D", new: str = "9Z8Y7X6W") -> Resolution:
    return Resolution(replacements=[Replacement(old_serial=old, new_serial=new)], note="swapped the DIMM in slot A1")


def test_the_whole_lifecycle_is_history_and_audit(session: Session) -> None:
    ticket, created = tickets.open_ticket(session, request(), actor="system:remediator", now=NOW)
    assert created
    assert ticket.state == TicketState.open
    assert ticket.version == 1
    tickets.claim(session, ticket, actor=ALICE, now=minutes(1))
    tickets.start(session, ticket, actor=ALICE, note="at the rack", now=minutes(2))
    tickets.comment(session, ticket, actor=ALICE, note="DIMM A1 has a scorched pin", now=minutes(3))
    [repair] = tickets.resolve(session, ticket, replaced(), actor=ALICE, now=minutes(10))
    tickets.begin_verification(
        session, ticket, actor="system:remediator", settle=dt.timedelta(minutes=30), now=minutes(10)
    )
    assert ticket.verify_until == minutes(40)
    tickets.close(session, ticket, actor="system:remediator", reason="healthy for 30 minutes", now=minutes(41))
    session.commit()

    session.expire_all()
    ticket = tickets.get_ticket(session, ticket.id)
    assert ticket.state == TicketState.closed
    assert ticket.open_key is None
    assert ticket.closed_at == minutes(41)
    assert [e.kind for e in ticket.events] == [
        "opened",
        "claimed",
        "started",
        "comment",
        "resolved",
        "verifying",
        "closed",
    ]
    assert [(e.detail.get("from"), e.detail.get("to")) for e in ticket.events if e.kind != "comment"][1:] == [
        ("open", "claimed"),
        ("claimed", "in_progress"),
        ("in_progress", "resolved"),
        ("resolved", "verifying"),
        ("verifying", "closed"),
    ]
    # the comment did not change the ticket; each state change did
    assert ticket.version == 7
    assert (repair.vendor, repair.model, repair.old_serial, repair.new_serial) == (
        "Samsung",
        "M393A4K40CB2-CVF",
        "1A2B3C4D",
        "9Z8Y7X6W",
    )
    assert repair.verified_at == minutes(41)
    assert repair.returned_at is None
    audit = session.scalars(select(AuditEntry).where(AuditEntry.object_type == "ticket").order_by(AuditEntry.id)).all()
    assert [(a.actor, a.action) for a in audit] == [
        ("system:remediator", "ticketing.ticket.opened"),
        (ALICE, "ticketing.ticket.claimed"),
        (ALICE, "ticketing.ticket.started"),
        (ALICE, "ticketing.ticket.comment"),
        (ALICE, "ticketing.ticket.resolved"),
        ("system:remediator", "ticketing.ticket.verifying"),
        ("system:remediator", "ticketing.ticket.closed"),
    ]
    assert audit[4].reason == "swapped the DIMM in slot A1"
    assert audit[4].detail["replacements"][0]["new_serial"] == "9Z8Y7X6W"
    assert audit[-1].reason == "healthy for 30 minutes"


def test_one_open_ticket_per_host_and_part(session: Session) -> None:
    first, created = tickets.open_ticket(session, request(), actor="system:remediator", now=NOW)
    again, created_again = tickets.open_ticket(
        session, request(title="CE storm again"), actor="system:remediator", now=minutes(5)
    )
    other_part, _ = tickets.open_ticket(session, request(part="CPU0_DIMM_B1"), actor="system:remediator", now=NOW)
    other_host, _ = tickets.open_ticket(session, request(hostname="web-2"), actor="system:remediator", now=NOW)
    assert created
    assert not created_again
    assert again.id == first.id
    assert len({first.id, other_part.id, other_host.id}) == 3
    assert first.detections == 2
    assert first.events[-1].kind == "detected_again"
    assert first.events[-1].note == "CE storm again"
    assert [d["at"] for d in first.evidence["detections"]] == [minutes(5).isoformat()]
    # once it is cancelled the key is free: the next detection opens a new ticket
    tickets.cancel(session, first, actor="user:op", reason="host is being decommissioned", now=minutes(6))
    fresh, created = tickets.open_ticket(session, request(), actor="system:remediator", now=minutes(7))
    assert created
    assert fresh.id != first.id
    assert session.scalars(select(Ticket.state).where(Ticket.id == first.id)).one() == TicketState.cancelled


def test_detections_within_an_hour_are_one(session: Session) -> None:
    ticket, _ = tickets.open_ticket(session, request(), actor="system:remediator", now=NOW)
    seen = [
        tickets.note_detection(session, ticket, actor="system:remediator", note="CE storm", detail={}, now=minutes(m))
        for m in (1, 30, 61, 90, 130)
    ]
    assert seen == [False, False, True, False, True]
    assert ticket.detections == 3
    assert [e.kind for e in ticket.events].count("detected_again") == 2


def test_states_and_people_are_checked(session: Session) -> None:
    ticket, _ = tickets.open_ticket(session, request(), actor="system:remediator", now=NOW)
    with pytest.raises(Conflict, match=r"ticket \d+ is open; resolve needs it claimed, in_progress"):
        tickets.resolve(session, ticket, replaced(), actor=ALICE)
    tickets.claim(session, ticket, actor=ALICE)
    tickets.claim(session, ticket, actor=ALICE)  # claiming one's own ticket again changes nothing
    assert [e.kind for e in ticket.events] == ["opened", "claimed"]
    with pytest.raises(Conflict, match="is claimed; claim needs it open"):
        tickets.claim(session, ticket, actor=BOB)
    with pytest.raises(Conflict, match="is assigned to user:alice; an operator can reassign it") as refused:
        tickets.start(session, ticket, actor=BOB)
    assert refused.value.detail == {"assignee": ALICE}
    tickets.start(session, ticket, actor=BOB, override=True)  # an operator may
    tickets.assign(session, ticket, actor="user:op", assignee=BOB, reason="alice went home")
    assert ticket.assignee == BOB
    assert ticket.state == TicketState.in_progress
    tickets.resolve(session, ticket, replaced(), actor=BOB)
    with pytest.raises(Conflict, match="is resolved; close needs it verifying"):
        tickets.close(session, ticket, actor="x", reason="y")  # not verifying yet
    tickets.cancel(session, ticket, actor="user:op", reason="wrong host")
    with pytest.raises(Conflict, match="is cancelled"):
        tickets.cancel(session, ticket, actor="user:op", reason="again")


def test_a_serial_that_disagrees_with_the_evidence_is_flagged(session: Session) -> None:
    ticket, _ = tickets.open_ticket(session, request(), actor="system:remediator", now=NOW)
    tickets.claim(session, ticket, actor=ALICE)
    tickets.resolve(session, ticket, replaced(old="ZZZZ0000"), actor=ALICE)
    assert ticket.events[-1].detail["serial_mismatch"] == [
        {"part": "CPU0_DIMM_A1", "evidence_serial": "1A2B3C4D", "old_serial": "ZZZZ0000"}
    ]


UNCERTAIN_DIMM = {  # the evidence's part when the slot is not certain (remediator.dimms)
    "certain": False,
    "locator": None,
    "serial": None,
    "vendor": None,
    "model": None,
    "edac": {"text": "EDAC mc3 (socket 1, MC#1) channel 2 slot 0", "coordinates": "3.2.0"},
    "candidates": [
        {"locator": "DIMM_A1", "bank_locator": "P0 CHANNEL A", "serial": "S0A1", "manufacturer": "Samsung",
         "part_number": "M393A4K40CB2-CVF", "size_mb": 32768},
        {"locator": "DIMM_A1", "bank_locator": "P1 CHANNEL A", "serial": "S1A1", "manufacturer": "Hynix",
         "part_number": "HMA84GR7CJR4N-VK", "size_mb": 32768},
    ],
    "method": "EDAC label equals a repeated locator — unconfirmed",
    "note": "… confirm the slot before pulling.",
}  # fmt: skip


def test_an_uncertain_dimm_has_no_serial_to_mismatch_and_the_pulled_candidate_is_recorded(session: Session) -> None:
    ticket, _ = tickets.open_ticket(
        session, request(evidence={"part": UNCERTAIN_DIMM}), actor="system:remediator", now=NOW
    )
    tickets.claim(session, ticket, actor=ALICE)
    [repair] = tickets.resolve(session, ticket, replaced(old="s1a1"), actor=ALICE)  # typed in lower case
    detail = ticket.events[-1].detail
    assert "serial_mismatch" not in detail
    assert detail["serial_matches_candidate"] == [
        {"part": "CPU0_DIMM_A1", "old_serial": "s1a1", "locator": "DIMM_A1", "bank_locator": "P1 CHANNEL A"}
    ]
    assert (repair.vendor, repair.model) == ("Hynix", "HMA84GR7CJR4N-VK")  # the candidate that came out


def test_a_tracker_issue_of_an_uncertain_dimm_lists_the_candidates_and_no_serial(session: Session) -> None:
    ticket, _ = tickets.open_ticket(
        session, request(evidence={"part": UNCERTAIN_DIMM}), actor="system:remediator", now=NOW
    )
    description = snapshot(ticket, "https://fleetfix.example").description
    assert (
        "*Confirm the slot before pulling:* EDAC mc3 (socket 1, MC#1) channel 2 slot 0 is one of: "
        "DIMM_A1 / P0 CHANNEL A (serial S0A1), DIMM_A1 / P1 CHANNEL A (serial S1A1)"
    ) in description
    assert "*Part:* dimm CPU0_DIMM_A1\n" in description  # no vendor, model or serial claimed


def test_a_serial_that_is_none_of_the_candidates_is_flagged(session: Session) -> None:
    ticket, _ = tickets.open_ticket(
        session, request(evidence={"part": UNCERTAIN_DIMM}), actor="system:remediator", now=NOW
    )
    tickets.claim(session, ticket, actor=ALICE)
    [repair] = tickets.resolve(session, ticket, replaced(old="ZZZZ0000"), actor=ALICE)
    detail = ticket.events[-1].detail
    assert "serial_mismatch" not in detail
    assert "serial_matches_candidate" not in detail
    assert detail["serial_matches_no_candidate"] == [
        {"part": "CPU0_DIMM_A1", "old_serial": "ZZZZ0000", "candidate_serials": ["S0A1", "S1A1"]}
    ]
    assert (repair.vendor, repair.model) == ("", "")


def test_a_replacement_must_name_a_new_part() -> None:
    with pytest.raises(ValueError, match="new_serial is the old one"):
        Replacement(old_serial="1A2B3C4D", new_serial="1A2B3C4D")


def test_reopening_counts_the_fault_as_returned_and_stats_show_it(session: Session) -> None:
    def repaired(hostname: str, model: str, serial: str, *, returns: bool) -> None:
        ticket, _ = tickets.open_ticket(session, request(hostname=hostname), actor="system:remediator", now=NOW)
        tickets.claim(session, ticket, actor=ALICE)
        resolution = Resolution(
            replacements=[Replacement(old_serial=serial, new_serial=serial + "N", vendor="Samsung", model=model)],
            note="swap",
        )
        tickets.resolve(session, ticket, resolution, actor=ALICE, now=minutes(1))
        tickets.begin_verification(session, ticket, actor="s", settle=dt.timedelta(minutes=5), now=minutes(1))
        if returns:
            tickets.reopen(session, ticket, actor="s", reason="fault returned while verifying", now=minutes(3))
            assert ticket.state == TicketState.open
            assert ticket.assignee is None
            assert ticket.reopened == 1
        else:
            tickets.close(session, ticket, actor="s", reason="ok", now=minutes(7))

    repaired("h1", "M393A4K40CB2-CVF", "S1", returns=True)
    repaired("h2", "M393A4K40CB2-CVF", "S2", returns=False)
    repaired("h3", "M393A4K40CB2-CVF", "S3", returns=False)
    repaired("h4", "HMA84GR7AFR4N-UH", "S4", returns=False)
    stats = [
        (s.vendor, s.model, s.replaced, s.verified, s.returned, s.return_rate) for s in tickets.repair_stats(session)
    ]
    assert stats == [
        ("Samsung", "M393A4K40CB2-CVF", 3, 2, 1, 0.3333),
        ("Samsung", "HMA84GR7AFR4N-UH", 1, 1, 0, 0.0),
    ]
    assert tickets.repair_stats(session, part_type="disk") == []
    assert tickets.repair_stats(session, since=minutes(2)) == []
    returned = session.scalars(select(Repair.hostname).where(Repair.returned_at.is_not(None))).all()
    assert returned == ["h1"]


def test_a_closed_ticket_reopens_only_while_its_key_is_free(session: Session) -> None:
    ticket, _ = tickets.open_ticket(session, request(), actor="system:remediator", now=NOW)
    tickets.claim(session, ticket, actor=ALICE)
    tickets.resolve(session, ticket, replaced(), actor=ALICE, now=minutes(1))
    tickets.begin_verification(session, ticket, actor="s", settle=dt.timedelta(minutes=1), now=minutes(1))
    tickets.close(session, ticket, actor="s", reason="ok", now=minutes(3))
    found = tickets.ticket_for_detection(
        session, "web-1", "CPU0_DIMM_A1", part_types={"dimm"}, now=minutes(60), reopen_window=dt.timedelta(days=1)
    )
    assert found is ticket
    assert (
        tickets.ticket_for_detection(
            session,
            "web-1",
            "CPU0_DIMM_A1",
            part_types={"dimm"},
            now=minutes(60),
            reopen_window=dt.timedelta(minutes=10),
        )
        is None
    )
    newer, _ = tickets.open_ticket(session, request(), actor="system:remediator", now=minutes(70))
    assert (
        tickets.ticket_for_detection(
            session, "web-1", "CPU0_DIMM_A1", part_types={"dimm"}, now=minutes(71), reopen_window=dt.timedelta(days=1)
        )
        is newer
    )
    with pytest.raises(Conflict, match="another ticket for web-1:dimm:CPU0_DIMM_A1 is open"):
        tickets.reopen(session, ticket, actor="s", reason="fault returned", now=minutes(72))


def test_each_change_queues_one_tracker_sync_after_commit(session: Session) -> None:
    ticket, _ = tickets.open_ticket(session, request(), actor="system:remediator", now=NOW)
    tickets.claim(session, ticket, actor=ALICE)
    tickets.comment(session, ticket, actor=ALICE, note="on my way")
    syncs = [s for s in pending_tasks(session) if s.task == "ticketing.sync_tracker"]
    assert [(list(s.args), s.options.get("queue")) for s in syncs] == [([ticket.id], "notify")]
    session.rollback()
    assert pending_tasks(session) == []
