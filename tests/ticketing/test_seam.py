"""The seam between ticketing and the remediator: every change of a ticket is a call of
ticketing.lifecycle (or opening), announced to the reactions the process's root handed in; the remediator's
reaction (verification after a resolve, the host released after a cancel) runs in the changing
transaction and rolls back with it; the fault returning reopens the ticket through the lifecycle.

On PostgreSQL and SQLite inside a rolled-back transaction.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from api.app import create_app
from api.runtime import repair_reactions
from core.auth import issue_token
from core.db import Database
from core.dispatch import pending_tasks
from core.models import Role
from remediator import repairs
from remediator.models import Host, HostState
from tests.builders.repairs import (
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
from tests.builders.runtime import rewire
from tests.builders.tickets import open_dimm_ticket
from tests.conftest import REPO
from ticketing import lifecycle, queries
from ticketing.models import Repair, TicketState
from ticketing.schemas import TicketOpen

CHANGES = {"claim", "start", "comment", "resolve", "cancel", "assign"}
"""The route and form handlers that change a ticket, each named after its lifecycle function."""


@pytest.fixture
def announced(db: Database) -> list[lifecycle.LifecycleEvent]:
    """Every lifecycle event, in order. Added before the remediator's reaction, so a change it makes in
    reaction to another (verifying after resolved) is seen after that one, as the history has them."""
    seen: list[lifecycle.LifecycleEvent] = []

    def remember(session: Session, event: lifecycle.LifecycleEvent) -> None:
        seen.append(event)

    rewire(db, reactions=lifecycle.Reactions((remember, *repair_reactions())))
    return seen


def test_every_change_of_state_is_a_lifecycle_event_with_the_remediators_reactions(
    session: Session, announced: list[lifecycle.LifecycleEvent]
) -> None:
    """Opened by the runner, resolved by a technician (verification follows), reopened when the fault
    returns during verification, resolved again and closed by the settle task: each change of state in
    the ticket's history was announced by the lifecycle, in the same order, by the same actor."""
    ticket = ticketed(session)
    repaired(session, ticket, at(60))
    assert ticket.state == TicketState.verifying  # the reaction, before resolve returned
    assert send(session, *storm("web-1", 70, boot="boot-2")) == []
    assert (ticket.state, ticket.reopened) == (TicketState.open, 1)  # the fault returned
    assert host_state(session) == HostState.awaiting_repair
    repaired(session, ticket, at(80))
    minutes = SETTLE.total_seconds() / 60
    send(session, *healthy("web-1", 81, 80 + minutes + 1, boot="boot-3"))
    load_test_answers(session, ticket.id, at(82 + minutes))  # a DIMM's repair passes under load too
    assert repairs.settle_repairs(session, now=at(82 + minutes))["closed"] == 1

    history = [
        (e.kind, e.actor, e.detail.get("from", ""), e.detail.get("to", "open"))
        for e in ticket.events
        if e.kind not in ("comment", "detected_again", "load_test")  # a check, not a change of state
    ]
    assert [(e.kind, e.actor, e.before, e.after) for e in announced] == history
    assert [kind for kind, *_ in history] == [
        "opened",
        "claimed",
        "resolved",
        "verifying",
        "reopened",
        "claimed",
        "resolved",
        "verifying",
        "closed",
    ]
    assert all(e.ticket is ticket for e in announced)
    assert host_state(session) == HostState.in_service


def test_without_the_reaction_a_resolved_ticket_waits_for_the_settle_task(session: Session) -> None:
    """Ticketing alone resolves and stops there; the scheduler's settle task starts a verification that
    no reaction started (a process that was not wired, or a ticket resolved before it was)."""
    ticket = ticketed(session)
    repaired(session, ticket, at(60))
    assert ticket.state == TicketState.resolved
    assert not [s for s in pending_tasks(session) if s.task == "checker.run_check_now"]
    assert repairs.settle_repairs(session, now=at(61))["verifying"] == 1
    assert (ticket.state, ticket.verify_until) == (TicketState.verifying, at(61) + SETTLE)
    assert [s for s in pending_tasks(session) if s.task == "checker.run_check_now"]


def test_wiring_twice_reacts_once(db: Database, session: Session) -> None:
    ticket = ticketed(session)
    rewire(db, reactions=repair_reactions())
    rewire(db, reactions=repair_reactions())  # a root built again replaces the wiring, never adds to it
    repaired(session, ticket, at(60))  # a second reaction would find the ticket verifying: a Conflict
    assert [e.kind for e in ticket.events][-2:] == ["resolved", "verifying"]


# -- over HTTP: one lifecycle call per route, the reaction in the request's transaction -----------------


@pytest.fixture
def client(db: Database) -> Iterator[TestClient]:
    runtime = rewire(db, reactions=repair_reactions())
    with TestClient(create_app(runtime), raise_server_exceptions=False) as test_client:
        yield test_client


def bearer(db: Database, role: Role) -> dict[str, str]:
    with db.session() as session:
        _, raw = issue_token(session, name=f"{role.value}-seam", role=role)
    return {"Authorization": f"Bearer {raw}"}


def current(client: TestClient, auth: dict[str, str], ticket_id: int) -> dict[str, str]:
    return {**auth, "If-Match": client.get(f"/api/v1/tickets/{ticket_id}", headers=auth).headers["ETag"]}


def ticket_state(db: Database, ticket_id: int) -> tuple[TicketState, int, list[str]]:
    with db.session() as session:
        ticket = queries.get_ticket(session, ticket_id)
        return ticket.state, ticket.version, [e.kind for e in ticket.events]


def test_a_resolve_over_the_api_rolls_back_when_verification_cannot_start(
    client: TestClient, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    ticket_id = open_dimm_ticket(db)
    with db.session() as session:
        lifecycle.claim(session, queries.lock_ticket(session, ticket_id), actor="token:technician-seam")
    before = ticket_state(db, ticket_id)

    def broker_down(*args: object, **kwargs: object) -> object:
        raise RuntimeError("no broker for the host's datacenter")

    monkeypatch.setattr(repairs, "host_signature", broker_down)
    body = {"replacements": [{"old_serial": "1A2B3C4D", "new_serial": "5E6F7A8B"}], "note": "swapped"}
    url = f"/api/v1/tickets/{ticket_id}/resolve"
    technician = bearer(db, Role.technician)
    failed = client.post(url, json=body, headers=current(client, technician, ticket_id))
    assert failed.status_code == 500
    assert ticket_state(db, ticket_id) == before  # not resolved without its verification
    with db.session() as session:
        assert session.scalars(select(Repair).where(Repair.ticket_id == ticket_id)).all() == []

    monkeypatch.undo()
    resolved = client.post(url, json=body, headers=current(client, technician, ticket_id))
    assert resolved.status_code == 200, resolved.text
    assert ticket_state(db, ticket_id)[0] == TicketState.verifying


def test_a_cancel_over_the_api_releases_the_host_or_rolls_back_with_it(
    client: TestClient, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    with db.session() as session:
        located(session)
        send(session, edac_report("web-1", ce=5, at=at(0)))
        ticket_id, _ = repairs.open_by_hand(
            session,
            TicketOpen(hostname="web-1", part_type="dimm", part=LABEL, title="Reseat"),
            actor="user:op",
        )
        session.commit()
    url = f"/api/v1/tickets/{ticket_id}/cancel"

    def undrain_fails(*args: object, **kwargs: object) -> None:
        raise RuntimeError("the load balancer refused")

    monkeypatch.setattr(repairs.draining, "undrain_after_repair", undrain_fails)
    operator = bearer(db, Role.operator)
    failed = client.post(url, json={"reason": "reseated"}, headers=current(client, operator, ticket_id))
    assert failed.status_code == 500
    assert ticket_state(db, ticket_id)[0] == TicketState.open
    with db.session() as session:
        assert session.scalars(select(Host.state).where(Host.hostname == "web-1")).one() == HostState.awaiting_repair

    monkeypatch.undo()
    done = client.post(url, json={"reason": "reseated"}, headers=current(client, operator, ticket_id))
    assert done.status_code == 200, done.text
    assert done.json()["state"] == "cancelled"
    with db.session() as session:
        assert session.scalars(select(Host.state).where(Host.hostname == "web-1")).one() == HostState.in_service


def _handlers(path: str) -> dict[str, ast.FunctionDef]:
    tree = ast.parse((REPO / path).read_text())
    return {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name in CHANGES}


def _calls(function: ast.FunctionDef) -> list[str]:
    return [
        f"{node.func.value.id}.{node.func.attr}"
        for node in ast.walk(function)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id in ("lifecycle", "repairs", "tickets", "remediator", "opening")
    ]


@pytest.mark.parametrize(
    ("path", "changes"),
    [("api/routes/tickets.py", CHANGES), ("api/web/tickets.py", {"claim", "start", "resolve"})],
)
def test_each_route_and_form_makes_its_change_with_one_lifecycle_call(path: str, changes: set[str]) -> None:
    handlers = _handlers(path)
    assert set(handlers) == changes, path
    for name, function in handlers.items():
        assert _calls(function) == [f"lifecycle.{name}"], (path, name)
