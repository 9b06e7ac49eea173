"""Tickets that hold their host out of service, and tickets for owners that leave it working
(`Ticket.holds_host`, docs/tickets.md): stored from the opener's wish, and the only ones counted where
fleetfix asks whether a ticket holds the host (a remediation starting, a ticket closing or cancelled)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from api.app import create_app
from core.auth import issue_token
from core.db import Database
from core.models import Role
from remediator import repairs, runner
from remediator.models import HostState, RemediationState
from tests.builders.repairs import RULES, at, host_state, located, send, storm
from tests.builders.reports import edac_report
from tests.builders.runtime import runtime_of
from ticketing import service as tickets
from ticketing.models import Ticket
from ticketing.schemas import TicketOpen

pytestmark = pytest.mark.usefixtures("remediator_reacts")

FOR_OWNERS = TicketOpen(
    hostname="web-1",
    part_type="workload",
    part="trader",
    title="trader's munmap sends TLB shootdowns to isolated cores",
    take_out_of_service=False,
)


def test_a_hand_opened_ticket_for_owners_is_stored_and_leaves_the_host_working(session: Session) -> None:
    host = located(session)
    send(session, edac_report("web-1", ce=0, at=at(0)))
    owners_id, created = repairs.open_by_hand(session, FOR_OWNERS, actor="user:op")
    owners = tickets.get_ticket(session, owners_id)
    assert created
    assert owners.holds_host is False
    assert host_state(session) == HostState.in_service
    # a DIMM storm later: its plan starts (nothing holds the host), drains and hands the DIMM to a technician
    [remediation_id] = send(session, *storm("web-1", 10))
    assert runner.advance(session, remediation_id, ruleset=RULES) == RemediationState.running
    assert runner.advance(session, remediation_id, ruleset=RULES) == RemediationState.escalated
    dimm = session.scalars(select(Ticket).where(Ticket.part_type == "dimm")).one()
    assert dimm.holds_host is True
    assert host_state(session) == HostState.awaiting_repair
    # the DIMM ticket cancelled: the owners' ticket, still open, does not keep the host out
    tickets.cancel(session, dimm, actor="user:op", reason="reseated by the on-call")
    assert owners.state.value == "open"
    assert host_state(session) == HostState.in_service
    assert repairs.release_host(session, host, at(30), reason="again") is False  # nothing to release


def test_release_host_ignores_tickets_that_do_not_hold_it(session: Session) -> None:
    host = located(session)
    send(session, edac_report("web-1", ce=0, at=at(0)))
    repairs.open_by_hand(session, FOR_OWNERS, actor="user:op")
    psu_id, _ = repairs.open_by_hand(
        session, TicketOpen(hostname="web-1", part_type="psu", part="PSU1", title="replace PSU1"), actor="user:op"
    )
    assert host_state(session) == HostState.awaiting_repair
    assert [t.part_type for t in tickets.holding_tickets_of_host(session, "web-1")] == ["psu"]
    assert len(tickets.open_tickets_of_host(session, "web-1")) == 2  # listing a host's tickets: both
    assert repairs.release_host(session, host, at(5), reason="test") is False  # the PSU ticket holds it
    tickets.cancel(session, tickets.get_ticket(session, psu_id), actor="user:op", reason="swapped under contract")
    assert host_state(session) == HostState.in_service


def test_a_request_that_holds_the_host_makes_the_open_ticket_hold_it(session: Session) -> None:
    located(session)
    send(session, edac_report("web-1", ce=0, at=at(0)))
    ticket_id, _ = repairs.open_by_hand(session, FOR_OWNERS, actor="user:op")
    ticket = tickets.get_ticket(session, ticket_id)
    version = ticket.version
    again, created = repairs.open_by_hand(
        session, FOR_OWNERS.model_copy(update={"take_out_of_service": True}), actor="user:op2"
    )
    assert (again, created) == (ticket_id, False)
    ticket = tickets.get_ticket(session, ticket_id)
    assert ticket.holds_host is True
    assert ticket.version == version  # a technician's ETag does not move
    assert ticket.events[-1].detail == {"holds_host": True}
    assert host_state(session) == HostState.awaiting_repair
    # and never back: a request that would leave the host working changes nothing on a holding ticket
    repairs.open_by_hand(session, FOR_OWNERS, actor="user:op3")
    assert tickets.get_ticket(session, ticket_id).holds_host is True


@pytest.fixture
def client(db: Database) -> Iterator[TestClient]:
    with TestClient(create_app(runtime_of(db))) as test_client:
        yield test_client


def test_the_api_stores_take_out_of_service_and_shows_holds_host(client: TestClient, db: Database) -> None:
    with db.session() as session:
        located(session)
        send(session, edac_report("web-1", ce=0, at=at(0)))
        _, raw = issue_token(session, name="op", role=Role.operator)
    op = {"Authorization": f"Bearer {raw}"}
    body = FOR_OWNERS.model_dump()
    opened = client.post("/api/v1/tickets", json=body, headers=op)
    assert opened.status_code == 201, opened.text
    assert opened.json()["holds_host"] is False
    fan_body = {"hostname": "web-1", "part_type": "fan", "part": "FAN3", "title": "rattles"}
    fan = client.post("/api/v1/tickets", json=fan_body, headers=op)
    assert fan.json()["holds_host"] is True
    listed = client.get("/api/v1/tickets?hostname=web-1", headers=op).json()["items"]
    assert {t["part_type"]: t["holds_host"] for t in listed} == {"workload": False, "fan": True}
    with db.session() as session:
        assert host_state(session) == HostState.awaiting_repair  # the fan's
