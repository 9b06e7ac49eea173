"""First start of the embedded mode: an admin account and an admin token, so people can sign in.

Only `fleetfix up` calls this. Production creates no credential by itself: an
operator runs `fleetfix users create` and `fleetfix tokens issue` (README).
A generated secret is printed once on the console and kept in a file in the
data directory that only the service's user may read.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import select

from core import accounts, auth
from core.db import Database
from core.models import Role, User
from core.settings import Settings

ADMIN_USERNAME = "admin"
ADMIN_TOKEN_NAME = "embedded-admin"  # noqa: S105  (a label, not a secret)
ACTOR = "system:bootstrap"


def password_file(settings: Settings) -> Path:
    return settings.data_dir / "admin-password"


def token_file(settings: Settings) -> Path:
    return settings.data_dir / "admin-token"


def write_secret(path: Path, value: str) -> None:
    """Write `value` readable by this user only (0600), also when the file was already there."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(value + "\n")
    path.chmod(0o600)


def bootstrap_admin(database: Database, settings: Settings, echo: Callable[[str], None] = print) -> None:
    """Create the admin (FLEETFIX_ADMIN_PASSWORD, else a generated password) and an admin token, once."""
    with database.session() as session:
        admins = select(User).where(User.role == Role.admin, User.active.is_(True)).order_by(User.id)
        admin = session.scalars(admins).first()
        if admin is None:
            password = settings.admin_password.get_secret_value()
            generated = not password
            if generated:
                password = secrets.token_urlsafe(18)
            admin = accounts.create_user(
                session,
                username=ADMIN_USERNAME,
                role=Role.admin,
                password=password,
                display_name="Administrator",
                actor=ACTOR,
                reason="first start of fleetfix up: the database had no admin",
            )
            if generated:
                write_secret(password_file(settings), password)
                echo(
                    f"fleetfix: created user {ADMIN_USERNAME} with password {password} "
                    f"(shown once; kept in {password_file(settings)}, mode 0600)"
                )
            else:
                echo(f"fleetfix: created user {ADMIN_USERNAME} with the password in FLEETFIX_ADMIN_PASSWORD")
        stored = token_file(settings)
        current = stored.read_text().strip() if stored.is_file() else ""
        principal = auth.principal_for_token(session, current, touch=False) if current else None
        if principal is None or principal.role != Role.admin:
            _, raw = accounts.create_token(
                session,
                name=ADMIN_TOKEN_NAME,
                username=admin.username,
                actor=ACTOR,
                reason="first start of fleetfix up: an admin token for the API",
            )
            write_secret(stored, raw)
            echo(f"fleetfix: admin API token {raw} (shown once; kept in {stored}, mode 0600)")
