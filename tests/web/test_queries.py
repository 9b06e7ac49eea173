"""The web pages' own queries."""

from __future__ import annotations

from sqlalchemy.orm import Session

from api.web import queries
from ticketing import service as tickets
from ticketing.schemas import TicketRequest


def test_the_queue_offers_every_part_type_once_in_order(session: Session) -> None:
    assert queries.ticket_part_types(session) == []
    for index, part_type in enumerate(["psu", "disk", "dimm", "disk", "nic"]):
        request = TicketRequest(
            hostname=f"web-{index}", datacenter="ams1", part_type=part_type, part=f"P{index}", title="t", priority=2
        )
        tickets.open_ticket(session, request, actor="test")
    session.flush()
    assert queries.ticket_part_types(session) == ["dimm", "disk", "nic", "psu"]
