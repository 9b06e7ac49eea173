"""The fleet dashboard (a host's page is api/web/hosts.py)."""

from __future__ import annotations

import datetime as dt

from fastapi import APIRouter, Depends, Request, Response
from sqlalchemy.orm import Session

from api.deps import get_ruleset, get_session
from api.web import charts, queries
from api.web.common import PageRoute, page_user, render
from core.auth import Principal
from core.models import Role
from remediator import operations, rollout_view
from remediator.models import HostState
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
