"""`fleetfix up`'s demo accounts: a technician per datacenter and an operator, each created once."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from api.settings import load_central_settings
from api.web.demo import accounts_file, demo_accounts, technician_name
from core.db import Database
from remediator.models import Host
from tests.web.helpers import login


def test_demo_accounts_are_created_once_and_can_sign_in(client: TestClient, db: Database, tmp_path: Path) -> None:
    settings = load_central_settings(data_dir=tmp_path)
    with db.session() as session:
        session.add_all([Host(hostname="a-1", datacenter="ams1"), Host(hostname="s-1", datacenter="SJC 2")])
    printed: list[str] = []
    assert sorted(demo_accounts(db, settings, echo=printed.append)) == ["operator", "tech-ams1", "tech-sjc-2"]
    assert len(printed) == 3
    path = accounts_file(settings)
    assert path.stat().st_mode & 0o777 == 0o600
    rows = {line.split(maxsplit=3)[0]: line.split(maxsplit=3)[1:] for line in path.read_text().splitlines()}
    assert {name: (role, dc) for name, (_, role, dc) in rows.items()} == {
        "operator": ("operator", "-"),
        "tech-ams1": ("technician", "ams1"),
        "tech-sjc-2": ("technician", "SJC 2"),
    }
    assert demo_accounts(db, settings, echo=printed.append) == []  # a second start changes nothing
    assert len(printed) == 3

    login(client, "tech-ams1", rows["tech-ams1"][0])
    assert "Repair tickets in ams1" in client.get("/queue").text


def test_technician_names_are_valid_user_names() -> None:
    assert technician_name("ams1") == "tech-ams1"
    assert technician_name("Frankfurt/3") == "tech-frankfurt-3"
    assert technician_name("???") == "tech-dc"
