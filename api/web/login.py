"""Signing in and out of the web UI: a password checked by core.auth, then a signed session cookie."""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict, deque

from fastapi import APIRouter, Depends, Form, Request, Response
from sqlalchemy.orm import Session

from api.deps import get_session
from api.web.common import SESSION_MAX_AGE_S, PageRoute, local_path, redirect, render
from api.web.csrf import rotate_token
from core.auth import LoginThrottled, end_web_session, sign_in, start_web_session

log = logging.getLogger(__name__)
router = APIRouter(route_class=PageRoute, include_in_schema=False)


class ClientFailures:
    """Failed sign-ins per client address within a window, in this process: past `free` of them, each
    further try from that address waits 2^(n - free) s (up to `cap`), whichever accounts it tries.
    Bounded: the addresses heard from least recently are forgotten first."""

    def __init__(self, *, window_s: float = 900, free: int = 20, cap_s: int = 300, most: int = 10_000) -> None:
        self.window_s, self.free, self.cap_s, self.most = window_s, free, cap_s, most
        self._seen: OrderedDict[str, deque[float]] = OrderedDict()
        self._lock = threading.Lock()

    def _recent(self, client: str, now: float) -> deque[float]:
        times = self._seen.setdefault(client, deque())
        self._seen.move_to_end(client)
        while times and times[0] < now - self.window_s:
            times.popleft()
        while len(self._seen) > self.most:
            self._seen.popitem(last=False)
        return times

    def wait(self, client: str, now: float) -> int:
        """Seconds this address must still wait (0: it may try)."""
        with self._lock:
            times = self._recent(client, now)
            if len(times) < self.free:
                return 0
            ready = times[-1] + min(self.cap_s, 2 ** (len(times) - self.free))
            return max(0, int(ready - now) + 1) if now < ready else 0

    def failed(self, client: str, now: float) -> None:
        with self._lock:
            self._recent(client, now).append(now)


_CREATING = threading.Lock()


def clients_of(request: Request) -> ClientFailures:
    """The application's record of failed sign-ins per address (one per app: a test's app starts clean)."""
    state = request.app.state
    with _CREATING:
        if not hasattr(state, "login_clients"):
            state.login_clients = ClientFailures()
    found: ClientFailures = state.login_clients
    return found


def _throttled(request: Request, form: dict[str, str], message: str, retry_after_s: int) -> Response:
    response = render(request, "login.html", {**form, "error": message}, status_code=429)
    response.headers["Retry-After"] = str(retry_after_s)
    return response


@router.get("/login")
def login_form(request: Request, next: str = "/") -> Response:
    return render(request, "login.html", {"next": local_path(next), "username": ""})


@router.post("/login")
def login(
    request: Request,
    username: str = Form("", max_length=64),
    password: str = Form("", max_length=1024),
    next: str = Form("/", max_length=2000),
    session: Session = Depends(get_session),
) -> Response:
    client = request.client.host if request.client else "unknown"
    form = {"next": local_path(next), "username": username}
    clients = clients_of(request)
    wait = clients.wait(client, time.monotonic())
    if wait:
        log.warning("api.web.login_throttled", extra={"fields": {"client": client, "retry_after_s": wait}})
        return _throttled(request, form, f"Too many failed sign-ins from your address; try again in {wait} s.", wait)
    try:
        user = sign_in(session, username.strip(), password, client=f"client:{client}", release=True)
    except LoginThrottled as throttled:
        log.warning("api.web.login_throttled", extra={"fields": {"username": username[:64], "client": client}})
        return _throttled(request, form, throttled.message, throttled.retry_after_s)
    if user is None:
        session.commit()  # the failure is on record: it counts toward the account's backoff and lock
        clients.failed(client, time.monotonic())
        log.info("api.web.login_failed", extra={"fields": {"username": username[:64], "client": client}})
        return render(request, "login.html", {**form, "error": "Wrong user name or password."}, status_code=401)
    # A fresh session: nothing chosen before sign-in (a planted cookie, the anonymous token) carries over.
    request.session.clear()
    request.session["sid"] = start_web_session(session, user, ttl_s=SESSION_MAX_AGE_S)
    session.commit()
    rotate_token(request.session)
    log.info("api.web.login", extra={"fields": {"username": user.username, "role": user.role.value}})
    return redirect(request, local_path(next))


@router.post("/logout")
def logout(request: Request, session: Session = Depends(get_session)) -> Response:
    """Ends the session on the server too: a copy of the cookie signs nobody in afterwards."""
    sid = request.session.get("sid")
    if isinstance(sid, str):
        end_web_session(session, sid)
        session.commit()
    request.session.clear()
    return redirect(request, "/login")
