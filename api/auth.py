"""Who may call what: every route declares the least role it needs.

    principal: Principal = Depends(require(Role.technician))

A request authenticates with `Authorization: Bearer <token>` (people's tools,
hosts) or with the web UI's session cookie. No credentials: 401. Too little
role: 403. A host's credential passes only routes declared with
`hosts=True` (report submission), and there only for itself.
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import Depends, Request
from fastapi.security import HTTPBearer
from sqlalchemy.orm import Session

from core.auth import Principal, principal_for_token, principal_for_user, user_for_web_session
from core.errors import FleetfixError
from core.models import Role

BEARER = HTTPBearer(
    auto_error=False,  # `authenticate` decides, so a missing token is our 401 body, not FastAPI's 403
    description="An API token: `fleetfix tokens issue` or POST /api/v1/tokens (docs/api.md).",
)
"""Declares the scheme in the OpenAPI description, so /docs can send a token."""


class Unauthenticated(FleetfixError):
    status_code = 401
    code = "unauthenticated"


class Forbidden(FleetfixError):
    status_code = 403
    code = "forbidden"


def authenticate(request: Request, session: Session, *, touch: bool = True) -> Principal | None:
    header = request.headers.get("authorization", "")
    scheme, _, raw = header.partition(" ")
    if scheme.lower() == "bearer" and raw.strip():
        return principal_for_token(session, raw.strip(), touch=touch)
    web_session = request.scope.get("session")
    if web_session and isinstance(web_session.get("sid"), str):
        user = user_for_web_session(session, web_session["sid"])
        if user is not None:
            return principal_for_user(user)
    return None


def require(role: Role, *, hosts: bool = False) -> Callable[[Request], Principal]:
    """A dependency that admits principals of at least `role` (and hosts, if `hosts`)."""

    def dependency(request: Request, _: object = Depends(BEARER)) -> Principal:
        principal: Principal | None = getattr(request.state, "authenticated", None)  # api/limits.py's
        if principal is None:
            database = request.app.state.database
            with database.sessionmaker() as session:
                principal = authenticate(request, session)
                session.commit()  # last_used_at
        if principal is None:
            raise Unauthenticated("credentials required: send Authorization: Bearer <token>, or log in")
        if principal.is_host:
            if not hosts:
                raise Forbidden(f"{principal.name} is a host credential; it may only submit its own reports")
        elif principal.role.rank < role.rank:
            raise Forbidden(f"{principal.name} has role {principal.role.value}; this needs {role.value}")
        request.state.principal = principal
        return principal

    dependency.required_role = role  # type: ignore[attr-defined]  # read by the route-walk test
    dependency.admits_hosts = hosts  # type: ignore[attr-defined]
    return dependency
