"""One stop path (remediator.stopping): the API's cancel and abort and the web page's cancel all end a plan
the same way — what happens to a step on its host, to a drained host, and to a host a technician holds."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from api.app import create_app
from core.db import Database
from core.models import AuditEntry, Role
from core.settings import Settings, load_settings
from remediator import deadlines, host_results, runner, stopping
from remediator.models import Host, HostState, Remediation, RemediationState, StepState
from tests.api.helpers import bearer
from tests.cyborg.test_handoff import cyborg_installed, plan, result, sent_envelopes, settings  # noqa: F401  (fixtures)
from tests.factories import T0
from tests.test_safety import rule, ruleset
from ticketing import service as tickets
from ticketing.models import Ticket
from ticketing.schemas import TicketRequest


class Control:
    def __init__(self, broker_down: bool) -> None:
        self.broker_down = broker_down
        self.revoked: list[list[str]] = []

    def revoke(self, task_ids: list[str]) -> None:
        if self.broker_down:
            raise OSError("broker down")
        self.revoked.append(list(task_ids))


class Workers:
    """Stands in for the Celery app the API revokes envelopes through."""

    def __init__(self, *, broker_down: bool = False) -> None:
        self.control = Control(broker_down)


@pytest.fixture
def workers() -> Workers:
    return Workers()


@pytest.fixture
def client(db: Database, workers: Workers) -> Iterator[TestClient]:
    app = create_app(load_settings(), db, workers)  # type: ignore[arg-type]
    with TestClient(app, headers=bearer(db, Role.operator)) as test_client:
        yield test_client


def on_its_host(db: Database) -> tuple[int, dict[str, Any]]:
    """A plan whose first step was handed to its host (and not reported yet), its second still pending."""
    with db.session() as session:
        rs, remediation = plan(session, ["tune_error_reporting", "reboot"])
        runner.advance(session, remediation.id, ruleset=rs, now=T0)
        [envelope] = sent_envelopes(session)
        session.commit()
        return remediation.id, envelope


@pytest.mark.parametrize("route", ["cancel", "abort"])
def test_cancel_and_abort_are_one_stop(
    route: str,
    client: TestClient,
    db: Database,
    workers: Workers,
    cyborg_installed: dict[str, Any],  # noqa: F811
) -> None:
    rid, envelope = on_its_host(db)
    url = f"/api/v1/remediations/{rid}"
    etag = client.get(url).headers["ETag"]
    stopped = client.post(f"{url}/{route}", json={"reason": "wrong host"}, headers={"If-Match": etag})
    assert stopped.status_code == 200, stopped.text
    view = stopped.json()
    assert view["state"] == "cancelled"
    assert [(s["state"], s["awaiting"]) for s in view["steps"]] == [("failed", None), ("skipped", None)]
    assert workers.control.revoked == [[envelope["id"]]]  # after the commit: the envelope not started
    with db.session() as session:
        assert session.scalars(select(Host.state)).one() == HostState.in_service
        entry = session.scalars(
            select(AuditEntry).where(AuditEntry.action == "remediator.remediation.cancel_requested")
        ).one()
        assert (entry.actor, entry.reason) == ("token:test-operator", "wrong host")
        assert entry.detail == {"revoked": [envelope["id"]]}
        # the host finished the step it had: its report is kept, and nothing more starts
        rs = ruleset(rule(["tune_error_reporting", "reboot"]))
        assert host_results.record_host_result(session, result(envelope), rs, T0) == "late"
        remediation = session.get_one(Remediation, rid)
        assert remediation.steps[0].result["late_report"]["outcome"] == "succeeded"
        assert runner.advance(session, rid, ruleset=rs, now=T0) == RemediationState.cancelled
    etag = client.get(url).headers["ETag"]
    assert client.post(f"{url}/{route}", json={"reason": "again"}, headers={"If-Match": etag}).status_code == 409


def test_a_stopped_step_is_left_alone_by_the_deadline_sweep(
    session: Session,
    cyborg_installed: dict[str, Any],  # noqa: F811
) -> None:
    rs, remediation = plan(session, ["reboot"], escalation=[["ticket"]])
    runner.advance(session, remediation.id, ruleset=rs, now=T0)
    step = remediation.steps[0]
    due = step.deadline
    assert due is not None
    stopping.stop(session, remediation.id, actor="user:ops", reason="change freeze", now=T0)
    assert (step.state, step.awaiting, step.deadline) == (StepState.failed, None, due)  # the deadline: a record
    assert deadlines.check_deadlines(session, rs, due + dt.timedelta(hours=1)) == 0
    assert session.scalars(select(Remediation)).all() == [remediation]  # no escalation, no ticket
    assert session.scalars(select(Ticket)).all() == []


def test_a_host_a_technician_holds_stays_out_and_drained_when_its_remediation_is_stopped(
    session: Session,
    cyborg_installed: dict[str, Any],  # noqa: F811
    settings: Settings,  # noqa: F811
    tmp_path: Path,
) -> None:
    calls = tmp_path / "calls"
    settings.scheduler_hooks = {
        "*": {a: ["/bin/sh", "-c", f'echo "{a} $0" >> {calls}', "{hostname}"] for a in ("drain", "undrain")}
    }
    rs, remediation = plan(session, ["reboot"], escalation=[["ticket"]])
    runner.advance(session, remediation.id, ruleset=rs, now=T0)  # drained, then handed to the host
    host = session.get_one(Host, remediation.host_id)
    tickets.open_ticket(
        session,
        TicketRequest(hostname=host.hostname, part_type="psu", part="PSU2", title="PSU2 hums", evidence={}),
        actor="user:tech",
    )
    stopped = stopping.stop(session, remediation.id, actor="user:ops", reason="the PSU first", now=T0)
    assert stopped.revoke == [remediation.steps[0].result["envelope_id"]]
    assert remediation.state == RemediationState.cancelled
    assert host.state == HostState.awaiting_repair
    assert host.drained_at is not None
    assert calls.read_text().split() == ["drain", "h0"]  # not undrained: the repair's verification will
    [ticket] = session.scalars(select(Ticket)).all()
    assert ticket.state.value == "open"  # a stop cancels no ticket


def test_a_stopped_remediation_that_drained_its_host_undrains_it(
    session: Session,
    cyborg_installed: dict[str, Any],  # noqa: F811
    settings: Settings,  # noqa: F811
    tmp_path: Path,
) -> None:
    calls = tmp_path / "calls"
    settings.scheduler_hooks = {
        "*": {a: ["/bin/sh", "-c", f'echo "{a} $0" >> {calls}', "{hostname}"] for a in ("drain", "undrain")}
    }
    rs, remediation = plan(session, ["reboot"], escalation=[["ticket"]])
    runner.advance(session, remediation.id, ruleset=rs, now=T0)
    stopping.stop(session, remediation.id, actor="user:ops", reason="wrong host", now=T0)
    host = session.get_one(Host, remediation.host_id)
    assert (host.state, host.drained_at) == (HostState.in_service, None)
    assert calls.read_text().split() == ["drain", "h0", "undrain", "h0"]
    assert remediation.evidence["undrain"]["outcome"] == "succeeded"


def test_a_failed_revoke_leaves_the_stop_standing(caplog: pytest.LogCaptureFixture) -> None:
    stopped = stopping.Stopped(Remediation(id=7), ["e-1"])
    stopping.revoke(Workers(broker_down=True), stopped)  # type: ignore[arg-type]
    assert [r.message for r in caplog.records] == ["remediator.abort.revoke_failed"]
    stopping.revoke(None, stopped)  # no broker (the API without one): nothing to do
