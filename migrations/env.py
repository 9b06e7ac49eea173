"""Alembic environment: every stage's models on one metadata, both dialects."""

from __future__ import annotations

import re

from alembic import context
from sqlalchemy import Connection

import core.models
import remediator.models
import ticketing.models
import ticketing.notify.models
from core.db import Base, make_engine

# Importing every stage's models registers their tables on Base.metadata (named here so that no
# linter takes the imports for unused ones and drops a stage's tables from `alembic check`).
MODEL_MODULES = (core.models, remediator.models, ticketing.models, ticketing.notify.models)

config = context.config
target_metadata = Base.metadata

# The reports table's partitions (reports_YYYYMMDD, reports_default) are made and
# dropped by remediator.retention as days pass; they are not part of the models.
_PARTITION = re.compile(r"^reports_(\d{8}|default)$")


def _include_name(name: str | None, type_: str, _parent: object) -> bool:
    return not (type_ == "table" and name is not None and _PARTITION.match(name))


def _url() -> str:
    url = config.attributes.get("database_url") or config.get_main_option("sqlalchemy.url")
    if not url:
        from api.settings import load_central_settings  # a bare `alembic` run: the central processes' settings

        url = load_central_settings().effective_database_url
    return str(url)


def run_migrations_offline() -> None:
    url = _url()
    context.configure(
        url=url,
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=url.startswith("sqlite"),
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = make_engine(_url())
    with engine.connect() as conn:
        _run(conn)
    engine.dispose()


def _run(connection: Connection) -> None:
    is_sqlite = connection.dialect.name == "sqlite"
    if is_sqlite:
        # Batch mode rebuilds a table by copy-and-drop; with foreign keys on,
        # dropping `hosts` would cascade-delete every row that refers to it.
        # The pragma only takes effect outside a transaction, so it goes to
        # the driver connection directly.
        raw = connection.connection.driver_connection
        raw.execute("PRAGMA foreign_keys=OFF")
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=is_sqlite,
        compare_type=True,
        include_name=_include_name,
    )
    with context.begin_transaction():
        context.run_migrations()
        if is_sqlite:
            broken = connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
            if broken:
                raise RuntimeError(f"migration left rows with dangling foreign keys: {broken[:5]}")
    if is_sqlite:
        raw.execute("PRAGMA foreign_keys=ON")


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
