"""`fleetfix up` only: people to sign in as, a technician per datacenter and an operator.

Like the admin (api.bootstrap), each is created once, with a generated password
printed once on the console and kept in DATA_DIR/demo-accounts (mode 0600).
Production creates no account by itself (`fleetfix users create`).
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import select

from api.bootstrap import ACTOR, write_secret
from core import accounts
from core.db import Database
from core.models import Role, User
from core.settings import Settings
from remediator.models import Host

OPERATOR_USERNAME = "operator"


def accounts_file(settings: Settings) -> Path:
    return settings.data_dir / "demo-accounts"


def technician_name(datacenter: str) -> str:
    return "tech-" + (re.sub(r"[^a-z0-9._-]+", "-", datacenter.lower()).strip("-") or "dc")[:58]


def demo_accounts(database: Database, settings: Settings, echo: Callable[[str], None] = print) -> list[str]:
    """Create the accounts that do not exist yet; returns their user names."""
    wanted: list[tuple[str, Role, str | None]] = [(OPERATOR_USERNAME, Role.operator, None)]
    with database.session() as session:
        datacenters = session.scalars(select(Host.datacenter).distinct().order_by(Host.datacenter)).all()
        wanted += [(technician_name(dc), Role.technician, dc) for dc in datacenters if dc]
        existing = set(session.scalars(select(User.username)))
        created: list[tuple[str, str, Role, str | None]] = []
        for username, role, datacenter in wanted:
            if username in existing:
                continue
            password = secrets.token_urlsafe(12)
            accounts.create_user(
                session,
                username=username,
                role=role,
                password=password,
                datacenter=datacenter,
                display_name=f"Demo {role.value}" + (f" in {datacenter}" if datacenter else ""),
                actor=ACTOR,
                reason="fleetfix up: demo account",
            )
            created.append((username, password, role, datacenter))
    if created:
        path = accounts_file(settings)
        kept = path.read_text().splitlines() if path.is_file() else []
        lines = [f"{name} {password} {role.value} {dc or '-'}" for name, password, role, dc in created]
        write_secret(path, "\n".join([*kept, *lines]))
        for line in lines:
            echo(f"fleetfix: demo account {line} (user password role datacenter; kept in {path}, mode 0600)")
    return [name for name, *_ in created]
