"""The REST API and pages, over both databases."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from core.db import Database
from core.models import Role
from tests.builders.people import bearer
from tests.builders.reports import T0, edac_report, payload, storm_reports
from tests.builders.runtime import runtime_of


@pytest.fixture
def client(db: Database) -> Iterator[TestClient]:
    """A client with an operator's token: it may submit reports for any host and read everything."""
    app = create_app(runtime_of(db))
    with TestClient(app, headers=bearer(db, Role.operator)) as test_client:
        yield test_client


def post_storm(client: TestClient, hostname: str = "web-001") -> None:
    responses = [client.post("/api/v1/reports", json=payload(r)) for r in storm_reports(hostname)]
    assert [r.status_code for r in responses] == [200, 200, 200], responses[0].text
    assert len(responses[-1].json()["remediations"]) == 1


def test_report_to_ticket_over_http(client: TestClient, db: Database) -> None:
    post_storm(client)
    # The remediation task would run on a worker; run its step here.
    from remediator import runner, service
    from tests.builders.runtime import runtime_of

    for _ in ("drain", "ticket"):
        with db.session() as session:
            [remediation] = service.list_remediations(session)
            runner.advance(session, remediation.id, ruleset=runtime_of(db).remediator.rules.ruleset)
    tickets = client.get("/api/v1/tickets").json()["items"]
    assert [(t["hostname"], t["part_type"], t["state"]) for t in tickets] == [("web-001", "dimm", "open")]
    detail = client.get(f"/api/v1/tickets/{tickets[0]['id']}").json()
    part = detail["evidence"]["part"]
    assert (part["certain"], part["serial"], [c["serial"] for c in part["candidates"]]) == (False, None, ["1A2B3C4D"])
    host = client.get("/api/v1/hosts/web-001").json()
    assert host["state"] == "awaiting_repair"
    assert host["remediations"][0]["state"] == "escalated"
    assert any(s["kind"] == "dimm_ce_rate" and s["value"] == 50.0 for s in host["signals"])
    page = client.get(f"/tickets/{tickets[0]['id']}")
    assert page.status_code == 200
    assert "1A2B3C4D" in page.text
    assert "web-001" in client.get("/").text


def test_malformed_report_gets_422_naming_the_field(client: TestClient) -> None:
    body = payload(edac_report())
    body["captured_at"] = "yesterday"
    response = client.post("/api/v1/reports", json=body)
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "invalid"
    assert "body.captured_at" in error["message"]


def test_batch_stores_good_reports_and_lists_refusals(client: TestClient) -> None:
    bad = payload(edac_report("bad-1"))
    bad["host"]["hostname"] = "<script>"
    response = client.post("/api/v1/reports/batch", json=[payload(edac_report("good-1")), bad])
    assert response.status_code == 200
    result = response.json()
    assert len(result["accepted"]) == 1
    assert result["refused"][0]["index"] == 1
    assert result["refused"][0]["errors"][0].startswith("host.hostname:")
    assert [h["hostname"] for h in client.get("/api/v1/hosts").json()["items"]] == ["good-1"]


def test_a_report_that_cannot_be_stored_fails_alone_and_the_batch_says_which(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The outside review's [good, bad] batch: the bad one used to sink the good one with a 500."""
    from remediator import ingest

    real = ingest.report_digest

    def trips_on_bad(report: object) -> str:
        if report.host.hostname == "bad-2":  # type: ignore[attr-defined]
            raise ValueError("a bug this one report trips")
        return real(report)  # type: ignore[arg-type]

    monkeypatch.setattr(ingest, "report_digest", trips_on_bad)
    good, bad, later = (payload(edac_report(name)) for name in ("good-1", "bad-2", "good-3"))
    response = client.post("/api/v1/reports/batch", json=[good, bad, later])
    assert response.status_code == 200, response.text
    result = response.json()
    assert sorted(result["accepted"]) == sorted([good["report_id"], later["report_id"]])
    (refused,) = result["refused"]
    assert (refused["index"], refused["report_id"]) == (1, bad["report_id"])
    assert refused["errors"] == ["not stored: ValueError: a bug this one report trips"]
    assert sorted(h["hostname"] for h in client.get("/api/v1/hosts").json()["items"]) == ["good-1", "good-3"]


def test_a_nul_in_a_report_is_refused_naming_the_field_and_the_rest_are_stored(client: TestClient) -> None:
    """PostgreSQL's jsonb cannot hold a NUL: the review's report with one broke the batch with a 500."""
    bad = payload(edac_report("nul-2"))
    bad["observations"]["edac"]["controllers"][0]["dimms"][0]["label"] = "DIMM\u0000A1"
    response = client.post("/api/v1/reports/batch", json=[payload(edac_report("good-1")), bad])
    assert response.status_code == 200, response.text
    assert sorted(h["hostname"] for h in client.get("/api/v1/hosts").json()["items"]) == ["good-1"]
    (refused,) = response.json()["refused"]
    assert refused["index"] == 1
    assert refused["errors"] == [
        "observations.edac.controllers.0.dimms.0.label: a NUL character (\\u0000), which the store cannot hold"
    ]
    single = client.post("/api/v1/reports", json=bad)
    assert single.status_code == 422
    assert "body.observations.edac.controllers.0.dimms.0.label" in single.json()["error"]["message"]


def test_not_found_has_the_one_error_shape(client: TestClient) -> None:
    response = client.get("/api/v1/tickets/999999")
    assert response.status_code == 404
    assert response.json() == {
        "error": {"code": "not_found", "message": "ticket 999999 does not exist", "detail": None}
    }
    assert client.get("/api/v1/hosts/nope").json()["error"]["code"] == "not_found"


def test_field_text_is_escaped_in_pages(client: TestClient, db: Database) -> None:
    from ticketing import service as tickets
    from ticketing.schemas import TicketRequest

    with db.session() as session:
        ticket, _ = tickets.open_ticket(
            session,
            TicketRequest(hostname="h1", part_type="dimm", part="<b>A1</b>", title="<script>alert(1)</script>"),
            actor="test",
        )
        ticket_id = ticket.id
    page = client.get(f"/tickets/{ticket_id}").text
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&lt;b&gt;A1&lt;/b&gt;" in page


def test_health_and_openapi(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["checks"]["database"] == "ok"
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/api/v1/tickets", "/api/v1/hosts", "/api/v1/reports", "/api/v1/remediations"} <= set(paths)


def test_report_from_the_future_gets_422(client: TestClient) -> None:
    body = payload(edac_report("skewed-1", at=dt.datetime.now(dt.UTC) + dt.timedelta(days=1)))
    response = client.post("/api/v1/reports", json=body)
    assert response.status_code == 422
    assert response.json()["error"]["message"].startswith("captured_at: ")


def edited(path: str, value: object) -> dict[str, object]:
    body = payload(edac_report("web-001"))
    node = body
    *parents, last = path.split(".")
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]  # type: ignore[index,assignment]
    node[int(last) if isinstance(node, list) else last] = value  # type: ignore[index]
    return body


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        ("observations.edac.controllers.0.ce_count", 2**64, "observations.edac.controllers.0.ce_count"),
        ("captured_at", "0001-01-01T00:00:00+00:00", "captured_at"),
        ("captured_at", 1_700_000_000, "captured_at"),  # a bare number read as 1970 before
        ("observations.edac.controllers.0.ce_count", True, "observations.edac.controllers.0.ce_count"),
        ("interval_s", 60.5, "interval_s"),
        ("observations.edac.poll_msec", "1000", "observations.edac.poll_msec"),
    ],
    ids=["beyond-64-bits", "year-1", "integer-time", "bool-as-count", "float-as-count", "string-as-count"],
)
def test_values_the_domain_does_not_allow_are_422_naming_the_field(
    client: TestClient, path: str, value: object, field: str
) -> None:
    response = client.post("/api/v1/reports", json=edited(path, value))
    assert response.status_code == 422, response.text
    assert f"body.{field}" in response.json()["error"]["message"]


def test_nan_and_infinity_are_refused_not_stored_as_null(client: TestClient) -> None:
    body = edited("observations.edac.controllers", [])
    body["observations"]["disks"] = [{"device": "/dev/sda", "protocol": "ATA", "temperature_c": float("nan")}]
    text = json.dumps(body)  # Python writes NaN as a bare token, as a careless client would
    response = client.post("/api/v1/reports", content=text, headers={"content-type": "application/json"})
    assert response.status_code == 422, response.text
    assert "temperature_c" in response.json()["error"]["message"]


def test_maps_in_a_report_are_bounded(client: TestClient) -> None:
    """The review stored 200k irq_affinity keys, 100k collectors and a 10 MB NVMe firmware string."""
    many = edited("observations.edac.controllers", [])
    many["collectors"] = {f"c{n}": {"status": "ok", "duration_ms": 1.0} for n in range(100)}
    assert client.post("/api/v1/reports", json=many).status_code == 422
    firmware = payload(edac_report("web-001"))
    firmware["observations"]["identity"] = {"firmware": {"nvme": {"nvme0": "x" * 10_000}}}
    response = client.post("/api/v1/reports", json=firmware)
    assert response.status_code == 422, response.text
    assert "nvme" in response.json()["error"]["message"]


def test_a_nul_in_a_query_is_a_bad_request_not_a_500(client: TestClient) -> None:
    response = client.get("/api/v1/hosts?datacenter=a%00b")
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "invalid"


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/tickets/99999999999999999999999",
        "/api/v1/remediations/99999999999999999999999",
        "/api/v1/tickets?cursor=" + "W" * 3000,
    ],
    ids=["ticket-id", "remediation-id", "long-cursor"],
)
def test_ids_and_cursors_past_what_the_store_holds_are_4xx(client: TestClient, path: str) -> None:
    response = client.get(path)
    assert 400 <= response.status_code < 500, (path, response.status_code, response.text)


@pytest.mark.parametrize(
    ("method", "path", "field"),
    [
        ("GET", "/api/v1/tickets/99999999999999999999999", "ticket_id"),
        ("GET", "/api/v1/tickets/9223372036854775808", "ticket_id"),
        ("GET", "/api/v1/tickets/0", "ticket_id"),
        ("POST", "/api/v1/tickets/9223372036854775808/claim", "ticket_id"),
        ("GET", "/api/v1/remediations/99999999999999999999999", "remediation_id"),
        ("POST", "/api/v1/remediations/-1/cancel", "remediation_id"),
    ],
)
def test_a_row_id_out_of_range_is_refused_with_the_parameter_named(
    client: TestClient, method: str, path: str, field: str
) -> None:
    response = client.request(method, path)
    assert response.status_code == 422, response.text
    assert field in response.text


def test_a_cursor_of_nested_brackets_is_a_bad_cursor(client: TestClient) -> None:
    import base64

    nested = base64.urlsafe_b64encode(b'{"k": ' + b"[" * 1400).decode().rstrip("=")  # deeper than json recurses
    assert len(nested) <= 2000
    response = client.get(f"/api/v1/hosts?cursor={nested}")
    assert response.status_code == 422, response.text


def test_a_bmc_clock_at_the_epoch_is_a_time_a_year_one_is_not() -> None:
    from pydantic import ValidationError

    from checker.schemas import SelEntry

    epoch = SelEntry.model_validate({"record_id": 7, "timestamp": "1970-01-01T00:00:07+00:00", "sensor_type": "Fan"})
    assert epoch.timestamp is not None
    with pytest.raises(ValidationError, match="a time between 1970 and 2100"):
        SelEntry.model_validate({"record_id": 7, "timestamp": "0001-01-01T00:00:00+00:00", "sensor_type": "Fan"})


@pytest.mark.parametrize("same_time", [True, False], ids=["same-captured-at", "later"])
def test_a_report_id_of_another_host_is_refused_not_dropped_or_misfiled(
    client: TestClient, db: Database, same_time: bool
) -> None:
    """The review: with a matching captured_at the response said accepted and nothing was stored;
    otherwise GET /reports/{id} returned the other host's row."""
    first = payload(edac_report("web-001"))
    assert client.post("/api/v1/reports", json=first).status_code == 200
    stolen = payload(edac_report("web-002", at=T0 if same_time else T0 + dt.timedelta(minutes=5)))
    stolen["report_id"] = first["report_id"]
    if same_time:
        stolen["captured_at"] = first["captured_at"]
    single = client.post("/api/v1/reports", json=stolen)
    assert single.status_code == 409, single.text
    assert "is a stored report of web-001, not of web-002" in single.json()["error"]["message"]
    batch = client.post("/api/v1/reports/batch", json=[payload(edac_report("web-003")), stolen]).json()
    assert len(batch["accepted"]) == 1
    (refused,) = batch["refused"]
    assert (refused["index"], refused["report_id"]) == (1, first["report_id"])
    stored = client.get(f"/api/v1/reports/{first['report_id']}").json()
    assert stored["body"]["host"]["hostname"] == "web-001"
    # and through the broker's path
    from remediator.ingest import ingest_batch
    from remediator.rules import load_ruleset

    result = ingest_batch([stolen], database=db, ruleset=load_ruleset([]))
    assert [(r.index, r.report_id) for r in result.refused] == [(0, first["report_id"])]
    assert result.accepted == []
