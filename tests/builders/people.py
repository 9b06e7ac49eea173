"""People and tools with credentials: a user who can sign in, an API token of a role (or a host's own)."""

from __future__ import annotations

import secrets

from core import accounts
from core.auth import issue_token
from core.db import Database
from core.models import Role


def make_user(db: Database, username: str, role: Role, *, datacenter: str | None = None) -> str:
    """A person who can sign in; returns their password."""
    password = secrets.token_urlsafe(16)
    with db.session() as session:
        accounts.create_user(
            session, username=username, role=role, password=password, datacenter=datacenter, actor="test", reason="test"
        )
    return password


def bearer(db: Database, role: Role = Role.operator, *, hostname: str | None = None) -> dict[str, str]:
    """An Authorization header for a new tool token of `role`, or for `hostname`'s own credential."""
    name = f"host-{hostname}" if hostname else f"test-{role.value}"
    with db.session() as session:
        _, raw = issue_token(session, name=name, role=role, hostname=hostname)
    return {"Authorization": f"Bearer {raw}"}
