"""Credentials: API tokens (people, tools and hosts) and user passwords.

A token is shown once, when it is issued; only its SHA-256 is stored. Tokens
carry 256 bits of randomness, so a fast hash is enough to make a stolen table
useless (the way GitHub and PyPI store theirs); passwords are chosen by people
and are hashed with Argon2id instead. Issuing and changing them for people and
tools (`fleetfix users|tokens`, the admin API) is core.accounts.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import datetime as dt
import math
import os
import secrets
import threading
from dataclasses import dataclass

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from core import audit
from core.db import utcnow
from core.errors import FleetfixError
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
