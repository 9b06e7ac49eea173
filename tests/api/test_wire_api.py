"""Delta reports over HTTP (POST /api/v1/reports/delta), and the agent that sends them (checker.agent.wire_state)."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import delete, select

from api.app import create_app
from checker.agent.config import AgentConfig
from checker.agent.delivery import Delivery
from checker.agent.spool import Spool
from checker.agent.wire_state import WireState
from checker.agent.worker import CheckLoop
from checker.sim import SimulatedFleet
from checker.wire import encode_delta
from core.db import Database
from core.models import Role
from core.queue import create_celery
from remediator.models import Report as ReportRow
from tests.builders.people import bearer
from tests.builders.reports import T0, edac_report, payload
from tests.builders.runtime import runtime_of
from tests.remediator.test_wire import as_whole, redigest

DEAD_BROKER = "redis://127.0.0.1:1/0"  # nothing listens on port 1: delivery falls back to HTTP


@pytest.fixture
def client(db: Database) -> Iterator[TestClient]:
    with TestClient(create_app(runtime_of(db)), headers=bearer(db, Role.operator)) as test_client:
        yield test_client


def stored_ids(db: Database) -> list[uuid.UUID]:
    with db.session() as session:
        return list(session.scalars(select(ReportRow.id).order_by(ReportRow.captured_at)))


def test_a_delta_is_rebuilt_stored_and_evaluated_as_the_full_report(client: TestClient, db: Database) -> None:
    base = edac_report(ce=5, at=T0)
    answer = client.post("/api/v1/reports", json=payload(base)).json()
    assert answer["bases"] == [
        {"hostname": "web-001", "report_id": str(base.report_id), "captured_at": "2026-03-01T12:00:00Z"}
    ]
    report = edac_report(ce=65, at=T0 + dt.timedelta(minutes=1))
    delta = encode_delta(report, base)
    assert "edac" in delta["patched"]  # its counters moved: sent as a patch of the base's
    assert "identity" not in delta["changed"]  # the same as the base's
    response = client.post("/api/v1/reports/delta", json=delta)
    assert response.status_code == 200, response.text
    assert response.json()["accepted"] == [str(report.report_id)]
    assert response.json()["bases"][0]["report_id"] == str(report.report_id)  # a new state: its own row
    stored = client.get(f"/api/v1/reports/{report.report_id}").json()
    assert stored["body"] == payload(report)  # the body as the full report would have been stored


def test_a_delta_on_a_base_the_centre_does_not_hold_is_answered_send_full(client: TestClient, db: Database) -> None:
    base = edac_report(ce=5, at=T0)
    client.post("/api/v1/reports", json=payload(base))
    unknown = base.model_copy(update={"report_id": uuid.uuid4()})
    report = edac_report(ce=65, at=T0 + dt.timedelta(minutes=1))
    response = client.post("/api/v1/reports/delta", json=encode_delta(report, unknown))
    assert response.status_code == 409
    error = response.json()["error"]
    assert error["code"] == "send_full"
    assert error["message"].startswith(
        f"the base report {unknown.report_id} of 2026-03-01T12:00:00+00:00 is not stored"
    )
    assert stored_ids(db) == [base.report_id]


def test_a_malformed_delta_gets_422_naming_section_and_field(client: TestClient) -> None:
    base = edac_report(ce=5, at=T0)
    client.post("/api/v1/reports", json=payload(base))
    delta = encode_delta(edac_report(ce=65, at=T0 + dt.timedelta(minutes=1)), base)
    delta["changed"]["bogus"] = {}
    response = client.post("/api/v1/reports/delta", json=delta)
    assert response.status_code == 422
    assert "unknown sections ['bogus']" in response.json()["error"]["message"]


def test_a_changed_section_that_does_not_validate_gets_422_naming_it(client: TestClient, db: Database) -> None:
    base = edac_report(ce=5, at=T0)
    client.post("/api/v1/reports", json=payload(base))
    report = edac_report(ce=65, at=T0 + dt.timedelta(minutes=1))
    delta = as_whole(encode_delta(report, base), report, "edac")
    delta["changed"]["edac"]["controllers"][0]["ce_count"] = -1
    delta["digest"] = redigest(delta, base)  # only the value is wrong, not the digests
    response = client.post("/api/v1/reports/delta", json=delta)
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["message"].startswith("changed.edac.controllers.0.ce_count: Input should be greater than or equal")
    assert error["detail"][0]["field"] == "changed.edac.controllers.0.ce_count"
    assert stored_ids(db) == [base.report_id]


def test_a_patch_that_does_not_fit_its_base_gets_422_naming_where(client: TestClient, db: Database) -> None:
    base = edac_report(ce=100000, at=T0)
    client.post("/api/v1/reports", json=payload(base))
    delta = encode_delta(edac_report(ce=100005, at=T0 + dt.timedelta(minutes=1)), base)
    assert "edac" in delta["patched"]
    delta["patched"]["edac"] = {"a": {"controllers/0/dimms/5/ce_count": 5}}
    response = client.post("/api/v1/reports/delta", json=delta)
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["message"] == "patched.edac.controllers.0.dimms: index 5 is beyond the array's 2 items"
    assert error["detail"][0]["field"] == "patched.edac.controllers.0.dimms"
    assert stored_ids(db) == [base.report_id]


def test_an_operator_delta_naming_another_hosts_base_is_answered_send_full(client: TestClient, db: Database) -> None:
    # web-002's stored report says what web-001's says, section for section: only the base lookup's host filter
    # keeps web-001's delta off it
    theirs = edac_report("web-002", ce=5, at=T0)
    client.post("/api/v1/reports", json=payload(edac_report("web-001", ce=5, at=T0)))
    client.post("/api/v1/reports", json=payload(theirs))
    delta = encode_delta(edac_report("web-001", ce=5, at=T0 + dt.timedelta(minutes=1)), theirs)
    response = client.post("/api/v1/reports/delta", json=delta)  # the client's operator token may send for any host
    assert response.status_code == 409, response.text
    assert response.json()["error"]["code"] == "send_full"
    assert f"the base report {theirs.report_id}" in response.json()["error"]["message"]


def test_a_host_credential_may_not_send_another_hosts_delta(client: TestClient, db: Database) -> None:
    base = edac_report("web-002", ce=5, at=T0)
    client.post("/api/v1/reports", json=payload(base))
    delta = encode_delta(edac_report("web-002", ce=6, at=T0 + dt.timedelta(minutes=1)), base)
    response = client.post("/api/v1/reports/delta", json=delta, headers=bearer(db, hostname="web-001"))
    assert response.status_code == 403


class Recorder:
    """httpx.Client as the agent's delivery opens it, served by the app in process; it notes each POST's path."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.paths: list[str] = []

    def __call__(self, **options: Any) -> TestClient:
        recorder = self

        class Client(TestClient):
            def post(self, url: Any, **kwargs: Any) -> httpx.Response:
                recorder.paths.append(httpx.URL(str(url)).path)
                response: httpx.Response = super().post(url, **kwargs)
                return response

        return Client(self.app, headers=options.get("headers"))


def test_the_agent_sends_deltas_once_named_a_base_and_full_when_asked(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorder = Recorder(create_app(runtime_of(db)))
    monkeypatch.setattr(httpx, "Client", recorder)
    host = SimulatedFleet(1, seed=2, fault_fraction=0).hosts[0]
    token = bearer(db, hostname=host.hostname)["Authorization"].removeprefix("Bearer ")
    config = AgentConfig(
        state_dir=tmp_path / "state",
        fallback_url="http://testserver",
        token=token,
        benchmark_window="",
        full_report_every=4,
        delta_reports=True,  # off by default in stage 1
    )
    loop = CheckLoop(create_celery(DEAD_BROKER, make_current=False), host.hostname, 60, config, simulated=host)
    try:
        sent = [loop.once() for _ in range(3)]
        assert recorder.paths == ["/api/v1/reports", "/api/v1/reports/delta", "/api/v1/reports/delta"]
        # the centre loses the host's state (its rows pruned): the next delta is answered "send full", and the
        # same report goes whole at once
        with db.session() as session:
            session.execute(delete(ReportRow))
        sent.append(loop.once())
        assert recorder.paths[3:] == ["/api/v1/reports/delta", "/api/v1/reports"]
        assert stored_ids(db) == [sent[3]]
        sent += [loop.once() for _ in range(4)]  # deltas again; the fourth since the full one goes whole
        assert recorder.paths[5:] == ["/api/v1/reports/delta"] * 3 + ["/api/v1/reports"]
    finally:
        loop.stop()
    with db.session() as session:
        last = session.scalars(select(ReportRow.body).order_by(ReportRow.captured_at.desc())).first()
    assert last is not None
    assert (tmp_path / "state" / "wire_base.json").exists()  # the acknowledged base, for after a restart


def agent_with_a_base(monkeypatch: pytest.MonkeyPatch, statuses: dict[str, int], spool: Spool | None) -> Any:
    """A Delivery without a broker whose HTTP answers come from `statuses` (path to status; 200 answers name the
    report as the base); the wire state holds a base already. Returns (delivery, wire, the paths POSTed)."""
    paths: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        paths.append(request.url.path)
        status = statuses[request.url.path]
        if status == 200:
            body = orjson.loads(request.content)
            base = {"hostname": "web-001", "report_id": body["report_id"], "captured_at": body["captured_at"]}
            return httpx.Response(200, json={"accepted": [body["report_id"]], "bases": [base]})
        return httpx.Response(status, json={"error": {"code": "x", "message": f"HTTP {status}"}})

    real = httpx.Client
    monkeypatch.setattr(httpx, "Client", lambda **kw: real(transport=httpx.MockTransport(answer), **kw))
    wire = WireState("web-001", path=None)
    delivery = Delivery(create_celery(DEAD_BROKER, make_current=False), spool=spool, fallback_url="http://c", wire=wire)
    monkeypatch.setattr(delivery, "_broker", lambda payloads: False)
    base = edac_report(ce=5, at=T0)
    statuses_then = dict(statuses)
    statuses.update({"/api/v1/reports": 200})
    assert delivery.deliver(payload(base), base) == "http"  # first cycle: whole, named as the base
    wire.finish()
    statuses.clear()
    statuses.update(statuses_then)
    paths.clear()
    assert wire.base is not None
    return delivery, wire, paths


@pytest.mark.parametrize("status", [500, 502, 503, 429])
def test_an_outage_answering_the_delta_spools_the_report_and_keeps_the_base(
    status: int, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    spool = Spool(tmp_path / "spool", max_reports=10)
    statuses = {"/api/v1/reports/delta": status, "/api/v1/reports": status}
    delivery, wire, paths = agent_with_a_base(monkeypatch, statuses, spool)
    base = wire.base
    report = edac_report(ce=6, at=T0 + dt.timedelta(minutes=1))
    assert delivery.deliver(payload(report), report) == "spool"
    assert paths == ["/api/v1/reports/delta"]  # one POST, not the whole report at once as well
    assert wire.base == base
    assert wire.refusals == 0


@pytest.mark.parametrize("status", [401, 403, 404, 405, 409, 410, 422])
def test_a_delta_the_centre_or_a_proxy_refuses_is_followed_by_the_whole_report(
    status: int, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spool = Spool(tmp_path / "spool", max_reports=10)
    statuses = {"/api/v1/reports/delta": status, "/api/v1/reports": 200}
    delivery, wire, paths = agent_with_a_base(monkeypatch, statuses, spool)
    report = edac_report(ce=6, at=T0 + dt.timedelta(minutes=1))
    assert delivery.deliver(payload(report), report) == "http"  # delivered this cycle, not spooled
    assert paths == ["/api/v1/reports/delta", "/api/v1/reports"]
    assert "checker.report.unauthorized" not in caplog.text  # only the full POST's 401/403 is the credential's
    assert wire.base is not None
    assert wire.base.report_id == report.report_id  # the whole report, named
    assert not spool.files()


def test_a_proxy_without_the_route_costs_three_extra_posts_then_none_for_an_hour(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    statuses = {"/api/v1/reports/delta": 404, "/api/v1/reports": 200}
    delivery, wire, paths = agent_with_a_base(monkeypatch, statuses, None)
    for minute in range(1, 11):
        report = edac_report(ce=minute, at=T0 + dt.timedelta(minutes=minute))
        assert delivery.deliver(payload(report), report) == "http"
        wire.finish()
    assert paths == ["/api/v1/reports/delta", "/api/v1/reports"] * 3 + ["/api/v1/reports"] * 7
