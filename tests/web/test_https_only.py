"""The session cookie travels over https only in production, and `fleetfix api` will not serve the UI there
at a plain-http address; a redirect target never carries a control character into a header."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from api import cli
from api.app import create_app
from api.settings import load_central_settings
from core.db import Database
from core.models import Role
from tests.builders.people import make_user
from tests.builders.runtime import rewire
from tests.web.helpers import csrf_token

PRODUCTION = {
    "FLEETFIX_ENVIRONMENT": "production",
    "FLEETFIX_SECRET_KEY": "x" * 40,
    "FLEETFIX_BROKER_URL": "redis://127.0.0.1:6379/11",
}


def production(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, **extra: str) -> None:
    monkeypatch.setenv("FLEETFIX_DATA_DIR", str(tmp_path))
    # `fleetfix api` sets the metrics directory for the process; this keeps it from outliving the test
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path / "metrics"))
    for name, value in {**PRODUCTION, **extra}.items():
        monkeypatch.setenv(name, value)


def test_production_refuses_to_serve_the_ui_at_an_http_address(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import uvicorn

    served: list[object] = []
    monkeypatch.setattr(uvicorn, "run", lambda *args, **kwargs: served.append(args))
    production(monkeypatch, tmp_path, FLEETFIX_PUBLIC_URL="http://fleetfix.example.net")
    refused = CliRunner().invoke(cli.app, ["api"])
    assert refused.exit_code == 2
    assert "FLEETFIX_PUBLIC_URL must be the https:// address" in refused.output
    assert served == []
    production(monkeypatch, tmp_path, FLEETFIX_PUBLIC_URL="https://fleetfix.example.net")
    assert CliRunner().invoke(cli.app, ["api"]).exit_code == 0
    assert len(served) == 1


def test_the_session_cookie_is_secure_in_production(
    db: Database, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # even if the app is built with a plain-http address (only `fleetfix api` refuses that)
    production(monkeypatch, tmp_path, FLEETFIX_PUBLIC_URL="http://fleetfix.example.net")
    password = make_user(db, "sec-ops", Role.operator)
    with TestClient(create_app(rewire(db, settings=load_central_settings())), base_url="https://testserver") as client:
        token = csrf_token(client)
        response = client.post(
            "/login",
            data={"username": "sec-ops", "password": password, "csrf_token": token},
            follow_redirects=False,
        )
        assert response.status_code == 303, response.text
        cookie = response.headers["set-cookie"].lower()
        assert "fleetfix_session=" in cookie
        assert "; secure" in cookie


def test_a_redirect_target_with_control_characters_is_not_echoed(client: TestClient, db: Database) -> None:
    password = make_user(db, "hx-user", Role.viewer)
    token = csrf_token(client)
    response = client.post(
        "/login",
        data={"username": "hx-user", "password": password, "csrf_token": token, "next": "/queue\r\nX-Evil: 1"},
        headers={"HX-Request": "true"},
        follow_redirects=False,
    )
    assert response.status_code == 204
    assert response.headers["HX-Redirect"] == "/"
    assert "x-evil" not in {name.lower() for name in response.headers}
