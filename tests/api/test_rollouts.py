"""Rollouts over the API: the list, one rollout's waves and comparison, an operator's halt and resume (If-Match,
audited, 409 when the state does not allow it)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from api.app import create_app
from checker.schemas import Firmware, HostIdentity, Identity, Observations, Report
from core.db import Database
from core.models import AuditEntry, Role
from remediator.ingest import ingest
from remediator.inventory import HostInventory, apply_inventory
from remediator.rules import load_ruleset
from tests.builders.people import bearer
from tests.builders.reports import T0
from tests.builders.runtime import runtime_of

CLASS = "compute-skx-2s"


def old_bios(hostname: str) -> Report:
    firmware = Firmware(bios_version="2.9.4")  # the class's baseline is 2.10.2
    return Report(
        host=HostIdentity(hostname=hostname, boot_id="boot-1"),
        captured_at=T0,
        observations=Observations(identity=Identity(kernel="6.1.0-28-amd64", firmware=firmware)),
    )


@pytest.fixture
def client(db: Database) -> Iterator[TestClient]:
    names = [f"skx-{i:03d}" for i in range(20)]
    with db.session() as session:
        rows = [
            HostInventory(hostname=n, hardware_class=CLASS, datacenter="ams1", rack=f"r{i}")
            for i, n in enumerate(names)
        ]
        apply_inventory(session, rows, actor="test")
        ingest(session, [old_bios(n) for n in names], ruleset=load_ruleset([]))
    with TestClient(create_app(runtime_of(db)), headers=bearer(db, Role.operator)) as test_client:
        yield test_client


def test_the_list_and_one_rollout_show_its_waves(client: TestClient) -> None:
    [listed] = client.get("/api/v1/rollouts").json()
    assert listed["change"] == "bios 2.10.2"
    assert listed["part_type"] == "firmware"
    assert listed["state"] == "running"
    assert (listed["hosts_started"], listed["hosts_in_class"], listed["rule_id"]) == (1, 20, "firmware-below-baseline")
    assert client.get("/api/v1/rollouts", params={"state": "halted"}).json() == []
    one = client.get(f"/api/v1/rollouts/{listed['id']}")
    assert one.status_code == 200
    assert one.headers["ETag"]
    body = one.json()
    canary = body["waves_detail"][0]
    assert canary["hosts_covered"] == 1
    assert canary["hosts"][0]["state"] == "started"
    assert canary["counts"]["started"] == 1
    assert body["waves_detail"][1]["hosts"] == []
    assert client.get("/api/v1/rollouts/999").status_code == 404


def test_an_operator_halts_and_resumes_with_the_etag(client: TestClient, db: Database) -> None:
    [listed] = client.get("/api/v1/rollouts").json()
    path = f"/api/v1/rollouts/{listed['id']}"
    assert client.post(f"{path}/halt", json={"reason": "the vendor withdrew it"}).status_code == 428
    etag = client.get(path).headers["ETag"]
    halted = client.post(f"{path}/halt", json={"reason": "the vendor withdrew it"}, headers={"If-Match": etag})
    assert halted.status_code == 200, halted.text
    assert halted.json()["state"] == "paused"
    assert halted.json()["halt_reason"].endswith("the vendor withdrew it")
    stale = client.post(f"{path}/resume", json={"reason": "fixed"}, headers={"If-Match": etag})
    assert stale.status_code == 412
    again = client.post(f"{path}/halt", json={"reason": "twice"}, headers={"If-Match": halted.headers["ETag"]})
    assert again.status_code == 409
    resumed = client.post(f"{path}/resume", json={"reason": "fixed"}, headers={"If-Match": halted.headers["ETag"]})
    assert resumed.status_code == 200
    assert resumed.json()["state"] == "running"
    with db.session() as session:
        actions = session.scalars(
            select(AuditEntry.action).where(AuditEntry.object_type == "rollout").order_by(AuditEntry.id)
        ).all()
    assert actions == ["remediator.rollout.created", "remediator.rollout.halted", "remediator.rollout.resumed"]


def test_viewers_read_and_cannot_halt(client: TestClient, db: Database) -> None:
    viewer = bearer(db, Role.viewer)
    [listed] = client.get("/api/v1/rollouts", headers=viewer).json()
    path = f"/api/v1/rollouts/{listed['id']}"
    etag = client.get(path, headers=viewer).headers["ETag"]
    refused = client.post(f"{path}/halt", json={"reason": "x"}, headers={**viewer, "If-Match": etag})
    assert refused.status_code == 403
