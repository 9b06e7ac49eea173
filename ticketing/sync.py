"""Copying a ticket to the external tracker: its issue, each event as a comment, its state.

Idempotent, so the sync task may run any number of times: the issue is found
again by its dedup label, comments already there (by their event marker) are
not posted twice, and the link row remembers how far the copy got. The link
row is locked while syncing, so two syncs of one ticket take turns.
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from ticketing.backends import IssueSnapshot, Tracker
from ticketing.models import Ticket, TicketEvent, TrackerLink

log = logging.getLogger(__name__)


def push(session: Session, ticket_id: int, tracker: Tracker, *, public_url: str) -> TrackerLink | None:
    """Bring the tracker's copy of a ticket up to date (None: nothing to copy to, or no such ticket)."""
    if not tracker.external:
        return None
    ticket = session.get(Ticket, ticket_id)
    if ticket is None:
        return None
    link = _locked_link(session, ticket_id, tracker.name)
    if link.external_key is None:
        issue = tracker.find_or_create(snapshot(ticket, public_url))
        link.external_key, link.external_url = issue.key, issue.url
        log.info("ticketing.tracker.linked", extra={"fields": {"ticket": ticket_id, "issue": issue.key}})
    key = link.external_key
    events = session.scalars(
        select(TicketEvent)
        .where(TicketEvent.ticket_id == ticket_id, TicketEvent.id > link.synced_event_id)
        .order_by(TicketEvent.id)
    ).all()
    if any("previous_priority" in (event.detail or {}) for event in events):
        # a more urgent rule raised the ticket (ticketing.opening.raise_priority): its summary and priority
        # label were written only when the issue was made (review r7, finding 3)
        tracker.update(key, snapshot(ticket, public_url))
    if events:
        posted = tracker.posted_event_ids(key)
        for event in events:
            if event.kind != "opened" and event.id not in posted:  # the issue itself says it was opened
                tracker.comment(key, event.id, event_text(event))
            moved_to = (event.detail or {}).get("to")
            if moved_to and moved_to != (event.detail or {}).get("from"):
                # each state in turn, so a batch of changes walks the tracker's workflow the same way
                if not tracker.move_to(key, moved_to):
                    log.info(
                        "ticketing.tracker.no_transition",
                        extra={"fields": {"ticket": ticket_id, "issue": key, "state": moved_to}},
                    )
                link.synced_state = moved_to
            link.synced_event_id = event.id
    link.attempts = 0
    link.last_error = ""
    session.flush()
    return link


def record_failure(session: Session, ticket_id: int, tracker_name: str, error: str) -> int:
    """Note a failed attempt on the link (shown with the ticket); returns the attempts so far."""
    if session.get(Ticket, ticket_id) is None:
        return 0
    link = _locked_link(session, ticket_id, tracker_name)
    link.attempts += 1
    link.last_error = error[:2000]
    session.flush()
    return link.attempts


def _locked_link(session: Session, ticket_id: int, tracker_name: str) -> TrackerLink:
    query = select(TrackerLink).where(TrackerLink.ticket_id == ticket_id).with_for_update()
    link = session.scalars(query).one_or_none()
    if link is None:
        try:
            with session.begin_nested():
                session.add(TrackerLink(ticket_id=ticket_id, tracker=tracker_name))
        except IntegrityError:
            pass  # another sync made it first
        link = session.scalars(query.execution_options(populate_existing=True)).one()
    return link


def _unconfirmed_slot(part: dict[str, Any]) -> list[str]:
    """A DIMM the evidence could not pin on one slot: say so, with the candidates, never one serial."""
    if part.get("certain") is not False:
        return []
    candidates = ", ".join(
        f"{c.get('locator')}"
        + (f" / {c['bank_locator']}" if c.get("bank_locator") else "")
        + f" (serial {c.get('serial')})"
        for c in part.get("candidates") or []
    )
    where = (part.get("edac") or {}).get("text") or "the EDAC location"
    return [f"*Confirm the slot before pulling:* {where} is one of: {candidates or 'no DIMM inventory'}"]


def snapshot(ticket: Ticket, public_url: str) -> IssueSnapshot:
    evidence = ticket.evidence or {}
    location = evidence.get("location") or {}
    part = evidence.get("part") or {}
    where = ", ".join(
        f"{name} {location[name]}" for name in ("datacenter", "row", "rack", "slot") if location.get(name)
    )
    part_line = ", ".join(f"{name} {part[name]}" for name in ("vendor", "model", "serial", "size_mb") if part.get(name))
    lines = [
        f"*Host:* {ticket.hostname} ({where or 'location unknown'})",
        f"*Part:* {ticket.part_type} {ticket.part}" + (f" — {part_line}" if part_line else ""),
        *_unconfirmed_slot(part),
        f"*Why:* {evidence.get('reason') or ticket.title}",
        f"*Priority:* P{ticket.priority}",
        f"*Evidence and history:* {public_url.rstrip('/')}/tickets/{ticket.id}",
        f"*fleetfix dedup key:* {{noformat}}{ticket.dedup_key}{{noformat}}",
    ]
    return IssueSnapshot(
        ticket_id=ticket.id,
        dedup_key=ticket.dedup_key,
        title=ticket.title,
        description="\n".join(lines),
        priority=ticket.priority,
        state=ticket.state.value,
    )


def event_text(event: TicketEvent) -> str:
    head = f"{event.actor}: {event.kind.replace('_', ' ')}"
    detail = event.detail or {}
    if "to" in detail and detail.get("from") != detail["to"]:
        head += f" ({detail['from']} → {detail['to']})"
    lines = [head]
    if event.note:
        lines.append(event.note)
    for replacement in detail.get("replacements", []):
        lines.append(
            f"replaced {replacement.get('part') or 'the part'}: serial {replacement['old_serial']} → "
            f"{replacement['new_serial']}"
        )
    return "\n".join(lines)
