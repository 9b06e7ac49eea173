"""Stopping a remediation: the one way an operator ends an active plan (the API's cancel and abort, the
web page's cancel).

Nothing more starts: pending steps are skipped. A step handed over and not reported yet fails as
stopped and no longer waits (no deadline acts on it); its envelope is revoked after the commit
(`revoke`), best-effort, and bounded by its expiry in any case. An action the host already started
finishes there (a reflash cut in the middle is worse than one finished); its report, when it comes,
is kept on the step as `late_report` and moves nothing. The remediation is `cancelled`. The host
goes back in service, and out of the drain this remediation put it in, unless a technician holds it
(an open ticket for the host): then it stays out, and drained, until that repair is verified, as
when a remediation settles. A stop cancels no ticket: a ticket is a person's work, cancelled on its
own (docs/tickets.md); a remediation that opened one has ended already (escalated) and cannot be
stopped.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass

from celery import Celery
from sqlalchemy.orm import Session

from core import audit
from core.errors import Conflict, NotFound
from remediator import draining
from remediator.decisions import finish
from remediator.handoff import locked, stop_waiting
from remediator.models import ACTIVE_REMEDIATION_STATES, Host, HostState, Remediation, RemediationState, StepState
from ticketing import service as tickets

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Stopped:
    remediation: Remediation
    revoke: list[str]
    """Envelope ids of steps that were on their way to the host: revoke them once the stop is committed."""


def stop(session: Session, remediation_id: int, *, actor: str, reason: str, now: dt.datetime) -> Stopped:
    """Stop an active remediation (see the module); 409 (Conflict) if it has ended."""
    remediation = locked(session, remediation_id)
    if remediation is None:
        raise NotFound(f"remediation {remediation_id} does not exist")
    if remediation.state not in ACTIVE_REMEDIATION_STATES:
        raise Conflict(f"remediation {remediation_id} is {remediation.state.value}; only an active one can be stopped")
    revoke = []
    for step in remediation.steps:
        if step.state == StepState.pending:
            step.state = StepState.skipped
            step.result = {"skipped": f"stopped by {actor}"}
        elif step.state == StepState.running:
            result = dict(step.result or {})
            if result.get("envelope_id"):
                revoke.append(str(result["envelope_id"]))
            step.state = StepState.failed
            step.finished_at = now
            step.result = {**result, "error": f"stopped by {actor} while in flight; the host's report is kept"}
            stop_waiting(step)
    finish(session, remediation, RemediationState.cancelled, f"cancelled by {actor}: {reason}", now)
    _release_host(session, remediation, now)
    audit.record(
        session,
        actor=actor,
        action="remediator.remediation.cancel_requested",
        object_type="remediation",
        object_id=remediation_id,
        reason=reason,
        detail={"revoked": revoke},
    )
    session.flush()
    return Stopped(remediation, revoke)


def _release_host(session: Session, remediation: Remediation, now: dt.datetime) -> None:
    host = session.get_one(Host, remediation.host_id)
    if host.state != HostState.remediating:
        return  # this remediation does not hold it (unreachable, in maintenance, …): left as it is
    if tickets.open_tickets_of_host(session, host.hostname):
        host.state = HostState.awaiting_repair  # a technician holds it: out, and drained, until the repair
        return
    host.state = HostState.in_service
    draining.undrain(session, host, remediation, now)


def revoke(app: Celery | None, stopped: Stopped) -> None:
    """After the commit: ask the workers to drop the envelopes not yet started. Best-effort: a broadcast
    that only the workers online hear; the envelope's expiry bounds the rest (docs/cyborg.md)."""
    if not stopped.revoke or app is None:
        return
    try:
        app.control.revoke(stopped.revoke)
    except Exception:  # the stop stands; a host that still runs it sends a report that is kept as late
        log.warning("remediator.abort.revoke_failed", extra={"fields": {"remediation": stopped.remediation.id}})
