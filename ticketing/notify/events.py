"""Which audited changes become alerts, and the outbox listener that records them.

Every alerting change is already written to the audit log in the transaction
that makes it; the listener adds an outbox row beside the entry, in the same
transaction, so writing an alert costs the change one INSERT and no I/O.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from sqlalchemy import Executable, String, cast, select
from sqlalchemy.orm import Session

from core.audit import AuditListener
from core.db import service_of
from core.models import AuditEntry
from core.vocabulary import AlertKind, AlertSeverity
from ticketing.models import Ticket
from ticketing.notify.models import AlertOutbox
from ticketing.settings import TicketingSettings

log = logging.getLogger(__name__)

ACTIONS: dict[str, AlertKind] = {
    "ticketing.ticket.opened": AlertKind.ticket_opened,
    # the fault came back after the repair (or verification failed): the part needs a person again,
    # as urgently as when it was first ticketed; the summary says why it reopened
    "ticketing.ticket.reopened": AlertKind.ticket_opened,
    "remediator.remediation.failed": AlertKind.remediation_failed,
    "remediator.remediation.escalated": AlertKind.remediation_escalated,
    "remediator.rule.breaker_opened": AlertKind.rule_paused,
    "remediator.remediation.awaiting_approval": AlertKind.approval_waiting,
    "remediator.host.unreachable": AlertKind.host_unreachable,
}
"""Audit actions that alert, and the alert each one is."""

SEVERITY: dict[AlertKind, AlertSeverity] = {
    AlertKind.ticket_opened: AlertSeverity.warning,  # by priority, see severity_of
    AlertKind.remediation_failed: AlertSeverity.warning,
    AlertKind.remediation_escalated: AlertSeverity.warning,
    AlertKind.rule_paused: AlertSeverity.critical,  # automation stopped for a whole rule
    AlertKind.approval_waiting: AlertSeverity.warning,
    AlertKind.host_unreachable: AlertSeverity.warning,
}


@dataclass(frozen=True)
class Subject:
    """Where the thing an alert is about lives, for routing and links."""

    hostname: str = ""
    datacenter: str = ""
    priority: int | None = None


SubjectQuery = Callable[[list[str]], Executable]
"""Builds a SELECT of (object_id as text, hostname, datacenter[, ticket priority]) rows for some object ids."""


def _ticket_subjects(ids: list[str]) -> Executable:
    return select(cast(Ticket.id, String), Ticket.hostname, Ticket.datacenter, Ticket.priority).where(
        Ticket.id.in_([int(i) for i in ids if i.isdigit()])
    )


class Subjects:
    """Where the objects alerts are about live, by object type: tickets here; the other stages' (hosts,
    remediations) handed in by the process's root (ticketing may not import them), which gives the
    result to its Database (`Database.provide(Subjects, ...)`)."""

    def __init__(self, queries: dict[str, SubjectQuery] | None = None) -> None:
        self.queries: dict[str, SubjectQuery] = {"ticket": _ticket_subjects, **(queries or {})}

    def get(self, object_type: str) -> SubjectQuery | None:
        return self.queries.get(object_type)


def locate(session: Session, refs: Iterable[tuple[str, str]]) -> dict[tuple[str, str], Subject]:
    """The subjects of (object_type, object_id) pairs, one query per type; unknown ones are left out
    (as are all but tickets in a session whose runtime handed no Subjects in)."""
    subjects = service_of(session, Subjects) or Subjects()
    wanted: dict[str, set[str]] = {}
    for object_type, object_id in refs:
        wanted.setdefault(object_type, set()).add(object_id)
    found: dict[tuple[str, str], Subject] = {}
    for object_type, ids in wanted.items():
        query = subjects.get(object_type)
        if query is None:
            continue
        for row in session.execute(query(sorted(ids))):
            values = tuple(row)
            priority = values[3] if len(values) > 3 else None
            found[(object_type, str(values[0]))] = Subject(values[1] or "", values[2] or "", priority)
    return found


def severity_of(kind: AlertKind, subject: Subject) -> AlertSeverity:
    if kind == AlertKind.ticket_opened and subject.priority is not None:
        # ticket priority 1 highest … 5 lowest
        if subject.priority <= 2:
            return AlertSeverity.critical
        return AlertSeverity.warning if subject.priority == 3 else AlertSeverity.info
    return SEVERITY[kind]


def record_alert(session: Session, entry: AuditEntry) -> None:
    """The audit listener: an outbox row for an entry that alerts (added, flushed with the change)."""
    kind = ACTIONS.get(entry.action)
    if kind is None:
        return
    session.add(
        AlertOutbox(
            kind=kind,
            object_type=entry.object_type[:64],
            object_id=entry.object_id[:253],
            actor=entry.actor[:128],
            summary=entry.reason[:2000],
            detail=entry.detail or {},
        )
    )


def audit_listeners(settings: TicketingSettings) -> tuple[AuditListener, ...]:
    """The outbox's audit listener while alerts are on; none while they are off (the root installs them)."""
    return () if settings.alerts_mode == "off" else (record_alert,)
