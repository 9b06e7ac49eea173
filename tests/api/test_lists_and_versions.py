"""Cursor pages on every list, filters, and If-Match on changes: two people cannot silently overwrite each other."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from core.db import Database
from core.models import Role
from remediator import planning
from remediator.models import RemediationState
from tests.builders.people import bearer
from tests.builders.reports import T0, payload, storm_reports
from tests.builders.runtime import runtime_of


@pytest.fixture
def client(db: Database) -> Iterator[TestClient]:
    with TestClient(create_app(runtime_of(db)), headers=bearer(db, Role.operator)) as test_client:
        yield test_client


def every_page(client: TestClient, url: str, **params: Any) -> list[list[dict[str, Any]]]:
    pages, cursor = [], None
    while True:
        response = client.get(url, params={**params, **({"cursor": cursor} if cursor else {})})
        assert response.status_code == 200, (url, response.text)
        body = response.json()
        pages.append(body["items"])
        cursor = body["next_cursor"]
        if cursor is None:
            return pages


def test_hosts_page_in_name_order_and_filter(client: TestClient) -> None:
    rows = [
        {
            "hostname": f"h{n:02d}",
            "datacenter": "ams1" if n % 2 else "sjc2",
            "rack": f"r{n % 3}",
            "hardware_class": "gen9",
        }
        for n in range(7)
    ]
    rows.append({"hostname": "odd-one", "datacenter": "ams1", "rack": "r1", "hardware_class": "gen10"})
    assert client.post("/api/v1/hosts/inventory", json=rows).json() == {"created": 8, "updated": 0}
    pages = every_page(client, "/api/v1/hosts", limit=3)
    assert [len(p) for p in pages] == [3, 3, 2]
    names = [h["hostname"] for page in pages for h in page]
    assert names == sorted(r["hostname"] for r in rows)
    ams_r1 = every_page(client, "/api/v1/hosts", datacenter="ams1", rack="r1")
    assert {h["hostname"] for h in ams_r1[0]} == {
        r["hostname"] for r in rows if (r["datacenter"], r["rack"]) == ("ams1", "r1")
    }
    gen10 = client.get("/api/v1/hosts", params={"hardware_class": "gen10"}).json()["items"]
    assert [h["hostname"] for h in gen10] == ["odd-one"]
    in_service = client.get("/api/v1/hosts", params={"state": "in_service", "limit": 100}).json()["items"]
    assert len(in_service) == 8
    assert client.get("/api/v1/hosts", params={"state": "asleep"}).status_code == 422
    bad = client.get("/api/v1/hosts", params={"cursor": "not-a-cursor"})
    assert bad.status_code == 422
    assert bad.json()["error"]["detail"][0]["field"] == "query.cursor"


def test_reports_decisions_remediations_and_audit_page_without_gaps(client: TestClient) -> None:
    planned = []
    for n in range(3):
        for report in storm_reports(f"w{n}", start=T0 + dt.timedelta(minutes=n)):
            response = client.post("/api/v1/reports", json=payload(report))
            assert response.status_code == 200
            planned += response.json()["remediations"]
    assert planned
    for url in ("/api/v1/reports", "/api/v1/decisions", "/api/v1/remediations", "/api/v1/audit"):
        whole = client.get(url, params={"limit": 1000}).json()["items"]
        assert whole, url
        paged = [item for page in every_page(client, url, limit=2) for item in page]
        assert paged == whole, url
        if url == "/api/v1/remediations":
            assert [r["id"] for r in whole] == sorted(planned, reverse=True)
    reports = client.get("/api/v1/reports", params={"hostname": "w1"}).json()["items"]
    assert {r["host_id"] for r in reports} == {reports[0]["host_id"]}
    captured = [r["captured_at"] for r in reports]
    assert captured == sorted(captured, reverse=True)
    one = client.get(f"/api/v1/reports/{reports[0]['id']}").json()
    assert one["body"]["host"]["hostname"] == "w1"
    assert client.get("/api/v1/reports/00000000-0000-0000-0000-000000000000").status_code == 404
    by_host = [client.get("/api/v1/remediations", params={"hostname": f"w{n}"}).json()["items"] for n in range(3)]
    assert sorted(r["id"] for found in by_host for r in found) == sorted(planned)
    assert all(len({r["host_id"] for r in found}) <= 1 for found in by_host)


def test_audit_filters(client: TestClient, db: Database) -> None:
    before = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)
    client.put("/api/v1/controls/pause", json={"paused": True, "reason": "incident 42"})
    client.put("/api/v1/controls/pause", json={"paused": False, "reason": "resolved"})
    entries = client.get("/api/v1/audit", params={"object_type": "control", "since": before.isoformat()}).json()
    assert [(e["action"], e["reason"], e["actor"]) for e in entries["items"]] == [
        ("remediator.fleet.resumed", "resolved", "token:test-operator"),
        ("remediator.fleet.paused", "incident 42", "token:test-operator"),
    ]
    later = (dt.datetime.now(dt.UTC) + dt.timedelta(minutes=1)).isoformat()
    assert client.get("/api/v1/audit", params={"since": later}).json()["items"] == []
    naive = client.get("/api/v1/audit", params={"since": "2026-01-01T00:00:00"})
    assert naive.status_code == 422
    mine = client.get("/api/v1/audit", params={"actor": "token:test-operator", "action": "remediator.fleet."}).json()
    assert len(mine["items"]) == 2
    assert client.get("/api/v1/audit", params={"actor": "user:nobody"}).json()["items"] == []


def test_remediation_changes_need_the_current_etag(client: TestClient, db: Database) -> None:
    [rid] = [client.post("/api/v1/reports", json=payload(r)).json() for r in storm_reports("v1")][-1]["remediations"]
    url = f"/api/v1/remediations/{rid}"
    first = client.get(url)
    etag = first.headers["ETag"]
    assert etag == f'"remediation-{rid}-v{first.json()["version"]}"'
    missing = client.post(f"{url}/cancel", json={"reason": "no etag"})
    assert missing.status_code == 428
    assert missing.json()["error"]["detail"] == {"current": etag}
    # Someone else changes it in between (here: the runner moves it on).
    with db.session() as session:
        from remediator.models import Remediation

        remediation = session.get_one(Remediation, rid)
        remediation.held_reason = "waiting for a slot"
    stale = client.post(f"{url}/cancel", json={"reason": "stale view"}, headers={"If-Match": etag})
    assert stale.status_code == 412
    assert stale.json()["error"]["code"] == "precondition_failed"
    current = stale.json()["error"]["detail"]["current"]
    assert current != etag
    assert client.get(url).headers["ETag"] == current
    done = client.post(f"{url}/cancel", json={"reason": "host retired"}, headers={"If-Match": current})
    assert done.status_code == 200
    assert done.json()["state"] == RemediationState.cancelled.value
    assert done.headers["ETag"] not in (etag, current)
    with db.session() as session:
        from sqlalchemy import select

        from core.models import AuditEntry

        entry = session.scalars(
            select(AuditEntry).where(AuditEntry.action == "remediator.remediation.cancel_requested")
        ).one()
        assert (entry.actor, entry.reason) == ("token:test-operator", "host retired")


def test_rule_changes_need_the_current_etag(client: TestClient, db: Database) -> None:
    url = "/api/v1/rules/dimm-ce-storm"
    first = client.get(url)
    assert first.headers["ETag"] == '"rule-dimm-ce-storm-v0"'
    assert client.post(f"{url}/mode", json={"mode": "paused", "reason": "x"}).status_code == 428
    alice = client.post(
        f"{url}/mode", json={"mode": "shadow", "reason": "trial"}, headers={"If-Match": first.headers["ETag"]}
    )
    assert alice.status_code == 200
    # Bob still has the page he loaded before Alice's change.
    bob = client.post(
        f"{url}/mode", json={"mode": "paused", "reason": "noisy"}, headers={"If-Match": first.headers["ETag"]}
    )
    assert bob.status_code == 412
    assert client.get(url).json()["mode"] == "shadow"
    with db.session() as session:
        planning.open_breaker(session, "dimm-ce-storm", "fired on 40 hosts", T0)
    stale = client.post(f"{url}/breaker/reset", json={"reason": "x"}, headers={"If-Match": alice.headers["ETag"]})
    assert stale.status_code == 412  # the breaker tripping changed the rule too
    listed = {r["id"]: r for r in client.get("/api/v1/rules").json()}
    assert f'"rule-dimm-ce-storm-v{listed["dimm-ce-storm"]["version"]}"' == client.get(url).headers["ETag"]


def test_an_operator_pauses_one_remediation_and_resumes_it(client: TestClient, db: Database) -> None:
    """A paused remediation starts no step (a redelivered run does nothing) until it is resumed."""
    from core.dispatch import pending_tasks
    from remediator import runner
    from remediator.models import Remediation
    from tests.builders.runtime import runtime_of

    ruleset = runtime_of(db).remediator.rules.ruleset

    [rid] = [client.post("/api/v1/reports", json=payload(r)).json() for r in storm_reports("p1")][-1]["remediations"]
    url = f"/api/v1/remediations/{rid}"
    paused = client.post(f"{url}/pause", json={"reason": "checking the DIMM by hand"}, headers=etag_of(client, url))
    assert paused.status_code == 200
    assert paused.json()["paused_by"] == "token:test-operator"
    assert paused.json()["held_reason"] == "paused by token:test-operator: checking the DIMM by hand"
    again = client.post(f"{url}/pause", json={"reason": "twice"}, headers=etag_of(client, url))
    assert again.status_code == 409
    with db.session() as session:
        assert runner.advance(session, rid, ruleset=ruleset) == RemediationState.planned
        assert [s.state.value for s in session.get_one(Remediation, rid).steps] == ["pending", "pending"]
    with db.sessionmaker() as session:
        from remediator import operations

        operations.resume(session, rid, actor="user:olga", reason="looks fine", ruleset=ruleset)
        assert [t.task for t in pending_tasks(session)] == ["remediator.run_remediation"]  # it goes on
        session.rollback()
    resumed = client.post(f"{url}/resume", json={"reason": "looks fine"}, headers=etag_of(client, url))
    assert resumed.status_code == 200
    assert resumed.json()["paused_by"] is None
    with db.session() as session:
        assert runner.advance(session, rid, ruleset=ruleset) == RemediationState.running  # drained
    with db.session() as session:
        assert runner.advance(session, rid, ruleset=ruleset) == RemediationState.escalated
    assert client.post(f"{url}/resume", json={"reason": "done"}, headers=etag_of(client, url)).status_code == 409


def etag_of(client: TestClient, url: str) -> dict[str, str]:
    return {"If-Match": client.get(url).headers["ETag"]}


def test_an_inventory_naming_a_host_twice_is_refused_and_stores_nothing(client: TestClient) -> None:
    """The schema fuzzer's find: the same hostname twice in one import was a 500 (UNIQUE constraint)."""
    rows = [{"hostname": "dup-1"}, {"hostname": "dup-2"}, {"hostname": " dup-1 "}]  # stripped: the same name
    response = client.post("/api/v1/hosts/inventory", json=rows)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["detail"] == [{"field": "2.hostname", "message": "duplicate of row 0"}]
    assert client.get("/api/v1/hosts", params={"limit": 100}).json()["items"] == []
