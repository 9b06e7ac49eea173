"""Everything from the field is attacker-influenced: hostnames, kernel-log lines and SEL text are rendered
as text on every page that shows them, never as markup."""

from __future__ import annotations

import datetime as dt

from fastapi.testclient import TestClient
from markupsafe import escape

from core.db import Database
from core.models import Role
from remediator.models import Host, HostState, Signal
from tests.builders.tickets import open_dimm_ticket
from tests.web.helpers import signed_in
from ticketing import service as tickets
from ticketing.schemas import TicketRequest

HOSTNAME = '<img src=x onerror="alert(1)">h1'
KERNEL = "<script>alert('kernel')</script>EDAC MC0: 1 CE"
SEL = '</td><td onmouseover="alert(2)">7 | Memory | Correctable ECC'
PART = "<b>DIMM_A1</b>"


def assert_text_not_markup(page: str, raw: str) -> None:
    assert raw not in page, f"{raw!r} reached the page as markup"
    assert str(escape(raw)) in page, f"{raw!r} is not on the page as text"


def test_markup_from_the_field_renders_as_text(client: TestClient, db: Database) -> None:
    # Through the real ingest path: kernel-log lines and SEL text come in the host's report.
    from_report = open_dimm_ticket(db, sel_raw=SEL, kernel_line=KERNEL)
    # Hostnames are checked at ingest, but inventory imports and other trackers are sources too:
    # the pages must not rely on that check.
    now = dt.datetime.now(dt.UTC)
    with db.session() as session:
        host = Host(hostname=HOSTNAME, datacenter="<i>dc</i>", rack="<u>r</u>", state=HostState.awaiting_repair)
        session.add(host)
        session.flush()
        session.add(Signal(host_id=host.id, kind="dimm_ce_rate", subject=PART, value=3.0, observed_at=now))
        ticket, _ = tickets.open_ticket(
            session,
            TicketRequest(
                hostname=HOSTNAME,
                datacenter="<i>dc</i>",
                rack="<u>r</u>",
                part_type="dimm",
                part=PART,
                title=f"Replace {PART} on {HOSTNAME}",
                evidence={
                    "kernel_log": [{"kind": "edac_ce", "lines": [KERNEL]}],
                    "sel": [{"record_id": 1, "sensor_type": "Memory", "event": SEL, "raw": SEL}],
                    "part": {"locator": PART, "serial": "<s>1</s>"},
                    "signals": [{"kind": "dimm_ce_rate", "value": 3.0, "at": now.isoformat()}],
                },
            ),
            actor="test",
        )
        by_hand = ticket.id
    signed_in(client, db, "tom", Role.operator, datacenter="<i>dc</i>")

    report_page = client.get(f"/tickets/{from_report}").text
    assert_text_not_markup(report_page, KERNEL)
    assert_text_not_markup(report_page, SEL)

    pages = {
        "ticket": client.get(f"/tickets/{by_hand}").text,
        "queue": client.get("/queue?datacenter=").text,
        "dashboard": client.get("/").text,
        "host": client.get("/hosts/" + HOSTNAME.replace(" ", "%20").replace('"', "%22")).text,
        "audit": client.get("/audit").text,
    }
    assert "<h1>" in pages["host"]
    for name in ("ticket", "queue", "dashboard", "host"):
        assert_text_not_markup(pages[name], HOSTNAME)
    assert_text_not_markup(pages["ticket"], KERNEL)
    assert_text_not_markup(pages["ticket"], SEL)
    assert_text_not_markup(pages["ticket"], PART)
    assert_text_not_markup(pages["queue"], "<u>r</u>")
    assert_text_not_markup(pages["host"], PART)  # the chart's series name and the timeline
    assert "<script>" not in pages["audit"]
    for name, page in pages.items():
        # Only the vendored script tag; nothing the field sent.
        assert page.count("<script") == 1, name
        assert "onerror=" not in page.replace("onerror=&#34;", ""), name
