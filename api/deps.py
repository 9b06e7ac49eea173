"""Request-scoped dependencies: the process's runtime (api/runtime.py) and its parts, the database session
and settings; the type of a row id in a path."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Path, Request
from sqlalchemy.orm import Session

from api.runtime import CentralRuntime
from core.db import Database
from core.settings import Settings
from remediator.rules import RuleRegistry, RuleSet

MAX_ROW_ID = 2**63 - 1
"""Ids are 64-bit (PostgreSQL bigint, SQLite's integer): a larger one names no row and is refused, the
parameter named, before it reaches the database."""

RowId = Annotated[int, Path(ge=1, le=MAX_ROW_ID)]


def get_runtime(request: Request) -> CentralRuntime:
    runtime: CentralRuntime = request.app.state.runtime
    return runtime


def get_rules(request: Request) -> RuleRegistry:
    """The process's active rules (its remediator's registry)."""
    return get_runtime(request).remediator.rules


def get_ruleset(request: Request) -> RuleSet:
    """The active rules as they are now (a reload swaps the set, never edits it)."""
    return get_rules(request).ruleset


def get_db(request: Request) -> Database:
    database: Database = request.app.state.database
    return database


def get_settings_dep(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def get_session(request: Request) -> Iterator[Session]:
    """A session per request. The handler commits what it changes; anything
    left uncommitted is rolled back when the request ends."""
    database: Database = request.app.state.database
    with database.sessionmaker() as session:
        yield session
