"""Sign-in under brute force: per account (from the audit log, so every API process agrees) and per client
address, with backoff and a lock; the outside review signed in after 50 wrong passwords."""

from __future__ import annotations

import datetime as dt

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from core.auth import FREE_FAILURES, LOCK_AFTER, LoginThrottled, sign_in
from core.db import Database
from core.models import AuditEntry, Role
from tests.builders.people import make_user
from tests.web.helpers import csrf_token

T0 = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)


def attempt(client: TestClient, username: str, password: str) -> int:
    token = csrf_token(client)
    data = {"username": username, "password": password, "csrf_token": token}
    return client.post("/login", data=data, follow_redirects=False).status_code


def test_fifty_wrong_passwords_then_the_right_one_does_not_sign_in(
    client: TestClient, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A try a second, on the service's clock: at most 10 of the 50 guesses are checked (the rest wait
    out the backoff with a 429, answered without a password check), the 10th locks the account, and the
    right password after them does not sign in."""
    import core.auth

    ticks = iter(range(10_000))
    monkeypatch.setattr(core.auth, "utcnow", lambda: T0 + dt.timedelta(seconds=next(ticks)))
    password = make_user(db, "mallory-target", Role.operator)
    statuses = [attempt(client, "mallory-target", f"guess-{n}") for n in range(50)]
    assert statuses[:FREE_FAILURES] == [401] * FREE_FAILURES
    assert statuses.count(401) == LOCK_AFTER  # checked: 5 free, then one per backoff, then locked
    assert statuses.count(429) == 50 - LOCK_AFTER
    assert attempt(client, "mallory-target", password) == 429
    response = client.get("/queue", follow_redirects=False)
    assert response.status_code in (302, 303, 401)  # not signed in


def test_backoff_then_lock_per_account_with_an_audit_entry(db: Database) -> None:
    password = make_user(db, "ops-lee", Role.operator)
    at = T0
    with db.session() as session:
        for _ in range(FREE_FAILURES):
            assert sign_in(session, "ops-lee", "wrong", client="client:10.0.0.9", now=at) is None
        with pytest.raises(LoginThrottled) as early:
            sign_in(session, "ops-lee", password, client="client:10.0.0.9", now=at)  # even the right one waits
        assert early.value.retry_after_s == 1
        for n in range(FREE_FAILURES, LOCK_AFTER):
            at += dt.timedelta(seconds=2 ** (n - FREE_FAILURES) + 1)  # each after its backoff
            assert sign_in(session, "ops-lee", "wrong", client="client:10.0.0.9", now=at) is None
        at += dt.timedelta(minutes=5)
        with pytest.raises(LoginThrottled, match="locked after 10 failed sign-ins"):
            sign_in(session, "ops-lee", password, client="client:10.0.0.9", now=at)
        locks = session.scalars(
            select(AuditEntry).where(AuditEntry.action == "core.user.locked", AuditEntry.object_id == "ops-lee")
        ).all()
        assert len(locks) == 1
        assert locks[0].detail == {"client": "client:10.0.0.9"}
        # the window passes: the right password signs in, and the count starts again
        later = at + dt.timedelta(minutes=16)
        assert sign_in(session, "ops-lee", password, client="client:10.0.0.9", now=later) is not None
        assert sign_in(session, "ops-lee", "wrong", client="client:10.0.0.9", now=later) is None
        assert sign_in(session, "ops-lee", password, client="client:10.0.0.9", now=later) is not None


def test_one_address_trying_many_accounts_is_slowed_too(client: TestClient, db: Database) -> None:
    statuses = [attempt(client, f"nobody-{n}", "guess") for n in range(25)]  # names that do not exist
    assert statuses[:20] == [401] * 20
    assert 429 in statuses[20:]


def test_a_password_check_holds_no_database_connection(db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    """Sign-ins waiting for or running a password check must not hold the connections report intake needs
    (the load bench saw a sign-in flood hold the pool and report p99 go from 0.5 s to 43 s)."""
    import core.auth

    password = make_user(db, "ops-kim", Role.operator)
    seen: list[bool] = []
    real = core.auth._hasher

    with db.sessionmaker() as session:  # a session that may commit, as the sign-in page's

        class Watching:
            def verify(self, password_hash: str, given: str) -> bool:
                seen.append(session.in_transaction())
                return bool(real.verify(password_hash, given))

        monkeypatch.setattr(core.auth, "_hasher", Watching())
        assert sign_in(session, "ops-kim", password, client="client:10.0.0.7", now=T0, release=True) is not None
        assert sign_in(session, "nobody-here", password, client="client:10.0.0.7", now=T0, release=True) is None
        assert sign_in(session, "ops-kim", password, client="client:10.0.0.7", now=T0) is not None
    assert seen == [False, False, True]  # released only when asked: a caller inside `with session.begin()` keeps it


def test_sign_ins_beyond_the_checks_running_get_429(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """When every password check is taken and none frees up within PASSWORD_WAIT_S, the sign-in is answered
    429 with a Retry-After at once, without a check: a flood cannot queue without bound."""
    import core.auth

    monkeypatch.setattr(core.auth, "PASSWORD_WAIT_S", 0.05)
    taken = [core.auth.PASSWORD_CHECKS.acquire(timeout=1) for _ in range(2)]
    try:
        token = csrf_token(client)
        data = {"username": "anyone", "password": "whatever-it-is", "csrf_token": token}
        response = client.post("/login", data=data, follow_redirects=False)
    finally:
        for _ in taken:
            core.auth.PASSWORD_CHECKS.release()
    assert response.status_code == 429
    assert response.headers["Retry-After"] == "1"


def test_password_checks_run_at_a_lower_cpu_priority_than_the_caller(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Argon2 runs on threads PASSWORD_CHECK_NICE nicer than the server (the hash's own threads inherit
    it), so a sign-in flood on a busy machine waits for the CPU instead of taking it from report intake;
    the caller's priority is untouched. Linux keeps a nice value per thread (setpriority(2))."""
    import os
    import threading

    import core.auth

    password = make_user(db, "ops-ana", Role.operator)
    real = core.auth._hasher
    niceness: list[int] = []

    class Watching:
        def verify(self, password_hash: str, given: str) -> bool:
            niceness.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
            return bool(real.verify(password_hash, given))

    monkeypatch.setattr(core.auth, "_hasher", Watching())
    caller = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    with db.sessionmaker() as session:
        assert sign_in(session, "ops-ana", password, client="client:10.0.0.5", now=T0) is not None
        assert sign_in(session, "ops-ana", "wrong", client="client:10.0.0.5", now=T0) is None
    assert niceness == [min(19, caller + core.auth.PASSWORD_CHECK_NICE)] * 2
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == caller
