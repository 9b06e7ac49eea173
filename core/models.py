"""Tables every stage shares: the audit log, people and API tokens."""

from __future__ import annotations

import datetime as dt
import enum
from typing import Any

from sqlalchemy import Enum, ForeignKey, Index, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from core.db import Base, utcnow


class Role(enum.StrEnum):
    """Ordered from least to most power; a role includes those before it."""

    viewer = "viewer"
    technician = "technician"
    operator = "operator"
    admin = "admin"

    @property
    def rank(self) -> int:
        return list(Role).index(self)


def enum_column(enum_cls: type[enum.Enum], name: str) -> Enum:
    """A portable enum column: a VARCHAR with a CHECK constraint on both dialects."""
    return Enum(
        enum_cls,
        name=name,
        native_enum=False,
        create_constraint=True,
        length=32,
        values_callable=lambda members: [m.value for m in members],
    )


class User(Base):
    __tablename__ = "users"

    id: Mapped[int] = mapped_column(primary_key=True)
    username: Mapped[str] = mapped_column(String(64), unique=True)
    display_name: Mapped[str] = mapped_column(String(128), default="")
    role: Mapped[Role] = mapped_column(enum_column(Role, "role"))
    datacenter: Mapped[str | None] = mapped_column(
        String(64), default=None, doc="Default queue filter for technicians."
    )
    password_hash: Mapped[str] = mapped_column(String(256))
    active: Mapped[bool] = mapped_column(default=True)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class ApiToken(Base):
    """A bearer token: only its hash is stored; `prefix` lets people tell tokens apart."""

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(128))
    prefix: Mapped[str] = mapped_column(String(16))
    token_hash: Mapped[str] = mapped_column(String(128), unique=True)
    user_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), default=None)
    hostname: Mapped[str | None] = mapped_column(
        String(253), default=None, doc="Set for a host's own credential: it may only report for itself."
    )
    role: Mapped[Role] = mapped_column(enum_column(Role, "role"))
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    last_used_at: Mapped[dt.datetime | None] = mapped_column(default=None)
    revoked_at: Mapped[dt.datetime | None] = mapped_column(default=None)


class WebSession(Base):
    """A signed-in browser. The session cookie carries only this row's id: signing out, a new
    password or a disabled account ends it on the server, whatever copy of the cookie exists."""

    __tablename__ = "web_sessions"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[dt.datetime] = mapped_column()
    revoked_at: Mapped[dt.datetime | None] = mapped_column(default=None)


class AuditEntry(Base):
    """Who changed what, when and why. Append-only."""

    __tablename__ = "audit_log"
    __table_args__ = (Index("ix_audit_log_object", "object_type", "object_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    at: Mapped[dt.datetime] = mapped_column(default=utcnow, index=True)
    actor: Mapped[str] = mapped_column(String(128), doc="user:<name>, host:<name>, system:<component>.")
    action: Mapped[str] = mapped_column(String(64), doc="stage.object.event, e.g. ticketing.ticket.claimed.")
    object_type: Mapped[str] = mapped_column(String(64))
    object_id: Mapped[str] = mapped_column(String(64))
    reason: Mapped[str] = mapped_column(Text, default="")
    detail: Mapped[dict[str, Any]] = mapped_column(default=dict)
