"""The fleet dashboard and a host's page (its timeline of signals, remediations and tickets)."""

from __future__ import annotations

import datetime as dt

from fastapi import APIRouter, Depends, Request, Response
from sqlalchemy.orm import Session

from api.deps import get_ruleset, get_session
from api.web import charts, queries
from api.web.common import PageRoute, page_user, render
from api.web.reporting import reporting_fact
from core.auth import Principal
from core.db import utcnow
from core.models import Role
from remediator import benchmarks, operations, rollout_view
from remediator import service as remediator
from remediator.models import Host, HostState
from ticketing import service as tickets

router = APIRouter(route_class=PageRoute, include_in_schema=False)
HOST_STATES = [state.value for state in HostState]


@router.get("/")
def dashboard(
    request: Request,
    session: Session = Depends(get_session),
    _: Principal = Depends(page_user(Role.viewer)),
) -> Response:
    """Hosts by state per datacenter, what is running, which rules fire, what is paused or tripped, and rates."""
    now = dt.datetime.now(dt.UTC)
    by_dc = queries.hosts_by_state(session)
    active = queries.active_remediations(session)
    rules = operations.rules_with_state(session, get_ruleset(request))
    held_rules = [r for r in rules if r["breaker_open"] or r["mode"] != "active"]
    ce_hours = charts.hourly(queries.ce_rate_samples(session, now - dt.timedelta(hours=24)), end=now, hours=24)
    openings = charts.daily(queries.ticket_openings(session, now - dt.timedelta(days=14)), end=now, days=14)
    open_tickets = tickets.list_tickets(session, open_only=True, limit=20)
    return render(
        request,
        "dashboard.html",
        {
            "by_dc": by_dc,
            "states": HOST_STATES,
            "totals": {state: sum(c[state] for _, c in by_dc) for state in HOST_STATES},
            "host_count": sum(sum(c.values()) for _, c in by_dc),
            "active": active,
            "hostnames": queries.hostnames(session, {r.host_id for r in active}),
            "firing": queries.rules_firing(session, now - dt.timedelta(hours=1)),
            "held_rules": held_rules,
            "rollouts": [r for r in rollout_view.listing(session) if r["state"] != "completed"][:10],
            "pause": operations.global_pause(session),
            "tickets": open_tickets,
            "charts": [
                charts.line_chart(
                    "Fleet correctable-error rate, last 24 h",
                    "CE/s",
                    {"fleet": ce_hours},
                    start=ce_hours[0][0],
                    end=ce_hours[-1][0],
                ),
                charts.bar_chart("Repair tickets opened per day, last 14 days", "tickets", openings),
            ],
        },
    )


@router.get("/hosts/{hostname}")
def host_page(
    hostname: str,
    request: Request,
    session: Session = Depends(get_session),
    _: Principal = Depends(page_user(Role.viewer)),
) -> Response:
    host = remediator.get_host(session, hostname)
    signals = remediator.host_signals(session, host.id, limit=300)
    remediations = remediator.list_remediations(session, host_id=host.id, limit=50)
    rates: dict[str, list[tuple[dt.datetime, float]]] = {}
    for signal in signals:
        if signal.kind == queries.CE_RATE:
            rates.setdefault(signal.subject or "host", []).append((signal.observed_at, signal.value))
    return render(
        request,
        "host.html",
        {
            "host": host,
            "timeline": queries.host_timeline(session, host, signals, remediations),
            "remediations": remediations,
            "tickets": tickets.list_tickets(session, hostname=host.hostname, limit=50),
            "chart": charts.line_chart("Correctable errors per second, by DIMM", "CE/s", rates) if rates else None,
            "benchmark_charts": benchmark_charts(session, host),
            "reporting": reporting_fact(signals),
        },
    )


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
