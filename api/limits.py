"""The API's front door: who is asking, and how much they may send, before a byte of the body is read.

FastAPI reads and parses a request's body before its dependencies run, so the route's own `require`
comes too late to stop an unauthenticated client from making the service parse 330 MB of JSON. This
ASGI middleware refuses a NUL in any request's query or path (422: PostgreSQL cannot store one), and,
for every /api/ request that carries a body:

1. refuses a declared `Content-Length` above the path's limit with 413, reading nothing;
2. authenticates the request (the same bearer token or web session the route will check) and refuses
   a request without valid credentials with 401, reading nothing;
3. reads the body up to the limit (a chunked body that goes past it is refused with 413 there), then
   hands it to the application.

Limits (settings): report submission `max_report_body_bytes`, batches `max_batch_body_bytes`,
everything else `max_body_bytes`. The route still decides roles (403) and validates (422).
"""

from __future__ import annotations

from typing import Any

from anyio import to_thread
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.auth import authenticate
from api.errors import error_body
from core.settings import Settings

BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def limit_for(path: str, settings: Settings) -> int:
    if path.rstrip("/") == "/api/v1/reports/batch":
        return settings.max_batch_body_bytes
    if path.rstrip("/") in ("/api/v1/reports", "/api/v1/reports/delta"):  # a delta may change every section
        return settings.max_report_body_bytes
    return settings.max_body_bytes


def too_large(limit: int) -> JSONResponse:
    message = f"request body over {limit} bytes: refused before reading (split a batch, or raise the setting)"
    return JSONResponse(error_body("too_large", message, {"limit_bytes": limit}), status_code=413)


class RequestGuard:
    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and (b"%00" in scope.get("query_string", b"").lower() or "\x00" in scope["path"]):
            # PostgreSQL's text cannot hold a NUL: a filter with one is a bad request, not a 500 from the store
            body = error_body(
                "invalid",
                "query: a NUL character (%00) is not a valid value",
                [{"field": "query", "message": "a NUL character"}],
            )
            await JSONResponse(body, status_code=422)(scope, receive, send)
            return
        if scope["type"] != "http" or scope["method"] not in BODY_METHODS or not scope["path"].startswith("/api/"):
            await self.app(scope, receive, send)
            return
        limit = limit_for(scope["path"], self.settings)
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            await too_large(limit)(scope, receive, send)
            return
        if not await self._authenticated(scope):
            body = error_body("unauthenticated", "credentials required: send Authorization: Bearer <token>, or log in")
            await JSONResponse(body, status_code=401)(scope, receive, send)
            return
        messages: list[Message] = []
        size = 0
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break  # the client went away: let the application see it
            size += len(message.get("body", b""))
            if size > limit:
                await too_large(limit)(scope, receive, send)
                return
            if not message.get("more_body", False):
                break
        replay = iter(messages)

        async def buffered() -> Message:
            return next(replay, None) or await receive()

        await self.app(scope, buffered, send)

    async def _authenticated(self, scope: Scope) -> bool:
        """Authenticate once; the route's `require` takes the principal from the request state (one
        token lookup per request, not two, on the report intake path)."""
        request = Request(scope)
        database = scope["app"].state.database

        def check() -> bool:
            with database.sessionmaker() as session:
                principal = authenticate(request, session)
                session.commit()  # last_used_at
            if principal is None:
                return False
            request.state.authenticated = principal  # scope["state"]: the route's Request sees it
            return True

        return await to_thread.run_sync(check)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def install(app: Any, settings: Settings) -> None:
    """Added before the session middleware, so it runs inside it and sees the web session."""
    app.add_middleware(RequestGuard, settings=settings)
