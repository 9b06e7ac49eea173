"""A ticket whose remediation could not verify the repair under load says so on its page: the gap in
"Not verified", and each verification step's verdict beside it."""

from __future__ import annotations

from fastapi.testclient import TestClient

from core.db import Database
from core.models import Role
from remediator.models import Host, HostState
from tests.web.helpers import signed_in
from ticketing import lifecycle
from ticketing import service as tickets
from ticketing.schemas import TicketRequest

GAP = "stressapptest is not installed: DIMM DIMM_A1 is not verified under load"


def test_the_ticket_page_shows_the_gap_and_the_verdict(client: TestClient, db: Database) -> None:
    step = {
        "index": 1,
        "action": "verify_memory_under_load",
        "state": "failed",
        "attempts": 1,
        "result": {"error": f"verification gap: {GAP}", "changed": {"verdict": "gap", "gap": GAP}},
    }
    with db.session() as session:
        session.add(Host(hostname="h1", datacenter="dc1", rack="r1", state=HostState.awaiting_repair))
        session.flush()
        ticket, _ = tickets.open_ticket(
            session,
            TicketRequest(
                hostname="h1",
                datacenter="dc1",
                rack="r1",
                part_type="dimm",
                part="DIMM_A1",
                title="DIMM DIMM_A1: hard PPR not verified",
                evidence={
                    "gaps": [f"verify_memory_under_load: {GAP}"],
                    "remediations": [
                        {"id": 5, "rule": "dimm-ce-ppr", "state": "failed", "reason": "r", "steps": [step]}
                    ],
                },
            ),
            actor="test",
        )
        ticket_id = ticket.id
    signed_in(client, db, "tom", Role.operator, datacenter="dc1")
    page = client.get(f"/tickets/{ticket_id}").text
    assert 'id="gaps"' in page
    assert f"Not verified:</strong> verify_memory_under_load: {GAP}" in page
    assert "verification: gap" in page


def test_the_ticket_page_shows_the_repairs_load_test(client: TestClient, db: Database) -> None:
    """A resolved DIMM's load test (remediator.repair_load): its latest verdict, never a silent pass."""
    with db.session() as session:
        session.add(Host(hostname="h2", datacenter="dc1", rack="r1", state=HostState.awaiting_repair))
        session.flush()
        request = TicketRequest(hostname="h2", datacenter="dc1", rack="r1", part_type="dimm", part="B6", title="t")
        ticket, _ = tickets.open_ticket(session, request, actor="test")
        note = f"NOT verified under load: {GAP}. The ticket closes on its settle period alone."
        lifecycle.note_check(
            session, ticket, actor="system:remediator", kind="load_test", note=note, detail={"verdict": "gap"}
        )
        ticket_id = ticket.id
    signed_in(client, db, "tom", Role.operator, datacenter="dc1")
    page = client.get(f"/tickets/{ticket_id}").text
    assert 'id="load-test"' in page
    assert f"Not verified under load</strong> (repair verification): {note}" in page
