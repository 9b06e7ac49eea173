"""Credentials over HTTP: hosts report only for themselves; admins manage users and tokens; all of it audited."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from core.db import Database
from core.models import Role
from tests.builders.people import bearer
from tests.builders.reports import T0, edac_report, payload
from tests.builders.runtime import runtime_of


@pytest.fixture
def client(db: Database) -> Iterator[TestClient]:
    with TestClient(create_app(runtime_of(db))) as test_client:
        yield test_client


def test_a_host_submits_its_own_reports_and_no_one_elses(client: TestClient, db: Database) -> None:
    web1 = bearer(db, hostname="web-001")
    own = client.post("/api/v1/reports", json=payload(edac_report("web-001")), headers=web1)
    assert own.status_code == 200, own.text
    assert len(own.json()["accepted"]) == 1
    other = client.post("/api/v1/reports", json=payload(edac_report("web-002")), headers=web1)
    assert other.status_code == 403
    error = other.json()["error"]
    assert (error["code"], error["detail"]) == ("forbidden", {"credential": "web-001", "report": "web-002"})
    assert "host:web-001" in error["message"]
    assert "web-002" in error["message"]
    viewer = bearer(db, Role.viewer)
    hosts = client.get("/api/v1/hosts", headers=viewer).json()["items"]
    assert [h["hostname"] for h in hosts] == ["web-001"]
    # A host's credential reads nothing and changes nothing.
    assert client.get("/api/v1/hosts", headers=web1).status_code == 403
    assert client.get("/api/v1/me", headers=web1).json() == {
        "actor": "host:web-001",
        "role": None,
        "hostname": "web-001",
    }


def test_a_batch_refuses_other_hosts_reports_one_by_one(client: TestClient, db: Database) -> None:
    malformed = payload(edac_report("web-001", at=T0))
    malformed["captured_at"] = "yesterday"
    batch = [
        payload(edac_report("web-001", at=T0)),
        payload(edac_report("db-007", at=T0)),
        malformed,
        payload(edac_report("web-001", at=T0 + dt.timedelta(minutes=1))),
    ]
    response = client.post("/api/v1/reports/batch", json=batch, headers=bearer(db, hostname="web-001"))
    assert response.status_code == 200, response.text
    result = response.json()
    assert len(result["accepted"]) == 2
    assert [r["index"] for r in result["refused"]] == [1, 2]
    assert result["refused"][0]["errors"] == [
        "host.hostname: host:web-001 may only submit its own reports, not db-007's"
    ]
    assert result["refused"][1]["errors"][0].startswith("captured_at")
    # An operator's tool may submit for any host.
    tool = client.post("/api/v1/reports/batch", json=batch[1:2], headers=bearer(db, Role.operator))
    assert len(tool.json()["accepted"]) == 1


def test_a_technician_cannot_submit_reports(client: TestClient, db: Database) -> None:
    response = client.post("/api/v1/reports", json=payload(edac_report()), headers=bearer(db, Role.technician))
    assert response.status_code == 403
    assert response.json()["error"]["message"] == "token:test-technician has role technician; this needs operator"


def test_admin_manages_users_and_tokens(client: TestClient, db: Database) -> None:
    admin = bearer(db, Role.admin)
    created = client.post(
        "/api/v1/users",
        json={"username": "alice", "role": "technician", "password": "correct horse battery", "reason": "new hire"},
        headers=admin,
    )
    assert created.status_code == 201, created.text
    assert "password" not in created.text
    assert "hash" not in created.text
    duplicate = client.post(
        "/api/v1/users",
        json={"username": "alice", "role": "viewer", "password": "correct horse battery", "reason": "again"},
        headers=admin,
    )
    assert duplicate.status_code == 409
    short = client.post(
        "/api/v1/users", json={"username": "bob", "role": "viewer", "password": "short", "reason": "x"}, headers=admin
    )
    assert short.status_code == 422
    assert "body.password" in short.json()["error"]["message"]

    # Her token acts as her, with at most her role.
    too_much = client.post(
        "/api/v1/tokens", json={"name": "cli", "username": "alice", "role": "admin", "reason": "x"}, headers=admin
    )
    assert too_much.status_code == 422
    issued = client.post("/api/v1/tokens", json={"name": "cli", "username": "alice", "reason": "laptop"}, headers=admin)
    assert issued.status_code == 201, issued.text
    secret = issued.json()["secret"]
    token = issued.json()["token"]
    assert (token["owner"], token["role"], token["prefix"]) == ("user:alice", "technician", secret[4:12])
    alice = {"Authorization": f"Bearer {secret}"}
    assert client.get("/api/v1/me", headers=alice).json() == {
        "actor": "user:alice",
        "role": "technician",
        "hostname": None,
    }
    listed = client.get("/api/v1/tokens", headers=admin).json()["items"]
    assert secret not in str(listed)
    assert token["id"] in [t["id"] for t in listed]

    # Disabling her stops her token at once; enabling brings it back; revoking ends it.
    changed = client.patch("/api/v1/users/alice", json={"active": False, "reason": "left the team"}, headers=admin)
    assert changed.json()["active"] is False
    assert client.get("/api/v1/me", headers=alice).status_code == 401
    client.patch("/api/v1/users/alice", json={"active": True, "reason": "back"}, headers=admin)
    assert client.get("/api/v1/me", headers=alice).status_code == 200
    revoked = client.post(f"/api/v1/tokens/{token['id']}/revoke", json={"reason": "laptop lost"}, headers=admin)
    assert revoked.json()["revoked_at"] is not None
    assert client.get("/api/v1/me", headers=alice).status_code == 401
    assert client.post(f"/api/v1/tokens/{token['id']}/revoke", json={"reason": "x"}, headers=admin).status_code == 409

    password = client.put(
        "/api/v1/users/alice/password", json={"password": "another long secret", "reason": "reset"}, headers=admin
    )
    assert password.status_code == 200
    from core.auth import authenticate_user

    with db.session() as session:
        assert authenticate_user(session, "alice", "another long secret") is not None
        assert authenticate_user(session, "alice", "correct horse battery") is None

    audit = client.get("/api/v1/audit", params={"object_type": "user", "object_id": "alice"}, headers=admin).json()
    assert [(e["action"], e["actor"], e["reason"]) for e in reversed(audit["items"])] == [
        ("core.user.created", "token:test-admin", "new hire"),
        ("core.user.disabled", "token:test-admin", "left the team"),
        ("core.user.enabled", "token:test-admin", "back"),
        ("core.user.password_set", "token:test-admin", "reset"),
    ]
    tokens = client.get("/api/v1/audit", params={"action": "core.token."}, headers=admin).json()["items"]
    assert [e["action"] for e in tokens] == ["core.token.revoked", "core.token.issued"]
    assert secret not in str(tokens)


def test_the_last_admin_cannot_be_disabled_or_demoted(client: TestClient, db: Database) -> None:
    admin = bearer(db, Role.admin)
    body = {"username": "root", "role": "admin", "password": "a long admin password", "reason": "first"}
    assert client.post("/api/v1/users", json=body, headers=admin).status_code == 201
    for change in ({"active": False}, {"role": "operator"}):
        refused = client.patch("/api/v1/users/root", json={**change, "reason": "oops"}, headers=admin)
        assert refused.status_code == 409, refused.text
        assert "last active admin" in refused.json()["error"]["message"]
    body = {**body, "username": "second"}
    assert client.post("/api/v1/users", json=body, headers=admin).status_code == 201
    assert (
        client.patch("/api/v1/users/root", json={"role": "operator", "reason": "fine now"}, headers=admin).status_code
        == 200
    )


def test_host_tokens_take_no_role(client: TestClient, db: Database) -> None:
    admin = bearer(db, Role.admin)
    mixed = client.post(
        "/api/v1/tokens", json={"name": "h", "hostname": "web-001", "role": "operator", "reason": "x"}, headers=admin
    )
    assert mixed.status_code == 422
    assert "hostname" in str(mixed.json()["error"]["detail"])
    host = client.post("/api/v1/tokens", json={"name": "h", "hostname": "web-001", "reason": "new host"}, headers=admin)
    assert host.json()["token"]["owner"] == "host:web-001"
    assert host.json()["token"]["role"] is None


def test_a_demoted_user_s_token_acts_with_the_user_s_new_role(client: TestClient, db: Database) -> None:
    """The outside review's case: a token issued while its user was operator still paused the fleet after
    the user was demoted to viewer. A token acts with the lower of its role and its user's current one."""
    admin = bearer(db, Role.admin)
    client.post(
        "/api/v1/users",
        json={"username": "carol", "role": "operator", "password": "correct horse battery", "reason": "on call"},
        headers=admin,
    )
    issued = client.post("/api/v1/tokens", json={"name": "cli", "username": "carol", "reason": "laptop"}, headers=admin)
    carol = {"Authorization": f"Bearer {issued.json()['secret']}"}
    assert client.get("/api/v1/me", headers=carol).json()["role"] == "operator"
    demoted = client.patch("/api/v1/users/carol", json={"role": "viewer", "reason": "off call"}, headers=admin)
    assert demoted.status_code == 200, demoted.text
    assert client.get("/api/v1/me", headers=carol).json()["role"] == "viewer"
    paused = client.put("/api/v1/controls/pause", json={"paused": True, "reason": "not allowed"}, headers=carol)
    assert paused.status_code == 403, paused.text
    # promoted again, the token is back to what it was issued with, never more
    client.patch("/api/v1/users/carol", json={"role": "admin", "reason": "lead"}, headers=admin)
    assert client.get("/api/v1/me", headers=carol).json()["role"] == "operator"
