"""People and tokens: what `fleetfix users|tokens` and the admin API do, each change audited.

Checking a credential (a token, a password, a web session) is core.auth's; this module creates,
changes and revokes them.
"""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from core import audit
from core.auth import end_web_sessions, hash_password, issue_token
from core.db import utcnow
from core.errors import Conflict, InvalidInput, NotFound
from core.models import ApiToken, Role, User
from core.vocabulary import MIN_PASSWORD_LENGTH, is_hostname

USERNAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")


def _check_username(username: str) -> None:
    if not USERNAME_PATTERN.match(username):
        raise InvalidInput(
            f"username {username!r}: use 1-64 lower-case letters, digits, '.', '_' or '-', starting with a letter "
            "or digit",
            detail=[{"field": "username", "message": "invalid"}],
        )


def _check_password(password: str, field: str = "password") -> None:
    if len(password) < MIN_PASSWORD_LENGTH:
        raise InvalidInput(
            f"{field}: at least {MIN_PASSWORD_LENGTH} characters",
            detail=[{"field": field, "message": f"shorter than {MIN_PASSWORD_LENGTH} characters"}],
        )


def get_user(session: Session, username: str) -> User:
    user = session.scalars(select(User).where(User.username == username)).one_or_none()
    if user is None:
        raise NotFound(f"user {username!r} does not exist")
    return user


def list_users(session: Session) -> list[User]:
    return list(session.scalars(select(User).order_by(User.username)))


def create_user(
    session: Session,
    *,
    username: str,
    role: Role,
    password: str,
    actor: str,
    reason: str,
    display_name: str = "",
    datacenter: str | None = None,
) -> User:
    _check_username(username)
    _check_password(password)
    if session.scalars(select(User.id).where(User.username == username)).first() is not None:
        raise Conflict(f"user {username!r} already exists")
    user = User(
        username=username,
        display_name=display_name,
        role=role,
        datacenter=datacenter or None,
        password_hash=hash_password(password),
        active=True,
    )
    session.add(user)
    session.flush()
    audit.record(
        session,
        actor=actor,
        action="core.user.created",
        object_type="user",
        object_id=username,
        reason=reason,
        detail={"role": role.value, "datacenter": user.datacenter},
    )
    return user


def update_user(
    session: Session,
    username: str,
    *,
    actor: str,
    reason: str,
    role: Role | None = None,
    active: bool | None = None,
    display_name: str | None = None,
    datacenter: str | None = None,
) -> User:
    """Change a user's role, activity, name or datacenter; a disabled user's tokens stop working."""
    user = get_user(session, username)
    was_admin = user.active and user.role == Role.admin
    changes: dict[str, Any] = {}
    for field, value in (
        ("role", role),
        ("active", active),
        ("display_name", display_name),
        ("datacenter", datacenter),
    ):
        if value is not None and getattr(user, field) != value:
            before = getattr(user, field)
            changes[field] = {
                "from": before.value if isinstance(before, Role) else before,
                "to": value.value if isinstance(value, Role) else value,
            }
            setattr(user, field, value)
    if not changes:
        return user
    if was_admin and not (user.active and user.role == Role.admin):
        others = select(User.id).where(User.role == Role.admin, User.active.is_(True), User.id != user.id)
        if session.scalars(others).first() is None:
            raise Conflict(f"user {username!r} is the last active admin; make another admin first")
    action = "core.user.updated"
    if not user.active:
        end_web_sessions(session, user.id)
    if set(changes) == {"active"}:
        action = "core.user.enabled" if user.active else "core.user.disabled"
    audit.record(
        session, actor=actor, action=action, object_type="user", object_id=username, reason=reason, detail=changes
    )
    session.flush()
    return user


def set_password(session: Session, username: str, password: str, *, actor: str, reason: str) -> User:
    _check_password(password)
    user = get_user(session, username)
    user.password_hash = hash_password(password)
    end_web_sessions(session, user.id)  # whoever knew the old password is signed out
    audit.record(
        session, actor=actor, action="core.user.password_set", object_type="user", object_id=username, reason=reason
    )
    session.flush()
    return user


def create_token(
    session: Session,
    *,
    name: str,
    actor: str,
    reason: str,
    role: Role | None = None,
    username: str | None = None,
    hostname: str | None = None,
) -> tuple[ApiToken, str]:
    """Issue a token for a tool (a role), a user (at most the user's role) or a host (its own reports only)."""
    if not name.strip() or len(name) > 128:
        raise InvalidInput("name: 1-128 characters", detail=[{"field": "name", "message": "invalid"}])
    if hostname is not None:
        if role is not None or username is not None:
            raise InvalidInput(
                "a host's token has no role or user: it may only submit that host's own reports",
                detail=[{"field": "hostname", "message": "not with role or username"}],
            )
        if not is_hostname(hostname):
            raise InvalidInput(
                f"hostname {hostname!r} is not a host name", detail=[{"field": "hostname", "message": "invalid"}]
            )
    user = get_user(session, username) if username is not None else None
    if user is not None:
        if not user.active:
            raise Conflict(f"user {user.username!r} is disabled")
        role = role or user.role
        if role.rank > user.role.rank:
            raise InvalidInput(
                f"role {role.value}: user {user.username!r} has role {user.role.value}; a token cannot have more",
                detail=[{"field": "role", "message": "above the user's role"}],
            )
    if hostname is None and role is None:
        raise InvalidInput("a token needs a role, a user or a host", detail=[{"field": "role", "message": "missing"}])
    token, raw = issue_token(session, name=name, role=role or Role.viewer, user=user, hostname=hostname)
    audit.record(
        session,
        actor=actor,
        action="core.token.issued",
        object_type="token",
        object_id=token.id,
        reason=reason,
        detail={
            "name": name,
            "prefix": token.prefix,
            "role": None if hostname else token.role.value,
            "user": user.username if user else None,
            "hostname": hostname,
        },
    )
    return token, raw


def list_tokens(session: Session, *, include_revoked: bool = False) -> list[ApiToken]:
    query = select(ApiToken).order_by(ApiToken.id)
    if not include_revoked:
        query = query.where(ApiToken.revoked_at.is_(None))
    return list(session.scalars(query))


def revoke_token(session: Session, token_id: int, *, actor: str, reason: str) -> ApiToken:
    token = session.get(ApiToken, token_id)
    if token is None:
        raise NotFound(f"token {token_id} does not exist")
    if token.revoked_at is not None:
        raise Conflict(f"token {token_id} ({token.name}) was revoked at {token.revoked_at.isoformat()}")
    token.revoked_at = utcnow()
    audit.record(
        session,
        actor=actor,
        action="core.token.revoked",
        object_type="token",
        object_id=token.id,
        reason=reason,
        detail={"name": token.name, "prefix": token.prefix},
    )
    session.flush()
    return token


def token_owner(session: Session, token: ApiToken) -> str:
    """How listings name whom a token speaks for."""
    if token.hostname is not None:
        return f"host:{token.hostname}"
    if token.user_id is not None:
        user = session.get(User, token.user_id)
        return f"user:{user.username}" if user is not None else "user:?"
    return f"token:{token.name}"
