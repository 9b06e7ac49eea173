"""The FastAPI application: JSON API under /api/v1, pages at /, health at /healthz."""

from __future__ import annotations

from fastapi import APIRouter, FastAPI

from api import lanes, limits
from api.errors import install_error_handlers
from api.routes import audit, controls, health, hosts, remediations, reports, rollouts, rules, tickets, users
from api.runtime import CentralRuntime
from api.web import pages

API_VERSION = "v1"


def create_app(runtime: CentralRuntime) -> FastAPI:
    """The app of one central runtime (api/runtime.py); routes reach it through `request.app.state`."""
    settings = runtime.settings
    app = FastAPI(
        title="fleetfix",
        version="0.1.0",
        description="Fleet auto-remediation: hosts, reports, remediations and repair tickets.",
    )
    app.state.runtime = runtime
    app.state.settings = settings
    app.state.database = runtime.database
    app.state.celery = runtime.celery
    install_error_handlers(app)
    v1 = APIRouter(prefix=f"/api/{API_VERSION}")
    for module in (hosts, tickets, remediations, reports, rules, controls, rollouts):
        v1.include_router(module.router)
    v1.include_router(remediations.decisions_router)
    v1.include_router(tickets.repairs_router)
    for router in (audit.router, users.users_router, users.tokens_router, users.me_router):
        v1.include_router(router)
    app.include_router(v1)
    app.include_router(health.router)
    limits.install(app, settings)  # inside the session middleware pages.install adds: it sees the web session
    pages.install(app, settings)  # pages, static files, session cookie, CSRF (api/web, docs/ui.md)
    lanes.install(app, settings)  # outermost: a request waits for its lane before anything is done for it
    return app
