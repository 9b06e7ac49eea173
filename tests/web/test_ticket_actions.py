"""The ticket page's cancel, reassign and comment: the API's roles, versions, datacenter scope and audit."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from api.runtime import repair_reactions
from core.db import Database
from core.models import AuditEntry, Role
from tests.builders.people import make_user
from tests.builders.runtime import rewire
from tests.builders.tickets import open_dimm_ticket
from tests.web.helpers import signed_in
from ticketing.models import Ticket, TicketEvent, TicketState


@pytest.fixture(autouse=True)
def remediator_reacts(db: Database) -> None:
    """As `fleetfix api` starts: a cancel releases the host (tests/ticketing/conftest.py)."""
    rewire(db, reactions=repair_reactions())


def _version(client: TestClient, ticket_id: int, form: str) -> str:
    page = client.get(f"/tickets/{ticket_id}").text
    start = page.index(f'id="{form}"')
    found = re.search(r'name="version" value="(\d+)"', page[start:])
    assert found, f"no version in #{form}"
    return found.group(1)


def _ticket(db: Database, ticket_id: int) -> Ticket:
    with db.session() as session:
        ticket = session.get(Ticket, ticket_id)
        assert ticket is not None
        session.expunge(ticket)
        return ticket


def _audit(db: Database, action: str) -> list[AuditEntry]:
    with db.session() as session:
        return list(session.scalars(select(AuditEntry).where(AuditEntry.action == action)))


def test_operator_cancels_with_a_reason_and_it_is_audited(client: TestClient, db: Database) -> None:
    ticket_id = open_dimm_ticket(db, "web-021")
    token = signed_in(client, db, "olga", Role.operator)
    version = _version(client, ticket_id, "cancel-form")
    refused = client.post(f"/tickets/{ticket_id}/cancel", data={"csrf_token": token, "version": version, "reason": ""})
    assert refused.status_code == 422
    assert _ticket(db, ticket_id).state == TicketState.open
    no_csrf = client.post(f"/tickets/{ticket_id}/cancel", data={"version": version, "reason": "duplicate"})
    assert no_csrf.status_code == 403
    assert _ticket(db, ticket_id).state == TicketState.open
    done = client.post(
        f"/tickets/{ticket_id}/cancel",
        data={"csrf_token": token, "version": version, "reason": "duplicate of 12"},
        follow_redirects=False,
    )
    assert done.status_code == 303
    assert done.headers["location"] == f"/tickets/{ticket_id}"
    assert _ticket(db, ticket_id).state == TicketState.cancelled
    (entry,) = _audit(db, "ticketing.ticket.cancelled")
    assert entry.actor == "user:olga"
    assert entry.reason == "duplicate of 12"
    assert entry.object_id == str(ticket_id)
    page = client.get(f"/tickets/{ticket_id}").text
    assert f"Ticket {ticket_id} cancelled." in page
    assert 'id="cancel-form"' not in page
    assert 'id="assign-form"' not in page


def test_a_stale_cancel_is_refused(client: TestClient, db: Database) -> None:
    ticket_id = open_dimm_ticket(db, "web-022")
    token = signed_in(client, db, "olga", Role.operator)
    version = _version(client, ticket_id, "cancel-form")
    client.post(
        f"/tickets/{ticket_id}/assign",
        data={"csrf_token": token, "version": version, "assignee": "user:tom", "reason": "his aisle"},
    )
    stale = client.post(
        f"/tickets/{ticket_id}/cancel", data={"csrf_token": token, "version": version, "reason": "duplicate"}
    )
    assert stale.status_code == 412
    assert "was changed by someone else" in stale.text
    assert _ticket(db, ticket_id).state == TicketState.claimed


def test_operator_reassigns_and_the_person_has_it(client: TestClient, db: Database) -> None:
    ticket_id = open_dimm_ticket(db, "web-023")
    make_user(db, "tom", Role.technician, datacenter="ams1")
    token = signed_in(client, db, "olga", Role.operator)
    page = client.get(f"/tickets/{ticket_id}").text
    assert '<option value="user:tom">' in page  # suggested
    done = client.post(
        f"/tickets/{ticket_id}/assign",
        data={
            "csrf_token": token,
            "version": _version(client, ticket_id, "assign-form"),
            "assignee": "user:tom",
            "reason": "he is in the aisle",
        },
        follow_redirects=False,
    )
    assert done.status_code == 303
    ticket = _ticket(db, ticket_id)
    assert ticket.assignee == "user:tom"
    assert ticket.state == TicketState.claimed
    (entry,) = _audit(db, "ticketing.ticket.assigned")
    assert entry.actor == "user:olga"
    assert entry.detail is not None
    assert entry.detail["assignee"] == "user:tom"
    assert entry.detail["previous"] is None
    no_one = client.post(
        f"/tickets/{ticket_id}/assign",
        data={
            "csrf_token": token,
            "version": _version(client, ticket_id, "assign-form"),
            "assignee": "",
            "reason": "x",
        },
    )
    assert no_one.status_code == 422
    assert _ticket(db, ticket_id).assignee == "user:tom"


def test_technicians_cannot_cancel_or_reassign(client: TestClient, db: Database) -> None:
    ticket_id = open_dimm_ticket(db, "web-024")
    token = signed_in(client, db, "tom", Role.technician, datacenter="ams1")
    page = client.get(f"/tickets/{ticket_id}").text
    assert 'id="cancel-form"' not in page
    assert 'id="assign-form"' not in page
    assert 'id="comment-form"' in page
    version = re.search(r'name="version" value="(\d+)"', page)
    assert version
    for action, extra in (("cancel", {"reason": "meh"}), ("assign", {"assignee": "user:tom", "reason": "mine"})):
        response = client.post(
            f"/tickets/{ticket_id}/{action}", data={"csrf_token": token, "version": version.group(1), **extra}
        )
        assert response.status_code == 403, action
    ticket = _ticket(db, ticket_id)
    assert ticket.state == TicketState.open
    assert ticket.assignee is None
    assert _audit(db, "ticketing.ticket.cancelled") == []
    assert _audit(db, "ticketing.ticket.assigned") == []


def test_technician_comments_in_any_state_within_their_datacenter(client: TestClient, db: Database) -> None:
    ticket_id = open_dimm_ticket(db, "web-025", datacenter="ams1")
    other_id = open_dimm_ticket(db, "web-026", datacenter="fra3", rack="fra3-r01")
    token = signed_in(client, db, "tom", Role.technician, datacenter="ams1")
    done = client.post(
        f"/tickets/{ticket_id}/comment",
        data={"csrf_token": token, "comment": "Rack door jammed; back after lunch"},
        follow_redirects=False,
    )
    assert done.status_code == 303
    assert done.headers["location"] == f"/tickets/{ticket_id}#history"
    history = client.get(f"/tickets/{ticket_id}").text
    assert "Rack door jammed; back after lunch" in history[history.index('id="history"') :]
    (entry,) = _audit(db, "ticketing.ticket.comment")
    assert entry.actor == "user:tom"
    assert entry.reason == "Rack door jammed; back after lunch"
    empty = client.post(f"/tickets/{ticket_id}/comment", data={"csrf_token": token, "comment": "   "})
    assert empty.status_code == 422
    elsewhere = client.post(f"/tickets/{other_id}/comment", data={"csrf_token": token, "comment": "mine too?"})
    assert elsewhere.status_code == 403
    assert "read-only to you" in elsewhere.text
    assert 'id="comment-form"' not in client.get(f"/tickets/{other_id}").text
    with db.session() as session:
        notes = session.scalars(select(TicketEvent.note).where(TicketEvent.kind == "comment")).all()
    assert notes == ["Rack door jammed; back after lunch"]


def test_viewers_see_no_forms_and_cannot_comment(client: TestClient, db: Database) -> None:
    ticket_id = open_dimm_ticket(db, "web-027")
    token = signed_in(client, db, "vic", Role.viewer)
    page = client.get(f"/tickets/{ticket_id}").text
    assert not re.search(r'id="(comment|cancel|assign)-form"', page)
    response = client.post(f"/tickets/{ticket_id}/comment", data={"csrf_token": token, "comment": "hello"})
    assert response.status_code == 403
    assert _audit(db, "ticketing.ticket.comment") == []
