"""People and credentials (admin only): users, API tokens, and who the caller is."""

from __future__ import annotations

import datetime as dt

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import select
from sqlalchemy.orm import Session

from api.auth import require
from api.deps import RowId, get_session
from api.pagination import CURSOR_QUERY, Page, paginate
from core import accounts
from core.auth import Principal
from core.models import ApiToken, Role, User
from core.vocabulary import MIN_PASSWORD_LENGTH

users_router = APIRouter(prefix="/users", tags=["users"])
tokens_router = APIRouter(prefix="/tokens", tags=["users"])
me_router = APIRouter(prefix="/me", tags=["users"])

REASON = Field(min_length=1, max_length=1000, description="Why: kept in the audit log.")


class UserOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    username: str
    display_name: str
    role: Role
    datacenter: str | None
    active: bool
    created_at: dt.datetime


class UserCreate(BaseModel):
    username: str
    role: Role
    password: str = Field(min_length=MIN_PASSWORD_LENGTH, max_length=1000)
    display_name: str = Field("", max_length=128)
    datacenter: str | None = Field(None, max_length=64, description="A technician's default queue filter.")
    reason: str = REASON


class UserChange(BaseModel):
    role: Role | None = None
    active: bool | None = Field(None, description="false disables the user and every token of theirs.")
    display_name: str | None = Field(None, max_length=128)
    datacenter: str | None = Field(None, max_length=64)
    reason: str = REASON


class PasswordChange(BaseModel):
    password: str = Field(min_length=MIN_PASSWORD_LENGTH, max_length=1000)
    reason: str = REASON


class TokenOut(BaseModel):
    id: int
    name: str
    prefix: str = Field(description="The first characters after ffx_, to tell tokens apart.")
    role: Role | None = Field(description="None for a host's own credential.")
    owner: str = Field(description="user:<name>, host:<name> or token:<name>: how the audit log names its changes.")
    hostname: str | None
    created_at: dt.datetime
    last_used_at: dt.datetime | None
    revoked_at: dt.datetime | None


class TokenCreate(BaseModel):
    name: str = Field(min_length=1, max_length=128)
    role: Role | None = Field(None, description="A tool's role; for a user's token, at most the user's (default).")
    username: str | None = Field(None, description="The token acts as this user (and stops when they are disabled).")
    hostname: str | None = Field(None, description="A host's own credential: it may only submit that host's reports.")
    reason: str = REASON


class IssuedToken(BaseModel):
    token: TokenOut
    secret: str = Field(description="The bearer token. Shown this once; only its hash is stored.")


class Reason(BaseModel):
    reason: str = REASON


class Me(BaseModel):
    actor: str
    role: Role | None
    hostname: str | None


def _token_out(session: Session, token: ApiToken) -> TokenOut:
    return TokenOut(
        id=token.id,
        name=token.name,
        prefix=token.prefix,
        role=None if token.hostname else token.role,
        owner=accounts.token_owner(session, token),
        hostname=token.hostname,
        created_at=token.created_at,
        last_used_at=token.last_used_at,
        revoked_at=token.revoked_at,
    )


@users_router.get("", response_model=Page[UserOut])
def list_users(
    cursor: str | None = CURSOR_QUERY,
    limit: int = Query(100, ge=1, le=1000),
    session: Session = Depends(get_session),
    _: Principal = Depends(require(Role.admin)),
) -> Page[UserOut]:
    return paginate(
        session,
        select(User),
        User.username,
        cursor=cursor,
        limit=limit,
        convert=UserOut.model_validate,
        descending=False,
    )


@users_router.post("", response_model=UserOut, status_code=201)
def create_user(
    body: UserCreate, session: Session = Depends(get_session), principal: Principal = Depends(require(Role.admin))
) -> UserOut:
    user = accounts.create_user(
        session,
        username=body.username,
        role=body.role,
        password=body.password,
        display_name=body.display_name,
        datacenter=body.datacenter,
        actor=principal.actor,
        reason=body.reason,
    )
    session.commit()
    return UserOut.model_validate(user)


@users_router.get("/{username}", response_model=UserOut)
def get_user(
    username: str, session: Session = Depends(get_session), _: Principal = Depends(require(Role.admin))
) -> UserOut:
    return UserOut.model_validate(accounts.get_user(session, username))


@users_router.patch("/{username}", response_model=UserOut)
def change_user(
    username: str,
    body: UserChange,
    session: Session = Depends(get_session),
    principal: Principal = Depends(require(Role.admin)),
) -> UserOut:
    """Change a user's role, name or datacenter, or disable (active: false) or enable them."""
    user = accounts.update_user(
        session,
        username,
        actor=principal.actor,
        reason=body.reason,
        role=body.role,
        active=body.active,
        display_name=body.display_name,
        datacenter=body.datacenter,
    )
    session.commit()
    return UserOut.model_validate(user)


@users_router.put("/{username}/password", response_model=UserOut)
def set_password(
    username: str,
    body: PasswordChange,
    session: Session = Depends(get_session),
    principal: Principal = Depends(require(Role.admin)),
) -> UserOut:
    user = accounts.set_password(session, username, body.password, actor=principal.actor, reason=body.reason)
    session.commit()
    return UserOut.model_validate(user)


@tokens_router.get("", response_model=Page[TokenOut])
def list_tokens(
    include_revoked: bool = False,
    cursor: str | None = CURSOR_QUERY,
    limit: int = Query(100, ge=1, le=1000),
    session: Session = Depends(get_session),
    _: Principal = Depends(require(Role.admin)),
) -> Page[TokenOut]:
    """Tokens, newest first (never their secrets)."""
    query = select(ApiToken)
    if not include_revoked:
        query = query.where(ApiToken.revoked_at.is_(None))
    return paginate(session, query, ApiToken.id, cursor=cursor, limit=limit, convert=lambda t: _token_out(session, t))


@tokens_router.post("", response_model=IssuedToken, status_code=201)
def issue_token(
    body: TokenCreate, session: Session = Depends(get_session), principal: Principal = Depends(require(Role.admin))
) -> IssuedToken:
    """Issue a token for a tool (role), a user (username) or a host (hostname); its secret is in this response only."""
    token, secret = accounts.create_token(
        session,
        name=body.name,
        role=body.role,
        username=body.username,
        hostname=body.hostname,
        actor=principal.actor,
        reason=body.reason,
    )
    session.commit()
    return IssuedToken(token=_token_out(session, token), secret=secret)


@tokens_router.post("/{token_id}/revoke", response_model=TokenOut)
def revoke_token(
    token_id: RowId,
    body: Reason,
    session: Session = Depends(get_session),
    principal: Principal = Depends(require(Role.admin)),
) -> TokenOut:
    token = accounts.revoke_token(session, token_id, actor=principal.actor, reason=body.reason)
    session.commit()
    return _token_out(session, token)


@me_router.get("", response_model=Me)
def who_am_i(principal: Principal = Depends(require(Role.viewer, hosts=True))) -> Me:
    """Who the credential speaks for: hosts use it to check theirs."""
    return Me(
        actor=principal.actor,
        role=None if principal.is_host else principal.role,
        hostname=principal.hostname,
    )
