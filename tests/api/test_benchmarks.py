"""POST /api/v1/hosts/{hostname}/benchmarks: a user's own benchmark score, judged against the host's hardware
class at once (the same judgement as an agent's score), and shown on the host's page."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from api.app import create_app
from core.db import Database
from core.models import Role
from remediator import benchmarks
from remediator.inventory import HostInventory, apply_inventory
from remediator.models import Host, Remediation, Signal
from tests.builders.people import bearer
from tests.builders.runtime import runtime_of
from tests.web.helpers import signed_in

HS06 = "HEP-SPEC06"
SEED_001 = [3.4, 3.5, 3.6, 3.7, 3.8, 3.9]  # INFN/CCR-11/01: comparable hosts per core per GHz


@pytest.fixture
def client(db: Database) -> Iterator[TestClient]:
    benchmarks.clear_cache()
    with db.session() as session:
        rows = [HostInventory(hostname=f"grid-{i:03d}", hardware_class="grid-opteron") for i in range(8)]
        rows.append(HostInventory(hostname="lone-001", hardware_class="lone-class"))
        apply_inventory(session, rows, actor="test")
        session.commit()
    with TestClient(create_app(runtime_of(db))) as test_client:
        yield test_client


def post(client: TestClient, hostname: str, score: float, headers: dict[str, str], name: str = HS06) -> dict:
    response = client.post(f"/api/v1/hosts/{hostname}/benchmarks", json={"name": name, "score": score}, headers=headers)
    assert response.status_code == 200, response.text
    return response.json()


def test_a_users_scores_find_the_slow_host_of_the_class(client: TestClient, db: Database) -> None:
    operator = bearer(db, Role.operator)
    for i, score in enumerate(SEED_001):
        judged = post(client, f"grid-{i:03d}", score, operator)
    assert judged["outlier"] is False  # the sixth: a class of six, none apart
    slow = post(client, "grid-006", 1.66, bearer(db, hostname="grid-006"))  # the host itself may post its own
    assert slow["n"] == 7
    assert slow["class_median"] == 3.6
    assert slow["outlier"] is True
    assert slow["deviations_below_median"] == pytest.approx(0.6745 * (3.6 - 1.66) / 0.2, abs=0.01)
    with db.session() as session:
        host = session.scalars(select(Host).where(Host.hostname == "grid-006")).one()
        kinds = set(session.scalars(select(Signal.kind).where(Signal.host_id == host.id)))
        assert kinds == {"benchmark_score", "benchmark_outlier"}
        planned = session.scalars(select(Remediation.rule_id).where(Remediation.host_id == host.id)).all()
        assert planned == ["benchmark-outlier"]
    # another benchmark's scores are a class of their own: one host, no judgement
    other = post(client, "grid-007", 1.0, operator, name="fleetfix-cpumem-v1")
    assert other["outlier"] is False
    assert "fewer than 5" in other["reason"]


def test_a_host_may_post_only_its_own_score_and_small_classes_are_not_judged(client: TestClient, db: Database) -> None:
    refused = client.post(
        "/api/v1/hosts/grid-001/benchmarks", json={"name": HS06, "score": 3.0}, headers=bearer(db, hostname="grid-002")
    )
    assert refused.status_code == 403
    assert "only submit its own benchmark scores" in refused.text
    lone = post(client, "lone-001", 0.5, bearer(db, Role.operator))
    assert (lone["outlier"], lone["n"]) == (False, 1)
    bad = client.post(
        "/api/v1/hosts/grid-001/benchmarks", json={"name": "-x", "score": -1}, headers=bearer(db, Role.operator)
    )
    assert bad.status_code == 422
    assert (
        client.post(
            "/api/v1/hosts/nope/benchmarks", json={"name": HS06, "score": 3.0}, headers=bearer(db, Role.operator)
        ).status_code
        == 404
    )


def test_the_host_page_charts_its_score_against_its_class(client: TestClient, db: Database) -> None:
    operator = bearer(db, Role.operator)
    for i, score in enumerate([*SEED_001, 1.66]):
        post(client, f"grid-{i:03d}", score, operator)
    signed_in(client, db, "vic", Role.viewer)
    page = client.get("/hosts/grid-006").text
    assert "HEP-SPEC06 per core per GHz: grid-opteron, 7 hosts; this host 1.66 (◀)" in page
    assert "1.66 ◀" in page  # the lowest bin is this host's
