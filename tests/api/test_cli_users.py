"""`fleetfix users` and `fleetfix tokens` on a real (SQLite) database, and the embedded first-start admin."""

from __future__ import annotations

import getpass
import stat
from pathlib import Path

import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from api.bootstrap import bootstrap_admin
from api.cli import app
from api.settings import load_central_settings
from core.auth import authenticate_user, principal_for_token
from core.db import Database
from core.models import AuditEntry, Role
from migrations import upgrade


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("FLEETFIX_DATABASE_URL", "FLEETFIX_BROKER_URL", "FLEETFIX_ADMIN_PASSWORD", "FLEETFIX_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("FLEETFIX_DATA_DIR", str(tmp_path))
    upgrade(f"sqlite:///{tmp_path / 'fleetfix.db'}")
    return tmp_path


def run(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args), input=stdin)
    return result.exit_code, result.stdout, result.stderr


def database(data_dir: Path) -> Database:
    return Database(f"sqlite:///{data_dir / 'fleetfix.db'}")


def test_users_and_tokens_from_the_command_line(data_dir: Path) -> None:
    code, out, err = run(
        "users", "create", "alice", "--role", "operator", "--password-stdin", stdin="a long password\n"
    )
    assert (code, out.strip()) == (0, "user alice (operator) created"), err
    code, _, err = run("users", "create", "bob", "--role", "root", "--password-stdin", stdin="a long password\n")
    assert code == 2
    assert "--role 'root'" in err
    code, _, err = run("users", "create", "carol", "--role", "viewer", "--password-stdin", stdin="short\n")
    assert code == 1
    assert "password: at least 12 characters" in err
    code, _, err = run("users", "create", "alice", "--role", "viewer", "--password-stdin", stdin="a long password\n")
    assert code == 1
    assert "already exists" in err

    code, secret, err = run("tokens", "issue", "laptop", "--user", "alice")
    assert code == 0
    assert "shown this once" in err
    secret = secret.strip()
    code, host_secret, _ = run("tokens", "issue", "agent", "--host", "web-001")
    host_secret = host_secret.strip()
    db = database(data_dir)
    try:
        with db.session() as session:
            alice = principal_for_token(session, secret)
            host = principal_for_token(session, host_secret)
            assert alice is not None
            assert (alice.actor, alice.role) == ("user:alice", Role.operator)
            assert host is not None
            assert (host.actor, host.hostname) == ("host:web-001", "web-001")
        code, listing, _ = run("tokens", "list")
        assert "user:alice" in listing
        assert "host:web-001" in listing
        assert secret not in listing

        code, out, _ = run("users", "passwd", "alice", "--password-stdin", stdin="another long one\n")
        assert code == 0
        code, out, _ = run("users", "disable", "alice", "--reason", "left the team")
        assert code == 0
        assert "alice" in run("users", "list")[1]
        assert "disabled" in run("users", "list")[1]
        token_id = listing.split()[0]
        code, out, _ = run("tokens", "revoke", token_id, "--reason", "laptop lost")
        assert (code, out.strip()) == (0, f"token {token_id} revoked")
        assert run("tokens", "revoke", token_id, "--reason", "again")[0] == 1
        with db.session() as session:
            assert principal_for_token(session, secret) is None  # disabled, and revoked
            user = authenticate_user(session, "alice", "another long one")
            assert user is None  # disabled users cannot sign in
            audit = [(e.actor, e.action, e.reason) for e in session.scalars(select(AuditEntry).order_by(AuditEntry.id))]
        actor = f"cli:{getpass.getuser()}"
        assert audit == [
            (actor, "core.user.created", "account created"),
            (actor, "core.token.issued", "token issued"),
            (actor, "core.token.issued", "token issued"),
            (actor, "core.user.password_set", "password set"),
            (actor, "core.user.disabled", "left the team"),
            (actor, "core.token.revoked", "laptop lost"),
        ]
    finally:
        db.dispose()


def test_first_start_creates_an_admin_and_prints_its_secrets_once(data_dir: Path) -> None:
    settings = load_central_settings()
    db = database(data_dir)
    printed: list[str] = []
    try:
        bootstrap_admin(db, settings, printed.append)
        password = (data_dir / "admin-password").read_text().strip()
        token = (data_dir / "admin-token").read_text().strip()
        for secret_file in ("admin-password", "admin-token"):
            assert stat.S_IMODE((data_dir / secret_file).stat().st_mode) == 0o600
        assert len(printed) == 2
        assert password in printed[0]
        assert token in printed[1]
        with db.session() as session:
            assert authenticate_user(session, "admin", password) is not None
            principal = principal_for_token(session, token)
            assert principal is not None
            assert (principal.actor, principal.role) == ("user:admin", Role.admin)
        bootstrap_admin(db, settings, printed.append)  # a restart: nothing new, nothing printed
        assert len(printed) == 2
        assert (data_dir / "admin-token").read_text().strip() == token
    finally:
        db.dispose()


def test_a_configured_admin_password_is_used_and_not_printed(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEETFIX_ADMIN_PASSWORD", "chosen by the operator")
    db = database(data_dir)
    printed: list[str] = []
    try:
        bootstrap_admin(db, load_central_settings(), printed.append)
        assert not (data_dir / "admin-password").exists()
        assert "chosen by the operator" not in "".join(printed)
        with db.session() as session:
            assert authenticate_user(session, "admin", "chosen by the operator") is not None
    finally:
        db.dispose()
    monkeypatch.setenv("FLEETFIX_ADMIN_PASSWORD", "short")
    from core.settings import SettingsError

    with pytest.raises(SettingsError, match=r"FLEETFIX_ADMIN_PASSWORD: .*at least 12 characters"):
        load_central_settings()
