"""Operators' controls over the API: rule modes, breakers, the global pause,
approvals, cancellations, decisions and repair effectiveness."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from api.app import create_app
from core.db import Database
from core.models import AuditEntry, Role
from remediator import decisions, planning
from remediator.rules import RuleRegistry
from tests.builders.people import bearer
from tests.builders.reports import T0, edac_report, payload
from tests.builders.runtime import rewire

PACK = """\
version: 1
safety: {caps: {rack: 5}, spacing: 0}
rules:
  - id: storm-reimage
    description: test rule that wants a destructive action
    when: {signal: dimm_ce_rate, op: ">=", value: 10}
    plan: [{action: reimage}]
    safety: {cooldown: 0, settle: 0, breaker: {max_percent: 100}}
  - id: dimm-ce-storm
    description: the built-in rule, overridden by id so that only the rule under test fires
    when: {signal: dimm_ce_rate, op: ">=", value: 1000000}
    plan: [{action: ticket}]
"""


@pytest.fixture
def client(db: Database, tmp_path: Path) -> Iterator[TestClient]:
    pack = tmp_path / "pack.yaml"
    pack.write_text(PACK)
    runtime = rewire(db, rules=RuleRegistry([pack]))
    with TestClient(create_app(runtime), headers=bearer(db, Role.operator)) as test_client:
        yield test_client


def change(client: TestClient, read: str, write: str, body: dict[str, object]) -> dict[str, object]:
    """What a person does: read the object, then change it with the ETag they saw."""
    etag = client.get(read).headers["ETag"]
    response = client.post(write, json=body, headers={"If-Match": etag})
    assert response.status_code == 200, response.text
    assert response.headers["ETag"] != etag
    result: dict[str, object] = response.json()
    return result


def set_mode(client: TestClient, rule: str, mode: str, reason: str) -> dict[str, object]:
    return change(client, f"/api/v1/rules/{rule}", f"/api/v1/rules/{rule}/mode", {"mode": mode, "reason": reason})


def storm(client: TestClient, hostname: str, at: dt.datetime = T0) -> dict[str, object]:
    client.post("/api/v1/reports", json=payload(edac_report(hostname, ce=0, at=at)))
    later = at + dt.timedelta(seconds=60)
    return client.post("/api/v1/reports", json=payload(edac_report(hostname, ce=6000, at=later))).json()


def test_rules_list_shows_pack_and_state(client: TestClient) -> None:
    rules = {r["id"]: r for r in client.get("/api/v1/rules").json()}
    assert {"dimm-ce-storm", "dimm-uncorrectable", "storm-reimage"} <= set(rules)
    assert rules["storm-reimage"]["plan"] == ["reimage"]
    assert rules["storm-reimage"]["mode"] == "active"
    assert rules["storm-reimage"]["breaker_open"] is False


def test_pause_shadow_and_resume_a_rule(client: TestClient, db: Database) -> None:
    assert set_mode(client, "storm-reimage", "paused", "noisy check")["mode"] == "paused"
    assert storm(client, "h1")["remediations"] == []
    [decision] = client.get("/api/v1/decisions", params={"hostname": "h1"}).json()["items"]
    assert (decision["outcome"], decision["reason"]) == ("skipped", "rule paused")
    set_mode(client, "storm-reimage", "shadow", "trial")
    storm(client, "h2")
    [decision] = client.get("/api/v1/decisions", params={"hostname": "h2"}).json()["items"]
    assert decision["outcome"] == "shadow"
    assert set_mode(client, "storm-reimage", "pack", "fixed")["mode"] == "active"
    with db.session() as session:
        actions = [
            a.detail
            for a in session.scalars(
                select(AuditEntry).where(AuditEntry.action == "remediator.rule.mode_changed").order_by(AuditEntry.id)
            )
        ]
    assert [a["to"] for a in actions] == ["paused", "shadow", None]
    [entry] = client.get("/api/v1/audit", params={"action": "remediator.rule.mode_changed", "limit": 1}).json()["items"]
    assert (entry["actor"], entry["object_id"], entry["reason"]) == ("token:test-operator", "storm-reimage", "fixed")


def test_unknown_rule_and_bad_mode(client: TestClient) -> None:
    assert client.post("/api/v1/rules/nope/mode", json={"mode": "paused", "reason": "x"}).status_code == 404
    assert client.get("/api/v1/rules/nope").status_code == 404
    bad = client.post(
        "/api/v1/rules/storm-reimage/mode", json={"mode": "off", "reason": "x"}, headers={"If-Match": "*"}
    )
    assert bad.status_code == 422
    assert "mode" in bad.json()["error"]["message"]


def test_breaker_reset(client: TestClient, db: Database) -> None:
    with db.session() as session:
        planning.open_breaker(session, "storm-reimage", "fired on 40 hosts", T0)
    rules = {r["id"]: r for r in client.get("/api/v1/rules").json()}
    assert rules["storm-reimage"]["breaker_open"] is True
    assert storm(client, "h1")["remediations"] == []
    url = "/api/v1/rules/storm-reimage/breaker/reset"
    reset = change(client, "/api/v1/rules/storm-reimage", url, {"reason": "check fixed"})
    assert reset["breaker_open"] is False
    etag = client.get("/api/v1/rules/storm-reimage").headers["ETag"]
    again = client.post(url, json={"reason": "again"}, headers={"If-Match": etag})
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "conflict"


def test_global_pause_holds_and_approval_admits(client: TestClient) -> None:
    client.put("/api/v1/controls/pause", json={"paused": True, "reason": "incident 42"})
    assert client.get("/api/v1/controls/pause").json()["paused"] is True
    [rid] = storm(client, "h1")["remediations"]
    held = client.get("/api/v1/hosts/h1").json()["remediations"][0]
    assert held["state"] == "detected"
    client.put("/api/v1/controls/pause", json={"paused": False, "reason": "resolved"})
    [rid2] = storm(client, "h2")["remediations"]
    waiting = client.get("/api/v1/hosts/h2").json()["remediations"][0]
    assert waiting["state"] == "awaiting_approval"
    url = f"/api/v1/remediations/{rid2}"
    approved = change(client, url, f"{url}/approve", {"reason": "checked with the DC"})
    assert approved["state"] == "planned"
    etag = client.get(url).headers["ETag"]
    assert client.post(f"{url}/approve", json={"reason": "again"}, headers={"If-Match": etag}).status_code == 409
    url = f"/api/v1/remediations/{rid}"
    cancelled = change(client, url, f"{url}/cancel", {"reason": "host retired"})
    assert cancelled["state"] == "cancelled"
    assert client.get("/api/v1/hosts/h1").json()["state"] == "in_service"


def test_effectiveness_counts_success_and_returns(client: TestClient, db: Database) -> None:
    from remediator.models import Remediation, RemediationState

    [rid] = storm(client, "h1")["remediations"]
    with db.session() as session:
        remediation = session.get_one(Remediation, rid)
        decisions.finish(session, remediation, RemediationState.succeeded, "fixed", T0 + dt.timedelta(hours=1))
    storm(client, "h1", at=T0 + dt.timedelta(days=3))  # the fault came back
    rows = client.get("/api/v1/rules/effectiveness").json()
    row = next(r for r in rows if r["rule"] == "storm-reimage" and r["plan"] == "reimage")
    assert (row["succeeded"], row["returned_within_30d"], row["return_rate"]) == (1, 1, 1.0)
