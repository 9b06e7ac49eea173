"""The remediator's reads: hosts, their signals and their remediations.

The evidence bundle handed to tickets is remediator.evidence; ingest is in remediator.ingest,
decisions and admission in remediator.planning, running a plan in remediator.runner. Services
flush; the task or request that calls them owns the transaction.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from core.errors import NotFound
from remediator.models import Host, Remediation, Signal


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
