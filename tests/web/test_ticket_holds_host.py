"""The ticket page says whether the ticket holds its host out of service (docs/ui.md, docs/tickets.md)."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient

from core.db import Database
from core.models import Role
from tests.web.helpers import signed_in
from ticketing import service as tickets
from ticketing.schemas import TicketRequest

HOLDS = re.compile(r'<p id="holds-host"[^>]*>([^<]*)</p>')


def opened(db: Database, part_type: str, *, holds_host: bool) -> int:
    request = TicketRequest(
        hostname="web-1", part_type=part_type, part="x", title=f"{part_type} on web-1", holds_host=holds_host
    )
    with db.session() as session:
        ticket, _ = tickets.open_ticket(session, request, actor="test")
        return ticket.id


def test_the_ticket_page_says_whether_the_host_is_held(client: TestClient, db: Database) -> None:
    dimm = opened(db, "dimm", holds_host=True)
    for_class = opened(db, "hardware_class", holds_host=False)
    signed_in(client, db, "vic", Role.viewer)
    [held] = HOLDS.findall(client.get(f"/tickets/{dimm}").text)
    assert held.startswith("Holds the host out of service")
    [working] = HOLDS.findall(client.get(f"/tickets/{for_class}").text)
    assert working.startswith("Host stays in service: this ticket is for the owners of its hardware class")
