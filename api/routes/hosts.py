"""Hosts: list, detail with signals and remediations, inventory import."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, Field
from sqlalchemy.orm import Session

from api.deps import get_session
from remediator import inventory
from remediator import service as remediator
from remediator.schemas import HostOut, RemediationOut, SignalOut

router = APIRouter(prefix="/hosts", tags=["hosts"])


class HostDetail(HostOut):
    signals: list[SignalOut]
    remediations: list[RemediationOut]


class ImportResult(BaseModel):
    created: int
    updated: int


@router.get("", response_model=list[HostOut])
def list_hosts(
    datacenter: str | None = None,
    limit: int = Query(500, ge=1, le=5000),
    session: Session = Depends(get_session),
) -> list[HostOut]:
    return [HostOut.model_validate(h) for h in remediator.list_hosts(session, datacenter=datacenter, limit=limit)]


@router.get("/{hostname}", response_model=HostDetail)
def get_host(hostname: str, session: Session = Depends(get_session)) -> HostDetail:
    host = remediator.get_host(session, hostname)
    return HostDetail(
        **HostOut.model_validate(host).model_dump(),
        signals=[SignalOut.model_validate(s) for s in remediator.host_signals(session, host.id)],
        remediations=[RemediationOut.model_validate(r) for r in remediator.list_remediations(session, host_id=host.id)],
    )


@router.post("/inventory", response_model=ImportResult)
def import_inventory(rows: list[inventory.HostInventory], session: Session = Depends(get_session)) -> ImportResult:
    created, updated = inventory.apply_inventory(session, rows, actor="api")
    session.commit()
    return ImportResult(created=created, updated=updated)


class IntervalChange(BaseModel):
    interval_s: int = Field(ge=5, le=3600, description="Seconds between the agent's check cycles.")
    reason: str = Field(min_length=1, max_length=1000)


@router.put("/{hostname}/report-interval", response_model=HostOut)
def set_report_interval(hostname: str, change: IntervalChange, session: Session = Depends(get_session)) -> HostOut:
    """Tell a host's agent how often to run its check cycle."""
    from remediator import operations

    host = operations.set_report_interval(session, hostname, change.interval_s, actor="api", reason=change.reason)
    session.commit()
    return HostOut.model_validate(host)
