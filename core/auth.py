"""Credentials: API tokens (people, tools and hosts) and user passwords.

A token is shown once, when it is issued; only its SHA-256 is stored. Tokens
carry 256 bits of randomness, so a fast hash is enough to make a stolen table
useless (the way GitHub and PyPI store theirs); passwords are chosen by people
and are hashed with Argon2id instead.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import datetime as dt
import math
import os
import re
import secrets
import threading
from dataclasses import dataclass
from typing import Any

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from core import audit
from core.db import utcnow
from core.errors import Conflict, FleetfixError, InvalidInput, NotFound
from core.models import ApiToken, AuditEntry, Role, User, WebSession
from core.signing import report_key

LAST_USED_RESOLUTION = dt.timedelta(minutes=1)
TOKEN_PREFIX = "ffx_"  # noqa: S105  (a marker that tells tokens apart from other strings, not a secret)
_hasher = PasswordHasher()


def hash_token(raw: str) -> str:
    """SHA-256, hex: what is stored, and (as bytes) a host's report-signing key (core.signing)."""
    return report_key(raw).hex()


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_password(password: str) -> str:
    return _hasher.hash(password)


# Argon2 is meant to cost: at most this many checks run at once, so a burst of sign-ins queues
# among itself (in the server's threads, never on its event loop) instead of taking every core; a
# check that cannot start within PASSWORD_WAIT_S is refused (PasswordChecksBusy), so a flood of
# sign-ins holds neither threads nor time without bound.
PASSWORD_CHECKS = threading.BoundedSemaphore(2)
PASSWORD_WAIT_S = 2.0
PASSWORD_CHECK_NICE = 10
"""The checks run on threads of their own this much nicer than the server (Linux keeps one per thread, and the
hash's own threads inherit it), so on a busy machine sign-ins wait for the CPU and report intake
does not: a flood of sign-ins cannot starve the API (the load bench, docs/reliability.md)."""


def _lower_priority() -> None:
    # not Linux, or not allowed: the checks run at normal priority
    with contextlib.suppress(OSError, AttributeError):
        me = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, me, min(19, os.getpriority(os.PRIO_PROCESS, me) + PASSWORD_CHECK_NICE))


_checkers = concurrent.futures.ThreadPoolExecutor(
    max_workers=2, thread_name_prefix="password-check", initializer=_lower_priority
)


class PasswordChecksBusy(Exception):
    """Too many password checks are waiting: the caller answers 429 with a short Retry-After."""


def _verify(password_hash: str, password: str) -> bool:
    try:
        return _hasher.verify(password_hash, password)
    except (VerificationError, InvalidHashError):
        return False


def verify_password(password_hash: str, password: str) -> bool:
    if not PASSWORD_CHECKS.acquire(timeout=PASSWORD_WAIT_S):
        raise PasswordChecksBusy
    try:
        # the semaphore admits at most as many checks as the pool has threads: none waits in it
        return _checkers.submit(_verify, password_hash, password).result()
    finally:
        PASSWORD_CHECKS.release()


@dataclass(frozen=True)
class Principal:
    """Who is asking: a user, a tool's token, or a host's own credential."""

    name: str
    role: Role
    hostname: str | None = None
    user_id: int | None = None
    token_id: int | None = None
    datacenters: tuple[str, ...] | None = None  # a technician's: the tickets it may change; None: any

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
    now = utcnow()
    if touch and (token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION):
        token.last_used_at = now  # not on every request: a fleet's agents would turn each report into two writes
    if token.hostname is not None:
        return Principal(name=f"host:{token.hostname}", role=Role.viewer, hostname=token.hostname, token_id=token.id)
    if user is not None:
        # The lower of the token's role and the user's current one: demoting a user demotes their tokens
        # on the next request (a token issued as operator acts as viewer once the user is a viewer).
        role = token.role if token.role.rank <= user.role.rank else user.role
        return Principal(
            name=f"user:{user.username}",
            role=role,
            user_id=user.id,
            token_id=token.id,
            datacenters=scope_of(user, role),
        )
    return Principal(name=f"token:{token.name}", role=token.role, token_id=token.id)


def principal_for_user(user: User) -> Principal:
    return Principal(
        name=f"user:{user.username}", role=user.role, user_id=user.id, datacenters=scope_of(user, user.role)
    )


def scope_of(user: User, role: Role) -> tuple[str, ...] | None:
    """The datacenters whose tickets a technician may change: its user's `datacenter` (one, or several
    separated by commas). Other datacenters' tickets are read-only to it. Operators and above, and a
    technician no datacenter was set for, are not scoped."""
    if role != Role.technician or not user.datacenter:
        return None
    return tuple(sorted({dc.strip() for dc in user.datacenter.split(",") if dc.strip()})) or None


def authenticate_user(session: Session, username: str, password: str, *, release: bool = False) -> User | None:
    """The user whose password this is, or None; raises PasswordChecksBusy when checks queue up. With
    `release`, the session's transaction (reads only, so far) is committed before the check, so its
    connection is back in the pool for the quarter of a second the check takes: for a caller whose session
    may commit, such as the sign-in page, where a flood of sign-ins must not hold the connections report
    intake needs."""
    user = session.scalars(select(User).where(User.username == username)).one_or_none()
    known = user is not None and user.active
    password_hash = user.password_hash if user is not None and known else _DUMMY_HASH
    if release:
        session.commit()
    # An unknown name costs the same check, so a response's timing does not tell which names exist.
    matches = verify_password(password_hash, password)
    return user if known and matches else None


_DUMMY_HASH = _hasher.hash(secrets.token_hex(8))


# -- sign-in throttling ----------------------------------------------------------------------------
# Per account, from the audit log (so every API process sees the same count): the failed sign-ins
# since the account's last good one, within LOGIN_WINDOW. After FREE_FAILURES each further try
# waits 2^(n - FREE_FAILURES) s (up to MAX_BACKOFF) after the last failure, answered without checking
# the password; at LOCK_AFTER the account is locked for the rest of the window, audited once.
LOGIN_WINDOW = dt.timedelta(minutes=15)
FREE_FAILURES = 5
LOCK_AFTER = 10
MAX_BACKOFF = dt.timedelta(minutes=5)
LOGIN_FAILED = "core.user.login_failed"
SIGNED_IN = "core.user.signed_in"


class LoginThrottled(FleetfixError):
    status_code = 429
    code = "throttled"

    def __init__(self, message: str, *, retry_after_s: int) -> None:
        super().__init__(message, detail={"retry_after_s": retry_after_s})
        self.retry_after_s = retry_after_s


def _failures(session: Session, username: str, now: dt.datetime) -> list[dt.datetime]:
    """This account's failed sign-ins within the window, after its last good one, oldest first."""
    since = now - LOGIN_WINDOW
    last_good = session.scalar(
        select(AuditEntry.at)
        .where(AuditEntry.object_type == "user", AuditEntry.object_id == username, AuditEntry.action == SIGNED_IN)
        .where(AuditEntry.at >= since)
        .order_by(AuditEntry.at.desc())
        .limit(1)
    )
    query = (
        select(AuditEntry.at)
        .where(AuditEntry.object_type == "user", AuditEntry.object_id == username, AuditEntry.action == LOGIN_FAILED)
        .where(AuditEntry.at >= (last_good if last_good is not None and last_good > since else since))
        .order_by(AuditEntry.at)
        .limit(LOCK_AFTER + 1)
    )
    return list(session.scalars(query).all())


def _aware(at: dt.datetime) -> dt.datetime:
    return at if at.tzinfo is not None else at.replace(tzinfo=dt.UTC)


def sign_in(
    session: Session,
    username: str,
    password: str,
    *,
    client: str,
    now: dt.datetime | None = None,
    release: bool = False,
) -> User | None:
    """A person's sign-in with throttling: the user, or None for a wrong name or password; raises
    LoginThrottled (nothing checked) while the account waits out its backoff or its lock, or while too
    many password checks queue. Failures and the lock go to the audit log; the caller commits even when
    it returns None. `release`: see authenticate_user."""
    now = now or utcnow()
    user = session.scalars(select(User).where(User.username == username)).one_or_none()
    failures = [_aware(at) for at in _failures(session, username, now)] if user is not None else []
    if len(failures) >= LOCK_AFTER:
        until = failures[LOCK_AFTER - 1] + LOGIN_WINDOW
        raise LoginThrottled(
            f"{username}: locked after {LOCK_AFTER} failed sign-ins within {LOGIN_WINDOW.seconds // 60} minutes, "
            f"until {until.isoformat(timespec='seconds')}",
            retry_after_s=max(1, int((until - now).total_seconds())),
        )
    if len(failures) >= FREE_FAILURES:
        wait = min(MAX_BACKOFF, dt.timedelta(seconds=2 ** (len(failures) - FREE_FAILURES)))
        ready = failures[-1] + wait
        if now < ready:
            retry = max(1, math.ceil((ready - now).total_seconds()))
            raise LoginThrottled(
                f"{username}: {len(failures)} failed sign-ins; try again in {retry} s", retry_after_s=retry
            )
    try:
        found = authenticate_user(session, username, password, release=release)
    except PasswordChecksBusy:
        raise LoginThrottled(
            f"too many sign-ins at once; try again in {math.ceil(PASSWORD_WAIT_S)} s",
            retry_after_s=math.ceil(PASSWORD_WAIT_S),
        ) from None
    if found is not None:
        audit.record(
            session, actor=f"user:{username}", action=SIGNED_IN, object_type="user", object_id=username
        ).at = now
        return found
    if user is not None:
        audit.record(
            session,
            actor=client,
            action=LOGIN_FAILED,
            object_type="user",
            object_id=username,
            detail={"failures": len(failures) + 1},
        ).at = now
        if len(failures) + 1 == LOCK_AFTER:
            audit.record(
                session,
                actor="system:auth",
                action="core.user.locked",
                object_type="user",
                object_id=username,
                reason=f"{LOCK_AFTER} failed sign-ins within {LOGIN_WINDOW.seconds // 60} minutes",
                detail={"client": client},
            )
    return None


# -- people and tokens: what `fleetfix users|tokens` and the admin API do -----------------------

USERNAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
HOSTNAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")
MIN_PASSWORD_LENGTH = 12


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
        if not HOSTNAME_PATTERN.match(hostname):
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


# -- web sessions ----------------------------------------------------------------------------------


def start_web_session(session: Session, user: User, *, ttl_s: int) -> str:
    """A new signed-in browser for `user`; returns the id its cookie carries."""
    now = utcnow()
    sid = secrets.token_urlsafe(32)
    session.add(WebSession(id=sid, user_id=user.id, created_at=now, expires_at=now + dt.timedelta(seconds=ttl_s)))
    session.flush()
    return sid


def user_for_web_session(session: Session, sid: str) -> User | None:
    """The user a session id stands for, unless it was ended, has expired or its user is disabled."""
    row = session.get(WebSession, sid)
    if row is None or row.revoked_at is not None or row.expires_at <= utcnow():
        return None
    user = session.get(User, row.user_id)
    return user if user is not None and user.active else None


def end_web_session(session: Session, sid: str) -> None:
    row = session.get(WebSession, sid)
    if row is not None and row.revoked_at is None:
        row.revoked_at = utcnow()


def end_web_sessions(session: Session, user_id: int) -> None:
    """Sign a user out of every browser (a new password, a disabled account)."""
    now = utcnow()
    for row in session.scalars(
        select(WebSession).where(WebSession.user_id == user_id, WebSession.revoked_at.is_(None))
    ):
        row.revoked_at = now
