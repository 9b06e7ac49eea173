"""Web UI tests: a signed-in client and its CSRF token. The people and tickets they act on are built by
tests/builders (people.make_user, tickets.open_dimm_ticket)."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient

from core.db import Database
from core.models import Role
from tests.builders.people import make_user

CSRF_FIELD = re.compile(r'name="csrf_token" value="([^"]+)"')


def csrf_token(client: TestClient, path: str = "/login") -> str:
    found = CSRF_FIELD.search(client.get(path).text)
    assert found, f"no csrf_token field on {path}"
    return found.group(1)


def login(client: TestClient, username: str, password: str) -> None:
    token = csrf_token(client)
    response = client.post(
        "/login", data={"username": username, "password": password, "csrf_token": token}, follow_redirects=False
    )
    assert response.status_code == 303, response.text


def signed_in(client: TestClient, db: Database, username: str, role: Role, *, datacenter: str | None = None) -> str:
    """Create the person, sign the client in as them, and return the session's CSRF token."""
    login(client, username, make_user(db, username, role, datacenter=datacenter))
    return csrf_token(client, "/queue")
