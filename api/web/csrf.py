"""Cross-site request forgery protection: a per-session token on every unsafe request.

A browser sends the session cookie with any request to this origin, including
one a hostile page makes it send. So every POST/PUT/PATCH/DELETE that could be
authenticated by the cookie must also carry the session's token, which a page
on another origin cannot read: in the `csrf_token` form field (plain forms) or
the `X-CSRF-Token` header (HTMX sends it from `hx-headers` on <body>).

Checked here, in one place, before any route runs:
- every unsafe request to the web pages (the login form included, so nobody can
  be signed in as someone else behind their back);
- unsafe API requests that carry a signed-in session and no Bearer token
  (a Bearer token is never sent by a browser on its own, so it needs no token).
This is OWASP's synchronizer-token pattern
(https://cheatsheetseries.owasp.org/cheatsheets/Cross-Site_Request_Forgery_Prevention_Cheat_Sheet.html).
"""

from __future__ import annotations

import secrets
from collections.abc import MutableMapping
from typing import Any
from urllib.parse import parse_qs

from starlette.datastructures import Headers
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import error_body

SESSION_KEY = "csrf"
FORM_FIELD = "csrf_token"
HEADER = "x-csrf-token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
MAX_FORM_BYTES = 1 << 20
"""The web UI's forms are a few fields; a bigger urlencoded body is refused rather than buffered."""

REFUSAL = (
    "This form did not carry fleetfix's security token (it expired, or it was sent from another site). "
    "Nothing was changed: reload the page and try again."
)


def session_token(session: MutableMapping[str, Any]) -> str:
    """The session's token, created on first use (the login page is the first for most people)."""
    token = session.get(SESSION_KEY)
    if not isinstance(token, str) or not token:
        token = secrets.token_urlsafe(32)
        session[SESSION_KEY] = token
    return token


def rotate_token(session: MutableMapping[str, Any]) -> str:
    """A new token (at sign-in: the one shown before it must not outlive the anonymous session)."""
    session[SESSION_KEY] = secrets.token_urlsafe(32)
    return str(session[SESSION_KEY])


class CSRFMiddleware:
    """Refuses unsafe requests without the session's token (403); must run inside SessionMiddleware."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in SAFE_METHODS:
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        scheme, _, credentials = headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and credentials.strip():
            await self.app(scope, receive, send)  # api.auth then ignores the cookie
            return
        session = scope.get("session") or {}
        is_api = scope["path"].startswith("/api/")
        if is_api and not session.get("sid"):
            await self.app(scope, receive, send)  # nothing to forge: the API answers 401 itself
            return
        sent = headers.get(HEADER)
        if sent is None and headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
            body = await _read_body(receive)
            if body is None:
                await _refuse(scope, receive, send, is_api, 413, "the form is larger than 1 MiB")
                return
            sent = next(iter(parse_qs(body.decode("latin-1")).get(FORM_FIELD, [])), None)
            receive = _replay(body)
        expected = session.get(SESSION_KEY)
        if not (isinstance(expected, str) and expected and sent and secrets.compare_digest(sent, expected)):
            await _refuse(scope, receive, send, is_api, 403, REFUSAL)
            return
        await self.app(scope, receive, send)


async def _read_body(receive: Receive) -> bytes | None:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_FORM_BYTES:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _replay(body: bytes) -> Receive:
    """A receive() that hands the buffered body to the application once, then waits like the server would."""
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return {"type": "http.disconnect"}

    return receive


async def _refuse(scope: Scope, receive: Receive, send: Send, is_api: bool, status: int, message: str) -> None:
    response: Response
    if is_api:
        response = JSONResponse(error_body("csrf_failed", message), status_code=status)
    else:
        # Plain text in a fixed page: nothing of the request is echoed.
        response = HTMLResponse(
            "<!doctype html><html lang=en><meta charset=utf-8><title>Refused · fleetfix</title>"
            f'<body><main><h1>Refused</h1><p class="error">{message}</p><p><a href="/">Back to fleetfix</a></p>'
            "</main></body></html>",
            status_code=status,
        )
    await response(scope, receive, send)
