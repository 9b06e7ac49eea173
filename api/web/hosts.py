"""A host's page (facts, charts, a collapsed timeline) and finding a host by name, serial or rack."""

from __future__ import annotations

import datetime as dt
from typing import Any

from fastapi import APIRouter, Depends, Query, Request, Response
from sqlalchemy import String, cast, or_, select
from sqlalchemy.orm import Session

from api.deps import get_session
from api.web import charts, queries
from api.web.common import PageRoute, page_user, render
from api.web.host_signals import CE_RATE, CHARTED_KINDS, FACT_KINDS, ISOLATED_IRQ, SMART_GROWTH_KINDS, host_facts
from api.web.reporting import reporting_fact
from api.web.timeline import host_timeline, kinds_present, only
from core.auth import Principal
from core.db import utcnow
from core.models import Role
from remediator import benchmarks
from remediator import service as remediator
from remediator.models import Host, Signal
from ticketing import service as tickets

router = APIRouter(route_class=PageRoute, include_in_schema=False)
SEARCH_LIMIT = 50


@router.get("/hosts")
def search(
    request: Request,
    q: str = Query("", max_length=253, description="Part of a hostname, a rack, or a serial."),
    session: Session = Depends(get_session),
    _: Principal = Depends(page_user(Role.viewer)),
) -> Response:
    """Hosts whose name or rack contains the text, or that carry it as a serial (label or part inventory)."""
    found = find_hosts(session, q.strip()) if q.strip() else []
    return render(request, "hosts.html", {"q": q, "hosts": found, "limit": SEARCH_LIMIT})


def find_hosts(session: Session, text: str) -> list[Host]:
    """Name and rack by substring; a serial by substring of the host's labels (an inventory CSV's
    `serial=`) and of its remembered part inventory (Host.memory's `capacity`: DIMM and disk serials).

    The serial match reads those JSON columns as text: a scan, bounded by SEARCH_LIMIT, that is fine for
    a person's search but no query to run per report.
    """
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    pattern = f"%{escaped}%"
    query = (
        select(Host)
        .where(
            or_(
                Host.hostname.ilike(pattern, escape="\\"),
                Host.rack.ilike(pattern, escape="\\"),
                cast(Host.labels, String).ilike(pattern, escape="\\"),
                cast(Host.memory["capacity"], String).ilike(pattern, escape="\\"),
            )
        )
        .order_by(Host.hostname)
        .limit(SEARCH_LIMIT)
    )
    return list(session.scalars(query))


@router.get("/hosts/{hostname}")
def host_page(
    hostname: str,
    request: Request,
    kind: str = Query("", max_length=64, description="Show only timeline lines of this kind."),
    session: Session = Depends(get_session),
    _: Principal = Depends(page_user(Role.viewer)),
) -> Response:
    host = remediator.get_host(session, hostname)
    fact_signals = queries.host_signals(session, host.id, FACT_KINDS)
    charted = queries.host_signals(session, host.id, CHARTED_KINDS, limit=2000)
    others = queries.host_signals(session, host.id, {*FACT_KINDS, *CHARTED_KINDS}, exclude=True)
    remediations = remediator.list_remediations(session, host_id=host.id, limit=50)
    timeline = host_timeline(session, host, [*charted[:500], *others], remediations)
    return render(
        request,
        "host.html",
        {
            "host": host,
            "timeline": only(timeline, kind),
            "timeline_kinds": kinds_present(timeline),
            "timeline_total": len(timeline),
            "kind": kind,
            "facts": host_facts(fact_signals),
            "remediations": remediations,
            "tickets": tickets.list_tickets(session, hostname=host.hostname, limit=50),
            "charts": host_charts(charted),
            "benchmark_charts": benchmark_charts(session, host),
            "reporting": reporting_fact([*fact_signals, *others]),
        },
    )


def host_charts(signals: list[Signal]) -> list[charts.Chart]:
    """The charts this host has data for: CE rate per DIMM, disk defect counters at each growth,
    device IRQs per second on isolated CPUs (the ticket page draws the first for one DIMM)."""
    ce: dict[str, list[tuple[dt.datetime, float]]] = {}
    disks: dict[str, list[tuple[dt.datetime, float]]] = {}
    irqs: dict[str, list[tuple[dt.datetime, float]]] = {}
    for s in signals:
        if s.kind == CE_RATE:
            ce.setdefault(s.subject or "host", []).append((s.observed_at, s.value))
        elif s.kind in SMART_GROWTH_KINDS:
            current: Any = (s.detail or {}).get("current")
            value = float(current) if isinstance(current, int | float) else s.value
            disks.setdefault(f"{s.subject} {SMART_GROWTH_KINDS[s.kind]}", []).append((s.observed_at, value))
        elif s.kind == ISOLATED_IRQ:
            irqs.setdefault(s.subject, []).append((s.observed_at, s.value))
    drawn = []
    if ce:
        drawn.append(charts.line_chart("Correctable errors per second, by DIMM", "CE/s", ce))
    if disks:
        drawn.append(charts.line_chart("Disk defect counters at each growth (SMART, NVMe)", "count", disks))
    if irqs:
        drawn.append(charts.line_chart("Device IRQs per second on isolated CPUs", "IRQ/s", irqs))
    return drawn


def benchmark_charts(session: Session, host: Host) -> list[charts.Chart]:
    """The host's latest score of each benchmark against its hardware class's latest scores (its own included)."""
    kept = ((host.memory or {}).get("benchmark") or {}).get("scores") or {}
    drawn = []
    for name, entry in sorted(kept.items()):
        score = float(entry["score"])
        others = benchmarks.class_scores(session, host.hardware_class, name, utcnow()).scores
        scores = list({**others, host.id: score}.values())
        title = (
            f"{name} per core per GHz: {host.hardware_class}, {len(scores)} hosts; this host {score:g} (◀)"
            if host.hardware_class != benchmarks.UNKNOWN_CLASS
            else f"{name} per core per GHz: this host {score:g} (no hardware class: not compared)"
        )
        drawn.append(charts.bar_chart(title, "hosts", charts.distribution(scores, score)))
    return drawn
