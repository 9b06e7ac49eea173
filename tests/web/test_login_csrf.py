"""Signing in, the session cookie, and CSRF: a forged form is refused and changes nothing."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient
from sqlalchemy import select

from api.app import create_app
from api.settings import load_central_settings
from core.db import Database
from core.models import AuditEntry, Role
from tests.builders.people import bearer, make_user
from tests.builders.runtime import rewire, runtime_of
from tests.builders.tickets import open_dimm_ticket
from tests.web.helpers import csrf_token, signed_in


def test_a_stranger_is_sent_to_sign_in_and_comes_back(client: TestClient, db: Database) -> None:
    response = client.get("/queue?rack=r1&sort=age", follow_redirects=False)
    assert response.status_code == 303
    assert response.headers["location"] == "/login?next=/queue%3Frack%3Dr1%26sort%3Dage"
    assert client.get("/", follow_redirects=False).headers["location"] == "/login?next=/"
    htmx = client.get("/", headers={"HX-Request": "true"}, follow_redirects=False)
    assert htmx.status_code == 204
    assert htmx.headers["hx-redirect"] == "/login?next=/"

    password = make_user(db, "alice", Role.technician, datacenter="ams1")
    page = client.get(response.headers["location"])
    assert 'name="next" value="/queue?rack=r1&amp;sort=age"' in page.text
    token = csrf_token(client, response.headers["location"])
    signed = client.post(
        "/login",
        data={"username": "alice", "password": password, "next": "/queue?rack=r1&sort=age", "csrf_token": token},
        follow_redirects=False,
    )
    assert signed.status_code == 303
    assert signed.headers["location"] == "/queue?rack=r1&sort=age"
    queue = client.get(signed.headers["location"])
    assert queue.status_code == 200
    assert "user:alice · technician" in queue.text


def test_wrong_password_is_refused_without_saying_which_part_was_wrong(client: TestClient, db: Database) -> None:
    make_user(db, "alice", Role.technician)
    for username, password in (("alice", "not-her-password"), ("nobody", "whatever-it-is")):
        token = csrf_token(client)
        response = client.post("/login", data={"username": username, "password": password, "csrf_token": token})
        assert response.status_code == 401
        assert "Wrong user name or password." in response.text
        assert client.get("/", follow_redirects=False).status_code == 303  # still not signed in


def test_session_cookie_is_httponly_samesite_lax_and_secure_behind_https(db: Database) -> None:
    password = make_user(db, "alice", Role.viewer)
    for public_url, secure in (("", False), ("https://fleetfix.example.net", True)):
        app = create_app(rewire(db, settings=load_central_settings(public_url=public_url)))
        with TestClient(app, base_url="https://testserver" if secure else "http://testserver") as client:
            token = csrf_token(client)
            response = client.post(
                "/login", data={"username": "alice", "password": password, "csrf_token": token}, follow_redirects=False
            )
            cookie = response.headers["set-cookie"].lower()
            assert cookie.startswith("fleetfix_session=")
            assert "httponly" in cookie
            assert "samesite=lax" in cookie
            assert ("secure" in cookie) is secure


def test_sign_in_never_redirects_off_site(client: TestClient, db: Database) -> None:
    password = make_user(db, "alice", Role.viewer)
    for target in ("https://evil.example/", "//evil.example/x", "/\\evil.example"):
        token = csrf_token(client)
        response = client.post(
            "/login",
            data={"username": "alice", "password": password, "next": target, "csrf_token": token},
            follow_redirects=False,
        )
        assert response.headers["location"] == "/"


def test_sign_out_ends_the_session(client: TestClient, db: Database) -> None:
    token = signed_in(client, db, "alice", Role.viewer)
    assert client.get("/", follow_redirects=False).status_code == 200
    assert client.post("/logout", data={"csrf_token": token}, follow_redirects=False).headers["location"] == "/login"
    assert client.get("/", follow_redirects=False).status_code == 303


def test_a_copy_of_the_cookie_signs_nobody_in_after_sign_out(client: TestClient, db: Database) -> None:
    """The cookie carries a server-side session id: signing out ends the session itself, so a copy
    taken before (another tab, a stolen cookie) stops working too."""
    from api.web.pages import SESSION_COOKIE

    token = signed_in(client, db, "alice", Role.viewer)
    copy = client.cookies.get(SESSION_COOKIE)
    assert copy
    client.post("/logout", data={"csrf_token": token}, follow_redirects=False)
    client.cookies.set(SESSION_COOKIE, copy)
    assert client.get("/", follow_redirects=False).status_code == 303


def test_a_new_password_signs_the_user_out_everywhere(client: TestClient, db: Database) -> None:
    from core import accounts

    signed_in(client, db, "alice", Role.viewer)
    assert client.get("/", follow_redirects=False).status_code == 200
    with db.session() as session:
        accounts.set_password(session, "alice", "a-brand-new-passphrase", actor="user:alice", reason="rotated")
    assert client.get("/", follow_redirects=False).status_code == 303


def test_a_disabled_user_is_signed_out_at_the_next_request(client: TestClient, db: Database) -> None:
    from core import accounts

    signed_in(client, db, "alice", Role.viewer)
    make_user(db, "root", Role.admin)
    with db.session() as session:
        accounts.update_user(session, "alice", active=False, actor="user:root", reason="left the team")
    assert client.get("/", follow_redirects=False).status_code == 303


def test_forged_posts_are_refused_and_change_nothing(client: TestClient, db: Database) -> None:
    ticket_id = open_dimm_ticket(db)
    token = signed_in(client, db, "alice", Role.technician)
    version = re.search(r'name="version" value="(\d+)"', client.get(f"/tickets/{ticket_id}").text)
    assert version is not None
    form = {"version": version.group(1)}
    for forged in ({}, {"csrf_token": "a-guess"}, {"csrf_token": ""}):
        response = client.post(f"/tickets/{ticket_id}/claim", data={**form, **forged}, follow_redirects=False)
        assert response.status_code == 403, forged
        assert "did not carry fleetfix's security token" in response.text
    # The header HTMX sends is refused too when it is wrong.
    wrong_header = client.post(f"/tickets/{ticket_id}/claim", data=form, headers={"X-CSRF-Token": "nope"})
    assert wrong_header.status_code == 403
    with db.session() as session:
        claims = session.scalars(select(AuditEntry).where(AuditEntry.action == "ticketing.ticket.claimed")).all()
    assert claims == []
    assert "Claim</button>" in client.get(f"/tickets/{ticket_id}").text

    # With the session's token (form field, or the header) the same request goes through.
    done = client.post(f"/tickets/{ticket_id}/claim", data={**form, "csrf_token": token}, follow_redirects=False)
    assert done.status_code == 303


def test_the_login_form_itself_needs_the_token(client: TestClient, db: Database) -> None:
    password = make_user(db, "mallory", Role.viewer)
    response = client.post("/login", data={"username": "mallory", "password": password}, follow_redirects=False)
    assert response.status_code == 403
    assert client.get("/", follow_redirects=False).status_code == 303


def test_the_api_refuses_a_cookie_without_the_token_but_takes_bearer_tokens(client: TestClient, db: Database) -> None:
    token = signed_in(client, db, "olga", Role.operator)
    body = {"paused": True, "reason": "forged"}
    forged = client.put("/api/v1/controls/pause", json=body)
    assert forged.status_code == 403
    assert forged.json()["error"]["code"] == "csrf_failed"
    assert client.get("/api/v1/controls/pause").json()["paused"] is False
    with_header = client.put("/api/v1/controls/pause", json={**body, "reason": "ok"}, headers={"X-CSRF-Token": token})
    assert with_header.status_code == 200
    assert with_header.json()["paused"] is True

    with TestClient(create_app(runtime_of(db)), headers=bearer(db, Role.operator)) as tool:
        resumed = tool.put("/api/v1/controls/pause", json={"paused": False, "reason": "a tool"})
        assert resumed.status_code == 200
        assert tool.put("/api/v1/controls/pause", json={"paused": False, "reason": ""}).status_code == 422
    anonymous = TestClient(create_app(runtime_of(db)))
    assert anonymous.put("/api/v1/controls/pause", json=body).status_code == 401
