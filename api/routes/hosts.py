"""Hosts: list and filter, detail with signals and remediations, inventory import, report interval, benchmark scores."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query
from pydantic import AwareDatetime, BaseModel, Field
from sqlalchemy import select
from sqlalchemy.orm import Session

from api.auth import Forbidden, require
from api.deps import get_ruleset, get_session
from api.pagination import CURSOR_QUERY, Page, paginate
from api.routes.remediations import RemediationView
from core.auth import Principal
from core.db import utcnow
from core.models import Role
from core.vocabulary import REPORT_INTERVAL_MAX_S, REPORT_INTERVAL_MIN_S
from remediator import benchmarks, inventory, operations
from remediator import service as remediator
from remediator.models import Host, HostState
from remediator.rules import RuleSet
from remediator.schemas import HostOut, SignalOut

router = APIRouter(prefix="/hosts", tags=["hosts"])


class HostDetail(HostOut):
    signals: list[SignalOut]
    remediations: list[RemediationView]


class ImportResult(BaseModel):
    created: int
    updated: int


@router.get("", response_model=Page[HostOut])
def list_hosts(
    datacenter: str | None = None,
    rack: str | None = None,
    state: HostState | None = None,
    hardware_class: str | None = None,
    cursor: str | None = CURSOR_QUERY,
    limit: int = Query(100, ge=1, le=1000),
    session: Session = Depends(get_session),
    _: Principal = Depends(require(Role.viewer)),
) -> Page[HostOut]:
    """Hosts in hostname order, filtered by location, state and hardware class."""
    query = select(Host)
    for column, value in (
        (Host.datacenter, datacenter),
        (Host.rack, rack),
        (Host.state, state),
        (Host.hardware_class, hardware_class),
    ):
        if value is not None:
            query = query.where(column == value)
    return paginate(
        session, query, Host.hostname, cursor=cursor, limit=limit, convert=HostOut.model_validate, descending=False
    )


@router.get("/{hostname}", response_model=HostDetail)
def get_host(
    hostname: str, session: Session = Depends(get_session), _: Principal = Depends(require(Role.viewer))
) -> HostDetail:
    host = remediator.get_host(session, hostname)
    return HostDetail(
        **HostOut.model_validate(host).model_dump(),
        signals=[SignalOut.model_validate(s) for s in remediator.host_signals(session, host.id)],
        remediations=[
            RemediationView.model_validate(r) for r in remediator.list_remediations(session, host_id=host.id)
        ],
    )


@router.post("/inventory", response_model=ImportResult)
def import_inventory(
    rows: list[inventory.HostInventory],
    session: Session = Depends(get_session),
    principal: Principal = Depends(require(Role.operator)),
) -> ImportResult:
    """Create or update hosts' location, hardware class and labels."""
    created, updated = inventory.apply_inventory(session, rows, actor=principal.actor)
    session.commit()
    return ImportResult(created=created, updated=updated)


class IntervalChange(BaseModel):
    interval_s: int = Field(
        ge=REPORT_INTERVAL_MIN_S, le=REPORT_INTERVAL_MAX_S, description="Seconds between the agent's check cycles."
    )
    reason: str = Field(min_length=1, max_length=1000)


@router.put("/{hostname}/report-interval", response_model=HostOut)
def set_report_interval(
    hostname: str,
    change: IntervalChange,
    session: Session = Depends(get_session),
    principal: Principal = Depends(require(Role.operator)),
) -> HostOut:
    """Tell a host's agent how often to run its check cycle."""
    host = operations.set_report_interval(
        session, hostname, change.interval_s, actor=principal.actor, reason=change.reason
    )
    session.commit()
    return HostOut.model_validate(host)


class BenchmarkScore(BaseModel):
    """A benchmark score of one host, per core per GHz (the user's own benchmark, e.g. HEP-SPEC06)."""

    name: str = Field(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._+\-]{0,63}$",
        description="The benchmark (and its version): only scores of the same name are compared.",
    )
    score: float = Field(gt=0, allow_inf_nan=False, description="Per core per GHz, higher is faster.")
    unit: str = Field("per core per GHz", max_length=32)
    ran_at: AwareDatetime | None = Field(None, description="When it ran (default: when it is received).")


class BenchmarkResult(BaseModel):
    signal_id: int
    name: str
    score: float
    n: int = Field(description="Hosts of the class with a score of this benchmark, this one included.")
    class_median: float | None
    mad: float | None
    deviations_below_median: float | None = Field(description="Modified z-score (positive: below the median).")
    outlier: bool
    reason: str | None = Field(description="Why there is no judgement (a small class, no hardware class).")


@router.post("/{hostname}/benchmarks", response_model=BenchmarkResult)
def submit_benchmark(
    hostname: str,
    body: BenchmarkScore,
    session: Session = Depends(get_session),
    principal: Principal = Depends(require(Role.operator, hosts=True)),
    ruleset: RuleSet = Depends(get_ruleset),
) -> BenchmarkResult:
    """Record a host's benchmark score and judge it against its hardware class (docs/signals.md)."""
    if principal.is_host and principal.hostname != hostname:
        raise Forbidden(f"{principal.name} may only submit its own benchmark scores, not {hostname}'s")
    host = remediator.get_host(session, hostname)
    now = utcnow()
    detail = {
        "unit": body.unit,
        "ran_at": (body.ran_at or now).isoformat(),
        "source": "api",
        "submitted_by": principal.actor,
    }
    row, verdict = benchmarks.submit_score(
        session, host, body.name, body.score, ruleset=ruleset, now=now, detail=detail
    )
    session.commit()
    return BenchmarkResult(
        signal_id=row.id,
        name=body.name,
        score=body.score,
        n=verdict.n,
        class_median=verdict.median,
        mad=verdict.mad,
        deviations_below_median=verdict.deviations,
        outlier=verdict.deviations is not None and verdict.deviations >= benchmarks.OUTLIER_Z,
        reason=verdict.reason,
    )
