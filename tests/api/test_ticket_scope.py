"""A technician changes only its own datacenters' tickets, on every ticket route of the API (the web
forms: tests/web/test_tickets.py). Operators are not scoped."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from core import accounts
from core.db import Database
from core.models import Role
from tests.builders.people import bearer, make_user
from tests.builders.runtime import runtime_of
from tests.builders.tickets import open_dimm_ticket


@pytest.fixture
def client(db: Database) -> Iterator[TestClient]:
    with TestClient(create_app(runtime_of(db))) as test_client:
        yield test_client


def person(db: Database, username: str, role: Role, datacenter: str | None) -> dict[str, str]:
    make_user(db, username, role, datacenter=datacenter)
    with db.session() as session:
        _, raw = accounts.create_token(session, name=f"{username}-cli", actor="test", reason="test", username=username)
    return {"Authorization": f"Bearer {raw}"}


def etag(client: TestClient, ticket_id: int, headers: dict[str, str]) -> dict[str, str]:
    return {**headers, "If-Match": client.get(f"/api/v1/tickets/{ticket_id}", headers=headers).headers["ETag"]}


def test_another_datacenters_ticket_is_read_only_to_a_technician(client: TestClient, db: Database) -> None:
    fra = open_dimm_ticket(db, "fra-001", datacenter="fra3", rack="fra3-r04")
    ams = open_dimm_ticket(db, "ams-001", datacenter="ams1", rack="ams1-r01")
    anna = person(db, "anna", Role.technician, "ams1")
    assert client.get(f"/api/v1/tickets/{fra}", headers=anna).status_code == 200  # it may read it
    calls = [
        ("claim", {"note": "mine"}),
        ("start", {"note": "at the rack"}),
        ("comments", {"note": "hello"}),
        ("resolve", {"replacements": [], "note": "reseated"}),
    ]
    for route, body in calls:
        response = client.post(f"/api/v1/tickets/{fra}/{route}", json=body, headers=etag(client, fra, anna))
        assert response.status_code == 403, (route, response.text)
        error = response.json()["error"]
        assert error["detail"] == {"datacenter": "fra3", "yours": ["ams1"]}
        assert "read-only to you" in error["message"]
    assert client.get(f"/api/v1/tickets/{fra}", headers=anna).json()["state"] == "open"
    # its own datacenter's ticket it works as before
    claimed = client.post(f"/api/v1/tickets/{ams}/claim", json={"note": "mine"}, headers=etag(client, ams, anna))
    assert claimed.status_code == 200, claimed.text
    # a technician of both, and an operator, are not held back
    both = person(db, "bo", Role.technician, "ams1, fra3")
    assert client.post(f"/api/v1/tickets/{fra}/comments", json={"note": "hi"}, headers=both).status_code == 201
    operator = bearer(db, Role.operator)
    assert client.post(f"/api/v1/tickets/{fra}/comments", json={"note": "ok"}, headers=operator).status_code == 201
