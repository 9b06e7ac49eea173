"""Every API route declares its role: no credentials get 401, the role below gets 403, the role itself passes.

The walk reads the routes off the application, so a route added without a
`require(...)` dependency fails here until it has one (or joins PUBLIC).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from fastapi.routing import RouteContext
from fastapi.testclient import TestClient

from api.app import create_app
from core.db import Database
from core.models import Role
from tests.api.helpers import api_routes, requirement
from tests.builders.people import bearer
from tests.builders.runtime import runtime_of

PUBLIC = {"/healthz", "/readyz", "/metrics"}
"""Routes anyone may call: load balancers' and Prometheus' probes carry no credentials."""

ROLES = list(Role)


def example_path(route: RouteContext) -> str:
    values = {}
    for param in route.dependant.path_params:
        annotation = param.field_info.annotation
        values[param.name] = "1" if annotation is int else str(uuid.uuid4()) if annotation is uuid.UUID else "nothing"
    return str(route.path).format(**values)


@pytest.fixture
def client(db: Database) -> Iterator[TestClient]:
    with TestClient(create_app(runtime_of(db))) as test_client:
        yield test_client


def test_every_route_declares_one_role_or_is_public_or_a_page() -> None:
    for route in api_routes():
        declared = requirement(route.dependant)
        if str(route.path).startswith("/api/"):
            assert len(declared) == 1, f"{sorted(route.methods or [])} {route.path}: needs exactly one require(Role.…)"
        elif not declared:
            # Outside /api only health probes and the web UI's pages (api.web, whose sign-in is its own).
            assert route.path in PUBLIC or str(route.endpoint.__module__).startswith("api.web."), route.path


@pytest.mark.parametrize(
    "route", [r for r in api_routes() if str(r.path).startswith("/api/")], ids=lambda r: f"{sorted(r.methods)} {r.path}"
)
def test_role_is_enforced(route: RouteContext, client: TestClient, db: Database) -> None:
    declared = requirement(route.dependant)
    assert len(declared) == 1, f"{route.path}: needs exactly one require(Role.…)"
    [required] = declared
    role: Role = required.required_role
    path = example_path(route)
    for method in sorted(set(route.methods or []) - {"HEAD"}):
        anonymous = client.request(method, path)
        assert anonymous.status_code == 401, (method, path, anonymous.text)
        assert anonymous.json()["error"]["code"] == "unauthenticated"
        garbage = client.request(method, path, headers={"Authorization": "Bearer ffx_not-a-token"})
        assert garbage.status_code == 401, (method, path)
        if role.rank > 0:
            below = client.request(method, path, headers=bearer(db, ROLES[role.rank - 1]))
            assert below.status_code == 403, (method, path, below.text)
            assert below.json()["error"]["code"] == "forbidden"
            assert role.value in below.json()["error"]["message"]
        as_host = client.request(method, path, headers=bearer(db, hostname="web-001"))
        if required.admits_hosts:
            assert as_host.status_code not in (401, 403), (method, path, as_host.text)
        else:
            assert as_host.status_code == 403, (method, path, as_host.text)
        # Without a body or If-Match a write stops at 422/428 before it changes anything.
        allowed = client.request(method, path, headers=bearer(db, role))
        assert allowed.status_code not in (401, 403), (method, path, allowed.text)
