"""The web UI's pages. Everything from the field (hostnames, kernel lines, SEL
text) is rendered through Jinja2's autoescaping, never marked safe."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates
from sqlalchemy.orm import Session

from api.deps import get_session
from remediator import service as remediator
from ticketing import service as tickets

TEMPLATES = Jinja2Templates(directory=Path(__file__).with_name("templates"))
STATIC_DIR = Path(__file__).with_name("static")

router = APIRouter(include_in_schema=False)


@router.get("/", response_class=HTMLResponse)
def dashboard(request: Request, session: Session = Depends(get_session)) -> HTMLResponse:
    hosts = remediator.list_hosts(session, limit=5000)
    by_dc: dict[str, Counter[str]] = {}
    for host in hosts:
        by_dc.setdefault(host.datacenter, Counter())[host.state.value] += 1
    return TEMPLATES.TemplateResponse(
        request,
        "dashboard.html",
        {
            "by_dc": sorted(by_dc.items()),
            "host_count": len(hosts),
            "remediations": remediator.list_remediations(session, limit=20),
            "tickets": tickets.list_tickets(session, open_only=True, limit=50),
            "hostnames": {h.id: h.hostname for h in hosts},
        },
    )


@router.get("/hosts/{hostname}", response_class=HTMLResponse)
def host_page(hostname: str, request: Request, session: Session = Depends(get_session)) -> HTMLResponse:
    host = remediator.get_host(session, hostname)
    return TEMPLATES.TemplateResponse(
        request,
        "host.html",
        {
            "host": host,
            "signals": remediator.host_signals(session, host.id, limit=100),
            "remediations": remediator.list_remediations(session, host_id=host.id),
            "tickets": tickets.list_tickets(session, hostname=host.hostname),
        },
    )


@router.get("/tickets/{ticket_id}", response_class=HTMLResponse)
def ticket_page(ticket_id: int, request: Request, session: Session = Depends(get_session)) -> HTMLResponse:
    return TEMPLATES.TemplateResponse(request, "ticket.html", {"ticket": tickets.get_ticket(session, ticket_id)})
