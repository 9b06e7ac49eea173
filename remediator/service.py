"""The remediator's reads and the evidence it hands to tickets.

Ingest is in remediator.ingest, decisions and admission in remediator.planning,
running a plan in remediator.runner. Services flush; the task or request that
calls them owns the transaction.
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from core.errors import NotFound
from remediator.models import (
    Host,
    Remediation,
    Signal,
)
from remediator.models import Report as ReportRow

log = logging.getLogger(__name__)
SYSTEM = "system:remediator"


# -- evidence ---------------------------------------------------------------------


def evidence_bundle(session: Session, host: Host, remediation: Remediation) -> dict[str, Any]:
    """What the technician needs, frozen when the ticket opens."""
    recent = session.scalars(
        select(Signal)
        .where(Signal.host_id == host.id, Signal.subject == remediation.subject)
        .order_by(Signal.observed_at.desc())
        .limit(50)
    ).all()
    latest = session.scalars(
        select(ReportRow).where(ReportRow.host_id == host.id).order_by(ReportRow.captured_at.desc()).limit(1)
    ).one_or_none()
    part: dict[str, Any] | None = None
    if latest is not None:
        dimms = ((latest.body.get("observations") or {}).get("identity") or {}).get("dimms") or []
        part = next((d for d in dimms if d.get("locator") and d["locator"] in remediation.subject), None)
    return {
        "location": {
            "datacenter": host.datacenter,
            "row": host.row,
            "rack": host.rack,
            "slot": host.slot,
            "hardware_class": host.hardware_class,
        },
        "part": part,
        "reason": remediation.reason,
        "rule": remediation.rule_id,
        "signals": [
            {"kind": s.kind, "value": s.value, "at": s.observed_at.isoformat(), "detail": s.detail} for s in recent
        ],
    }


# -- reads ------------------------------------------------------------------------


def list_hosts(session: Session, *, datacenter: str | None = None, limit: int = 500) -> list[Host]:
    query = select(Host).order_by(Host.hostname).limit(limit)
    if datacenter:
        query = query.where(Host.datacenter == datacenter)
    return list(session.scalars(query))


def get_host(session: Session, hostname: str) -> Host:
    host = session.scalars(select(Host).where(Host.hostname == hostname)).one_or_none()
    if host is None:
        raise NotFound(f"host {hostname!r} is not known")
    return host


def host_signals(session: Session, host_id: int, *, limit: int = 200) -> list[Signal]:
    return list(
        session.scalars(
            select(Signal).where(Signal.host_id == host_id).order_by(Signal.observed_at.desc()).limit(limit)
        )
    )


def list_remediations(session: Session, *, host_id: int | None = None, limit: int = 100) -> list[Remediation]:
    query = select(Remediation).options(selectinload(Remediation.steps)).order_by(Remediation.id.desc()).limit(limit)
    if host_id is not None:
        query = query.where(Remediation.host_id == host_id)
    return list(session.scalars(query))
