"""Signing in and out of the web UI: a password checked by core.auth, then a signed session cookie."""

from __future__ import annotations

import logging

from fastapi import APIRouter, Depends, Form, Request, Response
from sqlalchemy.orm import Session

from api.deps import get_session
from api.web.common import SESSION_MAX_AGE_S, PageRoute, local_path, redirect, render
from api.web.csrf import rotate_token
from core.auth import authenticate_user, end_web_session, start_web_session

log = logging.getLogger(__name__)
router = APIRouter(route_class=PageRoute, include_in_schema=False)


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
    user = authenticate_user(session, username.strip(), password)
    if user is None:
        log.info("api.web.login_failed", extra={"fields": {"username": username[:64]}})
        return render(
            request,
            "login.html",
            {"next": local_path(next), "username": username, "error": "Wrong user name or password."},
            status_code=401,
        )
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
