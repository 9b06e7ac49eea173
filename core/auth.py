"""Credentials: API tokens (people, tools and hosts) and user passwords.

A token is shown once, when it is issued; only its SHA-256 is stored. Tokens
carry 256 bits of randomness, so a fast hash is enough to make a stolen table
useless (the way GitHub and PyPI store theirs); passwords are chosen by people
and are hashed with Argon2id instead.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from core.db import utcnow
from core.models import ApiToken, Role, User

TOKEN_PREFIX = "ffx_"  # noqa: S105  (a marker that tells tokens apart from other strings, not a secret)
_hasher = PasswordHasher()


def hash_token(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_password(password: str) -> str:
    return _hasher.hash(password)


def verify_password(password_hash: str, password: str) -> bool:
    try:
        return _hasher.verify(password_hash, password)
    except (VerificationError, InvalidHashError):
        return False


@dataclass(frozen=True)
class Principal:
    """Who is asking: a user, a tool's token, or a host's own credential."""

    name: str
    role: Role
    hostname: str | None = None
    user_id: int | None = None
    token_id: int | None = None

    @property
    def is_host(self) -> bool:
        return self.hostname is not None

    @property
    def actor(self) -> str:
        """How the audit log names this principal: user:<name>, host:<name> or token:<name>."""
        return self.name


def issue_token(
    session: Session,
    *,
    name: str,
    role: Role,
    user: User | None = None,
    hostname: str | None = None,
) -> tuple[ApiToken, str]:
    """Store a new token and return it with its raw value (the only time that value exists)."""
    raw = new_token()
    token = ApiToken(
        name=name,
        prefix=raw[len(TOKEN_PREFIX) : len(TOKEN_PREFIX) + 8],
        token_hash=hash_token(raw),
        user_id=user.id if user is not None else None,
        hostname=hostname,
        role=Role.viewer if hostname is not None else role,
    )
    session.add(token)
    session.flush()
    return token, raw


def principal_for_token(session: Session, raw: str, *, touch: bool = True) -> Principal | None:
    """The principal a raw token stands for, or None if it is unknown, revoked or its user is inactive."""
    if not raw.startswith(TOKEN_PREFIX):
        return None
    token = session.scalars(select(ApiToken).where(ApiToken.token_hash == hash_token(raw))).one_or_none()
    if token is None or token.revoked_at is not None:
        return None
    user = session.get(User, token.user_id) if token.user_id is not None else None
    if user is not None and not user.active:
        return None
    if touch:
        token.last_used_at = utcnow()
    if token.hostname is not None:
        return Principal(name=f"host:{token.hostname}", role=Role.viewer, hostname=token.hostname, token_id=token.id)
    if user is not None:
        return Principal(name=f"user:{user.username}", role=token.role, user_id=user.id, token_id=token.id)
    return Principal(name=f"token:{token.name}", role=token.role, token_id=token.id)


def principal_for_user(user: User) -> Principal:
    return Principal(name=f"user:{user.username}", role=user.role, user_id=user.id)


def authenticate_user(session: Session, username: str, password: str) -> User | None:
    user = session.scalars(select(User).where(User.username == username)).one_or_none()
    if user is None or not user.active:
        # Spend the same time as a real check, so a response's timing does not tell which names exist.
        verify_password(_DUMMY_HASH, password)
        return None
    return user if verify_password(user.password_hash, password) else None


_DUMMY_HASH = _hasher.hash(secrets.token_hex(8))
