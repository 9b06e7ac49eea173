"""Request-scoped dependencies: the database session and settings."""

from __future__ import annotations

from collections.abc import Iterator

from fastapi import Request
from sqlalchemy.orm import Session

from core.db import Database
from core.settings import Settings


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
