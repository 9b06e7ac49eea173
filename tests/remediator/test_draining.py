"""A drained host goes back into its scheduler on every path that returns it to service, and only then."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from core.settings import Settings
from remediator import runner, stopping
from remediator.models import Host, HostState, Remediation, RemediationState, StepState
from tests.builders.remediations import plan
from tests.builders.reports import T0
from ticketing import service as tickets
from ticketing.schemas import TicketRequest


def hooks_into(configured: Settings, calls: Path) -> None:
    configured.scheduler_hooks = {
        "*": {
            action: ["/bin/sh", "-c", f'echo "{action} $0" >> {calls}', "{hostname}"] for action in ("drain", "undrain")
        }
    }


def drained_and_waiting(session: Session, installed: dict[str, Any]) -> tuple[Any, Remediation]:
    """A reboot handed to the host (drained first), its result not back yet."""
    installed["reboot"] = lambda *_: None  # handed over; the host reports back later
    rs, remediation = plan(session, ["reboot"], escalation=[["ticket"]], settle=600)
    runner.advance(session, remediation.id, ruleset=rs, now=T0)
    assert remediation.evidence["drain"]["outcome"] == "succeeded"
    return rs, remediation


def test_a_cancelled_remediation_undrains_its_host(
    session: Session,
    cyborg_installed: dict[str, Any],
    settings: Settings,
    tmp_path: Path,
) -> None:
    calls = tmp_path / "calls"
    hooks_into(settings, calls)
    _, remediation = drained_and_waiting(session, cyborg_installed)
    stopping.stop(session, remediation.id, actor="user:op", reason="wrong host", now=T0)
    # the reboot may still be running on the host: held, and drained, until it says how it ended
    assert calls.read_text().split() == ["drain", "h0"]
    assert session.get_one(Host, remediation.host_id).state == HostState.remediating
    stopping.end_hold(session, remediation, remediation.steps[0], T0, released=True, reason="the host's report")
    assert calls.read_text().split() == ["drain", "h0", "undrain", "h0"]
    assert session.get_one(Host, remediation.host_id).state == HostState.in_service


def test_a_host_a_technician_holds_stays_out_and_drained_when_its_remediation_settles(
    session: Session,
    cyborg_installed: dict[str, Any],
    settings: Settings,
    tmp_path: Path,
) -> None:
    calls = tmp_path / "calls"
    hooks_into(settings, calls)
    rs, remediation = drained_and_waiting(session, cyborg_installed)
    step = remediation.steps[0]
    runner.complete_step(step, {"outcome": "succeeded"}, T0)
    assert step.state == StepState.succeeded
    runner.advance(session, remediation.id, ruleset=rs, now=T0)
    assert remediation.state == RemediationState.verifying
    host = session.get_one(Host, remediation.host_id)
    tickets.open_ticket(
        session,
        TicketRequest(hostname=host.hostname, part_type="psu", part="PSU2", title="PSU2 hums", evidence={}),
        actor="user:tech",
    )
    runner.settle_if_due(session, remediation, T0 + dt.timedelta(seconds=601))
    assert remediation.state == RemediationState.succeeded
    assert host.state == HostState.awaiting_repair
    assert calls.read_text().split() == ["drain", "h0"]  # not undrained while the ticket is open
