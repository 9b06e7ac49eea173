"""Tickets over HTTP: roles, If-Match, the lifecycle, filters and pages, repair stats, one error shape."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from api.app import create_app
from core.auth import issue_token
from core.db import Database
from core.models import AuditEntry, Role
from remediator.inventory import HostInventory, apply_inventory
from remediator.models import Host, HostState
from tests.builders.reports import LABEL, edac_report, storm_reports
from tests.builders.runtime import runtime_of
from ticketing import service as tickets
from ticketing.models import Ticket
from ticketing.schemas import TicketRequest

pytestmark = pytest.mark.usefixtures("remediator_reacts")  # as `fleetfix api` starts


@pytest.fixture
def client(db: Database) -> Iterator[TestClient]:
    with TestClient(create_app(runtime_of(db))) as test_client:
        yield test_client


def bearer(db: Database, name: str, role: Role) -> dict[str, str]:
    with db.session() as session:
        _, raw = issue_token(session, name=name, role=role)
    return {"Authorization": f"Bearer {raw}"}


@pytest.fixture
def people(db: Database) -> dict[str, dict[str, str]]:
    return {
        "viewer": bearer(db, "viewer", Role.viewer),
        "alice": bearer(db, "alice", Role.technician),
        "bob": bearer(db, "bob", Role.technician),
        "op": bearer(db, "op", Role.operator),
    }


def seed(db: Database) -> None:
    """Two hosts in two datacenters with a report each, and tickets of several kinds and ages."""
    from remediator import ingest
    from remediator.rules import load_ruleset

    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    with db.session() as session:
        apply_inventory(
            session,
            [
                HostInventory(hostname="web-1", datacenter="ams1", row="R1", rack="R1-01", slot="U10"),
                HostInventory(hostname="db-1", datacenter="fra2", row="R4", rack="R4-09", slot="U03"),
            ],
            actor="test",
        )
        ingest.ingest(session, [edac_report("web-1", at=now - dt.timedelta(minutes=5))], ruleset=load_ruleset([]))
        for hostname, dc, rack, part_type, part, priority, age_h in (
            ("web-1", "ams1", "R1-01", "dimm", LABEL, 2, 30),
            ("web-1", "ams1", "R1-01", "psu", "PS2", 3, 2),
            ("db-1", "fra2", "R4-09", "disk", "9VM8RT2K", 1, 1),
        ):
            _ticket, _ = tickets.open_ticket(
                session,
                TicketRequest(
                    hostname=hostname,
                    datacenter=dc,
                    rack=rack,
                    part_type=part_type,
                    part=part,
                    title=f"Replace {part_type} {part}",
                    priority=priority,
                ),
                actor="system:remediator",
                now=now - dt.timedelta(hours=age_h),
            )
        session.execute(select(Ticket))


def ids(response: object) -> list[int]:
    body = response.json()  # type: ignore[attr-defined]
    return [t["id"] for t in body["items"]]


def test_reading_needs_a_viewer_and_changing_needs_the_right_role(
    client: TestClient, db: Database, people: dict[str, dict[str, str]]
) -> None:
    seed(db)
    assert client.get("/api/v1/tickets").status_code == 401
    assert client.get("/api/v1/tickets").json()["error"]["code"] == "unauthenticated"
    listed = client.get("/api/v1/tickets", headers=people["viewer"])
    assert listed.status_code == 200
    assert len(listed.json()["items"]) == 3
    first = listed.json()["items"][0]["id"]
    etag = client.get(f"/api/v1/tickets/{first}", headers=people["viewer"]).headers["ETag"]
    claim = client.post(f"/api/v1/tickets/{first}/claim", headers={**people["viewer"], "If-Match": etag})
    assert claim.status_code == 403
    assert claim.json()["error"]["message"] == "token:viewer has role viewer; this needs technician"
    cancel = client.post(
        f"/api/v1/tickets/{first}/cancel", json={"reason": "x"}, headers={**people["alice"], "If-Match": etag}
    )
    assert cancel.status_code == 403
    opened = client.post(
        "/api/v1/tickets",
        json={"hostname": "web-1", "part_type": "fan", "part": "FAN3", "title": "Fan 3 rattles"},
        headers=people["alice"],
    )
    assert opened.status_code == 403


def test_two_technicians_cannot_silently_overwrite_each_other(
    client: TestClient, db: Database, people: dict[str, dict[str, str]]
) -> None:
    seed(db)
    [ticket_id] = ids(client.get("/api/v1/tickets?part_type=dimm", headers=people["viewer"]))
    seen = client.get(f"/api/v1/tickets/{ticket_id}", headers=people["alice"])
    etag = seen.headers["ETag"]
    assert etag == f'"ticket-{ticket_id}-v1"'

    missing = client.post(f"/api/v1/tickets/{ticket_id}/claim", headers=people["alice"])
    assert missing.status_code == 428
    assert missing.json()["error"]["detail"] == {"current": etag}

    alice = client.post(f"/api/v1/tickets/{ticket_id}/claim", headers={**people["alice"], "If-Match": etag})
    assert alice.status_code == 200, alice.text
    assert (alice.json()["state"], alice.json()["assignee"]) == ("claimed", "token:alice")
    assert alice.headers["ETag"] == f'"ticket-{ticket_id}-v2"'

    bob = client.post(f"/api/v1/tickets/{ticket_id}/claim", headers={**people["bob"], "If-Match": etag})
    assert bob.status_code == 412
    assert bob.json()["error"] == {
        "code": "precondition_failed",
        "message": f"ticket {ticket_id} changed since you read it (now {alice.headers['ETag']}); reload and try again",
        "detail": {"current": alice.headers["ETag"]},
    }
    fresh = client.post(
        f"/api/v1/tickets/{ticket_id}/claim", headers={**people["bob"], "If-Match": alice.headers["ETag"]}
    )
    assert fresh.status_code == 409
    assert fresh.json()["error"]["message"] == f"ticket {ticket_id} is claimed; claim needs it open"


def test_claim_start_comment_resolve_then_verify(
    client: TestClient, db: Database, people: dict[str, dict[str, str]]
) -> None:
    seed(db)
    [ticket_id] = ids(client.get("/api/v1/tickets?part_type=dimm", headers=people["viewer"]))
    url = f"/api/v1/tickets/{ticket_id}"
    etag = client.get(url, headers=people["alice"]).headers["ETag"]
    etag = client.post(f"{url}/claim", headers={**people["alice"], "If-Match": etag}).headers["ETag"]
    started = client.post(f"{url}/start", json={"note": "at the rack"}, headers={**people["alice"], "If-Match": etag})
    assert started.json()["state"] == "in_progress"
    commented = client.post(f"{url}/comments", json={"note": "pin A1 looks burnt"}, headers=people["alice"])
    assert commented.status_code == 201
    assert commented.headers["ETag"] == started.headers["ETag"]  # a comment changes no field
    stale = client.post(
        f"{url}/resolve",
        json={"replacements": [{"old_serial": "1A2B3C4D", "new_serial": "1A2B3C4D"}], "note": "swap"},
        headers={**people["alice"], "If-Match": commented.headers["ETag"]},
    )
    assert stale.status_code == 422
    assert stale.json()["error"]["message"].startswith("body.replacements.0: Value error, new_serial is the old one")
    resolved = client.post(
        f"{url}/resolve",
        json={
            "replacements": [{"old_serial": "1A2B3C4D", "new_serial": "5E6F7A8B", "vendor": "Samsung"}],
            "note": "replaced the DIMM in A1",
        },
        headers={**people["alice"], "If-Match": commented.headers["ETag"]},
    )
    assert resolved.status_code == 200, resolved.text
    body = resolved.json()
    assert body["state"] == "verifying"
    assert body["verify_until"] is not None
    assert [e["kind"] for e in body["events"]] == ["opened", "claimed", "started", "comment", "resolved", "verifying"]
    [repair] = body["repairs"]
    assert (repair["vendor"], repair["old_serial"], repair["new_serial"], repair["replaced_by"]) == (
        "Samsung",
        "1A2B3C4D",
        "5E6F7A8B",
        "token:alice",
    )
    listed = client.get("/api/v1/repairs", headers=people["viewer"]).json()["items"]
    assert [r["ticket_id"] for r in listed] == [ticket_id]
    stats = client.get("/api/v1/repairs/stats?part_type=dimm", headers=people["viewer"]).json()
    assert [(s["vendor"], s["replaced"], s["returned"]) for s in stats] == [("Samsung", 1, 0)]
    with db.session() as session:
        actions = session.scalars(
            select(AuditEntry.action).where(AuditEntry.object_id == str(ticket_id)).order_by(AuditEntry.id)
        ).all()
    assert actions[-4:] == [
        "ticketing.ticket.comment",
        "ticketing.ticket.resolved",
        "ticketing.ticket.verifying",
        "remediator.repair.load_test_started",  # a DIMM: its load test (docs/tickets.md)
    ]


def test_operators_open_by_hand_reassign_and_cancel_with_a_reason(
    client: TestClient, db: Database, people: dict[str, dict[str, str]]
) -> None:
    seed(db)
    body = {"hostname": "web-1", "part_type": "dimm", "part": LABEL, "title": "Reseat", "note": "seen on the console"}
    again = client.post("/api/v1/tickets", json=body, headers=people["op"])
    assert again.status_code == 200  # web-1's DIMM already has an open ticket: a detection is added to it
    assert again.json()["detections"] == 2
    opened = client.post(
        "/api/v1/tickets",
        json={"hostname": "web-1", "part_type": "fan", "part": "FAN3", "title": "Fan 3 rattles", "priority": 4},
        headers=people["op"],
    )
    assert opened.status_code == 201, opened.text
    created = opened.json()
    assert created["evidence"]["location"]["slot"] == "U10"
    assert created["priority"] == 4
    unknown = client.post("/api/v1/tickets", json={**body, "hostname": "nope-9"}, headers=people["op"])
    assert unknown.status_code == 404
    assert unknown.json()["error"] == {"code": "not_found", "message": "host 'nope-9' is not known", "detail": None}
    bad = client.post("/api/v1/tickets", json={**body, "priority": 9}, headers=people["op"])
    assert bad.status_code == 422
    assert bad.json()["error"]["message"].startswith("body.priority:")

    url = f"/api/v1/tickets/{created['id']}"
    assigned = client.post(
        f"{url}/assign",
        json={"assignee": "token:bob", "reason": "bob is on site"},
        headers={**people["op"], "If-Match": opened.headers["ETag"]},
    )
    assert (assigned.json()["state"], assigned.json()["assignee"]) == ("claimed", "token:bob")
    mine = client.get("/api/v1/tickets?assignee=me", headers=people["bob"]).json()["items"]
    assert [t["id"] for t in mine] == [created["id"]]
    no_reason = client.post(f"{url}/cancel", json={}, headers={**people["op"], "If-Match": assigned.headers["ETag"]})
    assert no_reason.status_code == 422
    assert "body.reason" in no_reason.json()["error"]["message"]
    cancelled = client.post(
        f"{url}/cancel",
        json={"reason": "the fan was replaced under the rack's own service contract"},
        headers={**people["op"], "If-Match": assigned.headers["ETag"]},
    )
    assert cancelled.json()["state"] == "cancelled"
    with db.session() as session:
        entry = session.scalars(select(AuditEntry).where(AuditEntry.action == "ticketing.ticket.cancelled")).one()
        assert (entry.actor, entry.object_id, entry.reason) == (
            "token:op",
            str(created["id"]),
            "the fan was replaced under the rack's own service contract",
        )
        # the DIMM ticket still holds the host
        assert session.scalars(select(Host.state).where(Host.hostname == "web-1")).one() == HostState.awaiting_repair


def test_filters_and_pages(client: TestClient, db: Database, people: dict[str, dict[str, str]]) -> None:
    seed(db)
    viewer = people["viewer"]

    def parts(query: str) -> list[str]:
        response = client.get(f"/api/v1/tickets?{query}", headers=viewer)
        assert response.status_code == 200, response.text
        return [t["part_type"] for t in response.json()["items"]]

    assert parts("") == ["disk", "psu", "dimm"]  # newest first
    assert parts("datacenter=ams1") == ["psu", "dimm"]
    assert parts("rack=R4-09") == ["disk"]
    assert parts("part_type=psu") == ["psu"]
    assert parts("priority=1&priority=2") == ["disk", "dimm"]
    assert parts("state=open&open=true") == ["disk", "psu", "dimm"]
    assert parts("state=closed") == []
    assert parts("min_age=1d") == ["dimm"]
    assert parts("max_age=90m") == ["disk"]
    assert parts("min_age=90m&max_age=1d") == ["psu"]
    bad = client.get("/api/v1/tickets?min_age=soon", headers=viewer)
    assert bad.status_code == 422
    assert bad.json()["error"]["message"] == "query.min_age: 'soon' is not an age like 30m, 12h or 7d"
    first = client.get("/api/v1/tickets?limit=2", headers=viewer).json()
    second = client.get(f"/api/v1/tickets?limit=2&cursor={first['next_cursor']}", headers=viewer).json()
    assert [t["part_type"] for t in first["items"] + second["items"]] == ["disk", "psu", "dimm"]
    assert second["next_cursor"] is None
    assert client.get("/api/v1/tickets/999999", headers=viewer).json() == {
        "error": {"code": "not_found", "message": "ticket 999999 does not exist", "detail": None}
    }


def test_the_fault_firing_again_does_not_invalidate_a_technicians_etag(
    client: TestClient, db: Database, people: dict[str, dict[str, str]]
) -> None:
    """Rules fire on every report while a fault lasts; a detection is not a change a technician must
    reload for. Lifecycle changes still move the ETag."""
    from remediator import ingest
    from remediator.rules import load_ruleset

    seed(db)
    [ticket_id] = ids(client.get("/api/v1/tickets?part_type=dimm", headers=people["viewer"]))
    url = f"/api/v1/tickets/{ticket_id}"
    etag = client.get(url, headers=people["alice"]).headers["ETag"]
    claimed = client.post(f"{url}/claim", headers={**people["alice"], "If-Match": etag})
    assert claimed.headers["ETag"] != etag
    etag = claimed.headers["ETag"]
    # the CE storm goes on while alice walks to the rack (30 hours after the ticket opened)
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    with db.session() as session:
        result = ingest.ingest(
            session, storm_reports("web-1", start=now - dt.timedelta(minutes=3)), ruleset=load_ruleset([])
        )
        assert result.remediations == []
    seen = client.get(url, headers=people["viewer"])
    assert seen.json()["detections"] == 2
    assert seen.json()["events"][-1]["kind"] == "detected_again"
    assert seen.headers["ETag"] == etag
    resolved = client.post(
        f"{url}/resolve",
        json={"replacements": [{"old_serial": "1A2B3C4D", "new_serial": "5E6F7A8B"}], "note": "swapped A1"},
        headers={**people["alice"], "If-Match": etag},
    )
    assert resolved.status_code == 200, resolved.text
    assert resolved.json()["state"] == "verifying"
    assert resolved.headers["ETag"] != etag
