"""`fleetfix users …` and `fleetfix tokens …`: people and credentials, from the command line.

What an admin does before anyone can use the API (production creates no
account by itself). Each change is in the audit log as `cli:<login>`.
"""

from __future__ import annotations

import getpass
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated

import typer

from core.errors import FleetfixError

if TYPE_CHECKING:  # the database stack loads only when a command runs (`fleetfix agent` never needs it)
    from sqlalchemy.orm import Session

    from core.models import Role

users_app = typer.Typer(help="People who use the API and web UI, and their roles.", no_args_is_help=True)
tokens_app = typer.Typer(help="API tokens: for tools, for people, and each host's own.", no_args_is_help=True)

ROLE_HELP = "viewer, technician, operator or admin."


def _actor() -> str:
    return f"cli:{getpass.getuser()}"


def _fail(message: str, code: int = 1) -> typer.Exit:
    typer.echo(f"fleetfix: {message}", err=True)
    return typer.Exit(code)


def _role(value: str | None) -> Role | None:
    from core.models import Role

    if value is None:
        return None
    try:
        return Role(value)
    except ValueError:
        raise _fail(f"--role {value!r}: one of {', '.join(role.value for role in Role)}", 2) from None


@contextmanager
def _session() -> Iterator[Session]:
    """A unit of work on the configured database; a refused change prints why and exits 1."""
    from api.cli import _settings
    from core.db import Database

    settings = _settings()
    database = Database(settings.effective_database_url)
    try:
        with database.session() as session:
            yield session
    except FleetfixError as error:
        raise _fail(error.message) from None
    finally:
        database.dispose()


def _read_password(from_stdin: bool) -> str:
    if from_stdin:
        return sys.stdin.readline().rstrip("\n")
    password: str = typer.prompt("Password", hide_input=True, confirmation_prompt=True)
    return password


@users_app.command("create")
def users_create(
    username: Annotated[str, typer.Argument(help="Login name: lower-case letters, digits, '.', '_', '-'.")],
    role: Annotated[str, typer.Option(help=ROLE_HELP)],
    display_name: Annotated[str, typer.Option(help="Name shown in the UI.")] = "",
    datacenter: Annotated[str | None, typer.Option(help="A technician's default datacenter.")] = None,
    password_stdin: Annotated[bool, typer.Option(help="Read the password from standard input (scripts).")] = False,
    reason: Annotated[str, typer.Option(help="Why (audit log).")] = "account created",
) -> None:
    """Create a user; the password is asked for (twice) unless --password-stdin."""
    from core import accounts

    chosen = _role(role)
    assert chosen is not None
    password = _read_password(password_stdin)
    with _session() as session:
        user = accounts.create_user(
            session,
            username=username,
            role=chosen,
            password=password,
            display_name=display_name,
            datacenter=datacenter,
            actor=_actor(),
            reason=reason,
        )
        typer.echo(f"user {user.username} ({user.role.value}) created")


@users_app.command("list")
def users_list() -> None:
    """List users with their roles and whether they are active."""
    from core import accounts

    with _session() as session:
        for user in accounts.list_users(session):
            state = "active" if user.active else "disabled"
            typer.echo(
                f"{user.username:<24} {user.role.value:<11} {state:<9} {user.datacenter or '-':<8} {user.display_name}"
            )


@users_app.command("disable")
def users_disable(username: str, reason: Annotated[str, typer.Option(help="Why (audit log).")]) -> None:
    """Disable a user: their web sessions and tokens stop working at once."""
    from core import accounts

    with _session() as session:
        accounts.update_user(session, username, active=False, actor=_actor(), reason=reason)
    typer.echo(f"user {username} disabled")


@users_app.command("enable")
def users_enable(username: str, reason: Annotated[str, typer.Option(help="Why (audit log).")]) -> None:
    """Enable a disabled user again."""
    from core import accounts

    with _session() as session:
        accounts.update_user(session, username, active=True, actor=_actor(), reason=reason)
    typer.echo(f"user {username} enabled")


@users_app.command("passwd")
def users_passwd(
    username: str,
    password_stdin: Annotated[bool, typer.Option(help="Read the password from standard input (scripts).")] = False,
    reason: Annotated[str, typer.Option(help="Why (audit log).")] = "password set",
) -> None:
    """Set a user's password."""
    from core import accounts

    password = _read_password(password_stdin)
    with _session() as session:
        accounts.set_password(session, username, password, actor=_actor(), reason=reason)
    typer.echo(f"password of {username} set")


@tokens_app.command("issue")
def tokens_issue(
    name: Annotated[str, typer.Argument(help="What the token is for, e.g. 'inventory-sync'.")],
    role: Annotated[str | None, typer.Option(help=f"A tool's role: {ROLE_HELP}")] = None,
    user: Annotated[
        str | None, typer.Option(help="The token acts as this user (their role, or --role below it).")
    ] = None,
    host: Annotated[
        str | None, typer.Option(help="A host's own credential: it may only submit HOST's reports.")
    ] = None,
    reason: Annotated[str, typer.Option(help="Why (audit log).")] = "token issued",
) -> None:
    """Issue a token and print it once on standard output (only its hash is stored)."""
    from core import accounts

    with _session() as session:
        token, secret = accounts.create_token(
            session, name=name, role=_role(role), username=user, hostname=host, actor=_actor(), reason=reason
        )
        owner = accounts.token_owner(session, token)
        token_id = token.id
    typer.echo(f"token {token_id} for {owner}; it is shown this once:", err=True)
    typer.echo(secret)


@tokens_app.command("list")
def tokens_list(
    show_revoked: Annotated[bool, typer.Option("--all", help="Also revoked tokens.")] = False,
) -> None:
    """List tokens (id, prefix, owner, role, last use) — never their secrets."""
    from core import accounts

    with _session() as session:
        for token in accounts.list_tokens(session, include_revoked=show_revoked):
            role = "(host)" if token.hostname else token.role.value
            used = token.last_used_at.isoformat(timespec="seconds") if token.last_used_at else "never used"
            revoked = f"  revoked {token.revoked_at.isoformat(timespec='seconds')}" if token.revoked_at else ""
            owner = accounts.token_owner(session, token)
            typer.echo(f"{token.id:>5}  ffx_{token.prefix}…  {owner:<32} {role:<11} {used}{revoked}")


@tokens_app.command("revoke")
def tokens_revoke(token_id: int, reason: Annotated[str, typer.Option(help="Why (audit log).")]) -> None:
    """Revoke a token: it stops working at once."""
    from core import accounts

    with _session() as session:
        accounts.revoke_token(session, token_id, actor=_actor(), reason=reason)
    typer.echo(f"token {token_id} revoked")
