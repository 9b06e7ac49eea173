"""What every page shares: templates, who is signed in, flash messages, errors as pages, form versions.

Everything from the field (hostnames, kernel lines, SEL text) reaches the page
through Jinja2's autoescaping and is never marked safe; pages also send a
Content-Security-Policy that allows no inline script, so markup that did slip
through could not run.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any
from urllib.parse import quote

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import RedirectResponse
from fastapi.routing import APIRoute
from fastapi.templating import Jinja2Templates
from pydantic import ValidationError
from sqlalchemy.orm.exc import StaleDataError

from api.auth import Unauthenticated, require
from api.versioning import PreconditionFailed, PreconditionRequired, etag
from api.web.csrf import session_token
from core.auth import Principal
from core.errors import FleetfixError
from core.models import Role

log = logging.getLogger(__name__)

TEMPLATES = Jinja2Templates(directory=Path(__file__).with_name("templates"))
STATIC_DIR = Path(__file__).with_name("static")
SESSION_MAX_AGE_S = 12 * 3600  # a shift; the server-side record (core.auth) expires with the cookie
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)


# -- formatting filters -------------------------------------------------------------


def _as_datetime(value: Any) -> dt.datetime | None:
    if isinstance(value, dt.datetime):
        return value if value.tzinfo else value.replace(tzinfo=dt.UTC)
    if isinstance(value, str) and value:
        try:
            parsed = dt.datetime.fromisoformat(value)
        except ValueError:
            return None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)
    return None


def format_time(value: Any) -> str:
    """UTC, to the second, the same way on every page ('—' when unknown; the text itself if unparseable)."""
    moment = _as_datetime(value)
    if moment is None:
        return str(value) if value else "—"
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def format_age(value: Any, now: dt.datetime | None = None) -> str:
    """How long ago, in the largest whole unit: '40s', '12m', '5h', '3d'."""
    moment = _as_datetime(value)
    if moment is None:
        return "—"
    seconds = max(0, int(((now or dt.datetime.now(dt.UTC)) - moment).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def format_number(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return "—" if value is None else str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


TEMPLATES.env.filters.update(time=format_time, age=format_age, num=format_number)


# -- who is signed in ---------------------------------------------------------------


class LoginRequired(Exception):
    """Raised by page dependencies when nobody is signed in: the page redirects to /login."""


def page_user(role: Role) -> Callable[[Request], Principal]:
    """Like api.auth.require(role) (session cookie or Bearer token), but a page sends a stranger to /login."""
    check = require(role)

    def dependency(request: Request) -> Principal:
        try:
            return check(request)
        except Unauthenticated as error:
            raise LoginRequired from error

    dependency.required_role = role  # type: ignore[attr-defined]  # read by the route-walk test
    return dependency


def can(request: Request, role: Role) -> bool:
    principal: Principal | None = getattr(request.state, "principal", None)
    return principal is not None and not principal.is_host and principal.role.rank >= role.rank


# -- rendering ----------------------------------------------------------------------


def flash(request: Request, message: str, kind: str = "ok") -> None:
    """A message shown once on the next page (after a POST redirects)."""
    messages = list(request.session.get("flash", []))[-4:]
    request.session["flash"] = [*messages, {"kind": kind, "text": message[:500]}]


def render(
    request: Request, template: str, context: dict[str, Any] | None = None, *, status_code: int = 200
) -> Response:
    principal: Principal | None = getattr(request.state, "principal", None)
    messages = request.session.pop("flash", []) if "flash" in request.session else []
    base = {
        "principal": principal,
        "csrf_token": session_token(request.session),
        "messages": messages,
        "is_operator": can(request, Role.operator),
        "is_technician": can(request, Role.technician),
        "my_datacenters": principal.datacenters if principal is not None else None,  # None: not scoped
        "now": dt.datetime.now(dt.UTC),
    }
    response = TEMPLATES.TemplateResponse(request, template, {**base, **(context or {})}, status_code=status_code)
    return secure(response)


def secure(response: Response) -> Response:
    response.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "same-origin"
    response.headers.setdefault("Cache-Control", "no-store")
    return response


def is_htmx(request: Request) -> bool:
    return request.headers.get("hx-request") == "true"


def redirect(request: Request, url: str) -> Response:
    """After a POST: see the result with a GET (HTMX follows HX-Redirect instead of swapping)."""
    if is_htmx(request):
        return Response(status_code=204, headers={"HX-Redirect": url})
    return RedirectResponse(url, status_code=303)


def local_path(value: str | None, default: str = "/") -> str:
    """Only a path on this site: an absolute or scheme-relative URL would make the login an open redirect,
    and a control character or backslash has no place in a path echoed into Location or HX-Redirect."""
    if (
        value
        and value.startswith("/")
        and not value.startswith("//")
        and "\\" not in value
        and all(" " <= ch != "\x7f" for ch in value)
    ):
        return value
    return default


# -- versions: two people cannot overwrite each other ------------------------------------


def check_version(kind: str, object_id: object, current: int, sent: int | None, *, what: str = "") -> None:
    """Refuse a form made from an older version of the object (PreconditionFailed → shown as a message)."""
    if sent is None:
        raise PreconditionRequired(f"the form for {kind} {object_id} carried no version; reload the page")
    if sent != current:
        change = f" ({what})" if what else ""
        raise PreconditionFailed(
            f"{kind.capitalize()} {object_id} was changed by someone else since you opened this page{change}. "
            "Nothing was saved: check the page as it is now and try again.",
            detail={"current": etag(kind, object_id, current), "sent": etag(kind, object_id, sent)},
        )


# -- errors as pages ----------------------------------------------------------------------

ERROR_TITLES = {
    400: "Bad request",
    403: "Not allowed",
    404: "Not found",
    409: "Not possible now",
    412: "Changed meanwhile",
    422: "Check the form",
    428: "Reload needed",
}


def error_page(request: Request, status_code: int, message: str) -> Response:
    title = ERROR_TITLES.get(status_code, "Error")
    if is_htmx(request):
        # A fragment into the page's message area, wherever the request meant to swap.
        response = render(request, "_message.html", {"kind": "error", "text": message}, status_code=status_code)
        response.headers.update({"HX-Retarget": "#messages", "HX-Reswap": "innerHTML"})
        return response
    return render(request, "error.html", {"title": title, "message": message}, status_code=status_code)


class PageRoute(APIRoute):
    """A page's failures are pages: a stranger goes to /login, an error is shown with its message."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def page_handler(request: Request) -> Response:
            try:
                return await handler(request)
            except LoginRequired:
                target = f"/login?next={quote(local_path(request.url.path + _query(request)), safe='/')}"
                if is_htmx(request):
                    return Response(status_code=204, headers={"HX-Redirect": target})
                return RedirectResponse(target, status_code=303)
            except FleetfixError as error:
                return error_page(request, error.status_code, error.message)
            except StaleDataError:
                return error_page(request, 412, "Someone changed this at the same moment. Nothing was saved: reload.")
            except (RequestValidationError, ValidationError) as error:
                return error_page(request, 422, describe_errors(error))

        return page_handler


def _query(request: Request) -> str:
    return f"?{request.url.query}" if request.url.query else ""


def describe_errors(error: RequestValidationError | ValidationError) -> str:
    parts = []
    for item in error.errors()[:5]:
        where = ".".join(str(p) for p in item["loc"] if p not in ("body", "query", "path"))
        parts.append(f"{where}: {item['msg']}" if where else str(item["msg"]))
    return "; ".join(parts)
