"""Credentials for API tests: a token per role (or a host's own), issued in the test's transaction."""

from __future__ import annotations

from core.auth import issue_token
from core.db import Database
from core.models import Role


def bearer(db: Database, role: Role = Role.operator, *, hostname: str | None = None) -> dict[str, str]:
    """An Authorization header for a new tool token of `role`, or for `hostname`'s own credential."""
    name = f"host-{hostname}" if hostname else f"test-{role.value}"
    with db.session() as session:
        _, raw = issue_token(session, name=name, role=role, hostname=hostname)
    return {"Authorization": f"Bearer {raw}"}
