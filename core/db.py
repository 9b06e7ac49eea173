"""Database base, portable column types and engine set-up.

Dialect differences live here and nowhere else: timezone-aware UTC timestamps,
JSON that is JSONB on PostgreSQL, one constraint naming convention, and the
SQLite pragmas and transaction handling that make SAVEPOINTs and concurrent
readers work on the embedded database.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import orjson
from sqlalchemy import JSON, Connection, DateTime, Engine, MetaData, create_engine, event, text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Session, sessionmaker
from sqlalchemy.types import TypeDecorator

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UTCDateTime(TypeDecorator[dt.datetime]):
    """A timestamp stored in UTC and always returned timezone-aware.

    SQLite has no time zones and hands back naive values; PostgreSQL stores
    timestamptz. Naive input is refused rather than guessed at.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect: Dialect) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: fleetfix stores timezone-aware UTC only")
        value = value.astimezone(dt.UTC)
        if dialect.name == "sqlite":
            return value.replace(tzinfo=None)
        return value

    def process_result_value(self, value: dt.datetime | None, dialect: Dialect) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=dt.UTC)
        return value.astimezone(dt.UTC)


JSONDoc = JSON().with_variant(JSONB(), "postgresql")
"""A JSON document column: JSONB on PostgreSQL, JSON text on SQLite."""


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {dt.datetime: UTCDateTime(), dict[str, Any]: JSONDoc, list[Any]: JSONDoc}


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _sqlite_setup(engine: Engine) -> None:
    # pysqlite's own transaction handling defers BEGIN and breaks SAVEPOINT;
    # the SQLAlchemy recipe: turn it off and emit BEGIN ourselves.
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        # IMMEDIATE takes the write lock up front, so two writers queue on
        # busy_timeout instead of deadlocking on a lock upgrade.
        connection.exec_driver_sql("BEGIN IMMEDIATE")


def _json_dumps(value: Any) -> str:
    # orjson: several times faster than json.dumps on report-sized documents (ingest's hot path)
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()


def make_engine(url: str, *, pool_size: int = 5, echo: bool = False) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(
            url,
            echo=echo,
            connect_args={"check_same_thread": False, "timeout": 30},
            json_serializer=_json_dumps,
            json_deserializer=orjson.loads,
        )
        _sqlite_setup(engine)
        return engine
    return create_engine(
        url,
        echo=echo,
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_pre_ping=True,
        json_serializer=_json_dumps,
        json_deserializer=orjson.loads,
    )


ServiceT = TypeVar("ServiceT")

SERVICES_KEY = "fleetfix.services"
"""The key of `Session.info` under which a session carries its Database's services."""


class Database:
    """An engine, its session factory, and the services its sessions carry.

    A process's root (api/runtime.py) builds one Database and `provide`s the services that code deep in a
    unit of work needs but is not handed (the audit log's listeners, ticketing's lifecycle reactions and
    alert look-ups, the remediator with cyborg's executor and its settings): every session the Database
    opens carries them in its `info`, and `service_of(session, kind)` finds them. Two Databases (two
    runtimes in one process) share nothing."""

    def __init__(self, url: str, *, pool_size: int = 5) -> None:
        self.url = url
        self.engine = make_engine(url, pool_size=pool_size)
        self.services: dict[type[Any], Any] = {}
        self.sessionmaker = sessionmaker(self.engine, expire_on_commit=False, info={SERVICES_KEY: self.services})

    def provide(self, kind: type[ServiceT], service: ServiceT) -> None:
        """Hand `service` to every session of this database, found by `kind` (the root does, at start-up)."""
        self.services[kind] = service

    @classmethod
    def bound_to(cls, engine: Engine, connection: Connection) -> Database:
        """Sessions that join an open transaction on `connection` through SAVEPOINTs,
        so code that commits can still be rolled back as a whole (tests)."""
        database = cls.__new__(cls)
        database.url = str(engine.url)
        database.engine = engine
        database.services = {}
        database.sessionmaker = sessionmaker(
            bind=connection,
            expire_on_commit=False,
            join_transaction_mode="create_savepoint",
            info={SERVICES_KEY: database.services},
        )
        return database

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A unit of work: commits on success, rolls back on error."""
        with self.sessionmaker() as session, session.begin():
            yield session

    def dispose(self) -> None:
        self.engine.dispose()


def service_of(session: Session, kind: type[ServiceT]) -> ServiceT | None:
    """The service of `kind` the session's Database carries, or None (a session of a Database its root gave
    none, or one made without a Database)."""
    services = session.info.get(SERVICES_KEY)
    if services is None:
        return None
    found: ServiceT | None = services.get(kind)
    return found


def insert_ignoring_conflicts(session: Session, table: Any, rows: list[dict[str, Any]], *, keys: list[str]) -> None:
    """INSERT rows, skipping those that collide on `keys` (ON CONFLICT DO NOTHING on both dialects)."""
    if not rows:
        return
    from sqlalchemy.dialects import postgresql, sqlite

    statement: postgresql.Insert | sqlite.Insert
    if session.get_bind().dialect.name == "postgresql":
        statement = postgresql.insert(table).on_conflict_do_nothing(index_elements=keys)
    else:
        statement = sqlite.insert(table).on_conflict_do_nothing(index_elements=keys)
    session.execute(statement, rows)


def serialize_on(session: Session, name: str) -> None:
    """Hold a transaction-scoped lock named `name` until commit or rollback.

    PostgreSQL: an advisory lock, so concurrent workers take turns at a
    count-then-insert decision instead of racing. SQLite needs none: its
    writers already take turns (BEGIN IMMEDIATE).
    """
    if session.get_bind().dialect.name == "postgresql":
        key = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)
        session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": key})
