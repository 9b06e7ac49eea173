"""The web UI: server-rendered pages (Jinja2 + HTMX, every asset vendored in static/), see docs/ui.md.

`install()` puts the pages, their static files, the session cookie and CSRF
protection on the application.
"""

from __future__ import annotations

from fastapi import APIRouter, FastAPI
from fastapi.staticfiles import StaticFiles
from starlette.middleware.sessions import SessionMiddleware

from api.web import fleet, hosts, login, operators, remediation_pages, rollouts, ticket_actions, tickets
from api.web.common import SESSION_MAX_AGE_S, STATIC_DIR, TEMPLATES
from api.web.csrf import CSRFMiddleware
from core.settings import Settings

__all__ = ["SESSION_COOKIE", "SESSION_MAX_AGE_S", "STATIC_DIR", "TEMPLATES", "install", "router"]

SESSION_COOKIE = "fleetfix_session"
"""A shift: a technician signs in once per shift; a cart left in the aisle does not stay signed in for days."""

router = APIRouter(include_in_schema=False)
for module in (login, fleet, hosts, tickets, ticket_actions, operators, remediation_pages, rollouts):
    router.include_router(module.router)


def install(app: FastAPI, settings: Settings) -> None:
    app.include_router(router)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    # Added last runs first: the session must be loaded before the CSRF check reads its token.
    app.add_middleware(CSRFMiddleware)
    app.add_middleware(
        SessionMiddleware,
        secret_key=settings.secret_key,
        session_cookie=SESSION_COOKIE,
        max_age=SESSION_MAX_AGE_S,
        same_site="lax",
        # Secure: never sent over plain http in production (`fleetfix api` requires an https PUBLIC_URL there)
        https_only=settings.environment == "production" or settings.effective_public_url.startswith("https://"),
    )
