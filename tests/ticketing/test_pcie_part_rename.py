"""The `pcie` part type became `pcie_device`: a detection after the deploy finds the ticket opened before it
(review S8; before the fix it found none, and the runner opened a second ticket for the same function)."""

from __future__ import annotations

import datetime as dt

from sqlalchemy.orm import Session

from ticketing import service as tickets
from ticketing.schemas import TicketRequest

NOW = dt.datetime(2026, 6, 1, 9, 0, tzinfo=dt.UTC)


def test_a_pcie_device_detection_finds_the_open_pcie_ticket(session: Session) -> None:
    old = TicketRequest(
        hostname="web-1",
        part_type="pcie",
        part="0000:03:00.0",
        title="PCIe corrected errors on web-1 0000:03:00.0: 150 in a day",
        evidence={"part": {"bdf": "0000:03:00.0"}},
    )
    ticket, created = tickets.open_ticket(session, old, actor="system:remediator", now=NOW)
    assert created
    found = tickets.ticket_for_detection(
        session,
        "web-1",
        "0000:03:00.0",
        part_types={"pcie_device", "host"},
        now=NOW + dt.timedelta(hours=2),
        reopen_window=dt.timedelta(days=1),
    )
    assert found is ticket
    # another part type's ticket is still not matched
    assert (
        tickets.ticket_for_detection(
            session, "web-1", "0000:03:00.0", part_types={"disk"}, now=NOW, reopen_window=dt.timedelta(days=1)
        )
        is None
    )
