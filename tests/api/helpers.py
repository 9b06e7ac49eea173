"""The API's JSON routes as the application serves them, and the role each one requires: read off the app
by the route-role tests and by the check of docs/api.md's table."""

from __future__ import annotations

from typing import Any

from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute, RouteContext, iter_route_contexts

from api.app import create_app
from tests.builders.runtime import unconnected


def requirement(dependant: Dependant) -> list[Any]:
    """Every `require(...)` dependency of a route, however deep."""
    found = []
    for sub in dependant.dependencies:
        if hasattr(sub.call, "required_role"):
            found.append(sub.call)
        found.extend(requirement(sub))
    return found


def api_routes() -> list[RouteContext]:
    """Every JSON route as served (prefixes and router-level dependencies applied)."""
    app = create_app(unconnected())
    return [r for r in iter_route_contexts(app.routes) if isinstance(r.original_route, APIRoute)]
