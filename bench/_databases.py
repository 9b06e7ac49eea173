"""What several benches need of the machine's PostgreSQL: a database of their own, and host credentials."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import create_engine, insert, text

from core.auth import hash_token, new_token
from core.models import ApiToken

ADMIN = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def create_database(name: str) -> str:
    """An empty database `name` (dropped first if a killed run left it); returns its URL."""
    admin = create_engine(ADMIN, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return ADMIN.rsplit("/", 1)[0] + f"/{name}"


def drop_database(name: str) -> None:
    admin = create_engine(ADMIN, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def issue_host_tokens(url: str, hostnames: Iterable[str]) -> dict[str, str]:
    """A credential per host, as `fleetfix tokens issue NAME --host HOST` makes them, in one INSERT
    (issuing thousands one by one takes minutes); returns each host's raw token."""
    tokens = {name: new_token() for name in hostnames}
    rows = [
        {"name": f"{name} agent", "prefix": token[4:12], "token_hash": hash_token(token), "hostname": name}
        for name, token in tokens.items()
    ]
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(insert(ApiToken), [{**row, "role": "viewer"} for row in rows])
    engine.dispose()
    return tokens
