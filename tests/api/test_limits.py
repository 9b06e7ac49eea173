"""The API's front door (api/limits.py): a body is read only from an authenticated client, and only up to
the path's limit. The outside review's case: a 330 MB JSON body to /reports/batch without a token was
parsed in full before the 401 (memory 150 MB -> 3.7 GB, /healthz took 16 s)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from core.db import Database
from core.models import Role
from tests.builders.people import bearer
from tests.builders.reports import edac_report, payload
from tests.builders.runtime import runtime_of


@pytest.fixture
def app(db: Database) -> Any:
    return create_app(runtime_of(db))


class Client:
    """Drives the ASGI app directly, counting how much of the body the server asked for."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.chunks_read = 0

    def post(self, path: str, chunks: list[bytes], headers: dict[str, str]) -> tuple[int, bytes]:
        sent: list[dict[str, Any]] = []
        pending = list(chunks)

        async def receive() -> dict[str, Any]:
            if not pending:
                return {"type": "http.disconnect"}
            self.chunks_read += 1
            chunk = pending.pop(0)
            return {"type": "http.request", "body": chunk, "more_body": bool(pending)}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
            "client": ("127.0.0.1", 5000),
            "server": ("testserver", 80),
        }
        asyncio.run(self.app(scope, receive, send))
        start = next(m for m in sent if m["type"] == "http.response.start")
        body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
        return start["status"], body


def test_no_credentials_no_body_read(app: Any) -> None:
    client = Client(app)
    chunk = b"[" + b" " * 1_000_000
    status, body = client.post("/api/v1/reports/batch", [chunk] * 330, {"content-type": "application/json"})
    assert status == 401
    assert b'"unauthenticated"' in body
    assert client.chunks_read == 0  # refused before a byte of the 330 MB was read


def test_a_declared_length_over_the_limit_is_refused_unread(app: Any, db: Database) -> None:
    client = Client(app)
    headers = {"content-length": str(400_000_000), "content-type": "application/json", **bearer(db, Role.operator)}
    status, body = client.post("/api/v1/reports/batch", [b"[]"], headers)
    assert status == 413
    assert b'"too_large"' in body
    assert client.chunks_read == 0


def test_a_chunked_body_that_runs_past_the_limit_is_cut_off_there(app: Any, db: Database) -> None:
    client = Client(app)
    headers = {"content-type": "application/json", **bearer(db, Role.operator)}
    status, body = client.post("/api/v1/reports", [b" " * 1_000_000] * 40, headers)  # 40 MB, no length given
    assert status == 413
    assert b"2097152" in body  # the single report's limit, named
    assert client.chunks_read == 3  # read up to the limit, not the 40 MB


@pytest.fixture
def client(app: Any, db: Database) -> Iterator[TestClient]:
    with TestClient(app, headers=bearer(db, Role.operator)) as test_client:
        yield test_client


def test_an_authenticated_body_within_the_limit_reaches_the_route(client: TestClient) -> None:
    response = client.post("/api/v1/reports", json=payload(edac_report("web-001")))
    assert response.status_code == 200, response.text
    assert len(response.json()["accepted"]) == 1
    # the route still judges: a wrong role is 403, a bad body 422, and other limits apply elsewhere
    big = client.post(
        "/api/v1/users", content=b"{" + b" " * 2_000_000 + b"}", headers={"content-type": "application/json"}
    )
    assert big.status_code == 413
    assert big.json()["error"]["detail"] == {"limit_bytes": 1_048_576}


def test_a_report_post_looks_its_token_up_once(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """The front door authenticates and the route takes its principal: one lookup on the intake path."""
    from api import auth

    calls: list[str] = []
    real = auth.principal_for_token

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append("lookup")
        return real(*args, **kwargs)

    monkeypatch.setattr(auth, "principal_for_token", counted)
    response = client.post("/api/v1/reports", json=payload(edac_report("web-002")))
    assert response.status_code == 200, response.text
    assert calls == ["lookup"]
