"""The technician's pages: the queue, claiming from it, the ticket page and its resolve form."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from api.runtime import repair_reactions
from checker.schemas import DimmInventory
from core.db import Database
from core.errors import Conflict
from core.models import Role
from remediator import repairs
from tests.builders.people import make_user
from tests.builders.runtime import rewire
from tests.builders.tickets import open_dimm_ticket
from tests.web.helpers import login, signed_in
from ticketing import service as tickets
from ticketing.models import Repair, Ticket, TicketState
from ticketing.schemas import TicketRequest

ROWS = re.compile(r'<tr id="ticket-row-(\d+)"')


@pytest.fixture(autouse=True)
def remediator_reacts(db: Database) -> None:
    """As `fleetfix api` starts: a resolve starts verification (tests/ticketing/conftest.py)."""
    rewire(db, reactions=repair_reactions())


def version_on(page: str) -> str:
    found = re.search(r'name="version" value="(\d+)"', page)
    assert found, "no version field on the page"
    return found.group(1)


def add_ticket(
    db: Database, hostname: str, *, datacenter: str, rack: str, priority: int, part_type: str = "dimm", age_h: float = 0
) -> int:
    created = dt.datetime.now(dt.UTC) - dt.timedelta(hours=age_h)
    request = TicketRequest(
        hostname=hostname,
        datacenter=datacenter,
        rack=rack,
        part_type=part_type,
        part="DIMM_A1",
        title=f"{part_type} on {hostname}",
        priority=priority,
    )
    with db.session() as session:
        ticket, _ = tickets.open_ticket(session, request, actor="test", now=created)
        return ticket.id


def queue_ids(client: TestClient, query: str = "") -> list[int]:
    response = client.get(f"/queue{query}")
    assert response.status_code == 200, response.text
    return [int(i) for i in ROWS.findall(response.text)]


def test_queue_shows_my_datacenter_first_filters_and_sorts(client: TestClient, db: Database) -> None:
    a = add_ticket(db, "ams-1", datacenter="ams1", rack="r1", priority=3, age_h=30)
    b = add_ticket(db, "ams-2", datacenter="ams1", rack="r2", priority=1, age_h=2)
    c = add_ticket(db, "ams-3", datacenter="ams1", rack="r1", priority=3, age_h=5, part_type="disk")
    d = add_ticket(db, "sjc-1", datacenter="sjc2", rack="r1", priority=1, age_h=1)
    signed_in(client, db, "tom", Role.technician, datacenter="ams1")

    # Mine by default, most urgent first, then the one that waited longest.
    assert queue_ids(client) == [b, a, c]
    assert queue_ids(client, "?sort=age") == [a, c, b]
    assert queue_ids(client, "?datacenter=") == [b, d, a, c]  # every datacenter
    assert queue_ids(client, "?datacenter=sjc2") == [d]
    assert queue_ids(client, "?rack=r1") == [a, c]
    assert queue_ids(client, "?part_type=disk") == [c]
    assert queue_ids(client, "?priority=3") == [a, c]
    assert queue_ids(client, "?priority=") == [b, a, c]  # the form's "any"
    assert queue_ids(client, "?age=4h") == [a, c]
    assert queue_ids(client, "?age=1d") == [a]
    bad = client.get("/queue?priority=9")
    assert bad.status_code == 422
    assert "priority" in bad.text


def test_queue_pages_through_many_tickets(client: TestClient, db: Database) -> None:
    made = [add_ticket(db, f"h-{i:03d}", datacenter="ams1", rack="r1", priority=2, age_h=60 - i) for i in range(55)]
    signed_in(client, db, "tom", Role.technician, datacenter="ams1")
    first = client.get("/queue").text
    next_link = re.search(r'href="(/queue\?[^"]+)">Next page', first)
    assert next_link is not None
    second = client.get(next_link.group(1).replace("&amp;", "&")).text
    assert [int(i) for i in ROWS.findall(first) + ROWS.findall(second)] == made
    assert "Next page" not in second


def test_claim_from_the_list_swaps_the_row(client: TestClient, db: Database) -> None:
    ticket_id = open_dimm_ticket(db)
    token = signed_in(client, db, "tom", Role.technician, datacenter="ams1")
    row = client.get("/queue").text
    response = client.post(
        f"/tickets/{ticket_id}/claim",
        data={"version": version_on(row), "back": "/queue"},
        headers={"HX-Request": "true", "HX-Target": f"ticket-row-{ticket_id}", "X-CSRF-Token": token},
    )
    assert response.status_code == 200
    assert response.text.lstrip().startswith(f'<tr id="ticket-row-{ticket_id}"')
    assert "claimed" in response.text
    assert "user:tom" in response.text
    assert f"Ticket {ticket_id} is yours." in response.text
    with db.session() as session:
        ticket = tickets.get_ticket(session, ticket_id)
        assert (ticket.state, ticket.assignee) == (TicketState.claimed, "user:tom")


def test_a_stale_form_is_refused_with_a_message_not_applied(client: TestClient, db: Database) -> None:
    ticket_id = open_dimm_ticket(db)
    token = signed_in(client, db, "tom", Role.technician)
    seen = version_on(client.get(f"/tickets/{ticket_id}").text)
    with db.session() as session:  # meanwhile, an operator hands it to someone else
        tickets.assign(
            session,
            tickets.lock_ticket(session, ticket_id),
            actor="user:olga",
            assignee="user:ann",
            reason="ann is there",
        )
    response = client.post(f"/tickets/{ticket_id}/claim", data={"version": seen, "csrf_token": token})
    assert response.status_code == 412
    assert f"Ticket {ticket_id} was changed by someone else since you opened this page (assigned by user:olga)" in (
        response.text
    )
    assert "Nothing was saved" in response.text
    with db.session() as session:
        assert tickets.get_ticket(session, ticket_id).assignee == "user:ann"
    # Through HTMX the message goes to the page's message area.
    htmx = client.post(
        f"/tickets/{ticket_id}/claim",
        data={"version": seen},
        headers={"HX-Request": "true", "HX-Target": f"ticket-row-{ticket_id}", "X-CSRF-Token": token},
    )
    assert htmx.status_code == 412
    assert htmx.headers["hx-retarget"] == "#messages"
    assert "changed by someone else" in htmx.text


def test_a_viewer_may_look_but_not_claim(client: TestClient, db: Database) -> None:
    ticket_id = open_dimm_ticket(db)
    token = signed_in(client, db, "vic", Role.viewer)
    page = client.get(f"/tickets/{ticket_id}").text
    assert "Claim</button>" not in page
    response = client.post(f"/tickets/{ticket_id}/claim", data={"version": "1", "csrf_token": token})
    assert response.status_code == 403
    assert "user:vic has role viewer; this needs technician" in response.text


def test_ticket_page_says_where_to_go_what_to_replace_and_shows_the_evidence(client: TestClient, db: Database) -> None:
    ticket_id = open_dimm_ticket(
        db,
        sel_raw="7 | 03/01/2026 | Memory #0x53 | Correctable ECC | Asserted",
        kernel_line="EDAC MC0: 1 CE memory read",
    )
    signed_in(client, db, "tom", Role.technician)
    page = client.get(f"/tickets/{ticket_id}").text
    assert "Datacenter <strong>ams1</strong>" in page
    assert "row <strong>r01</strong>" in page
    assert "rack <strong>ams1-r01</strong>" in page
    assert "<strong>U12</strong>" in page
    # The host has no label map for its class: its one DIMM is a candidate, with a warning, not a certainty.
    assert 'id="confirm-slot"' in page
    assert "Confirm the slot before pulling." in page
    assert "EDAC mc0 (socket 0, MC#0) channel 2 slot 0" in page
    candidates = page[page.index('id="dimm-candidates"') :]
    row = "<td>Chan#2_DIMM#0</td><td>NODE 0 CHANNEL 2 DIMM 0</td><td>1A2B3C4D</td><td>M393A4K40CB2-CVF</td>"
    assert row in candidates
    assert 'id="expected-serial"' not in page
    chart = page[page.index("Correctable errors per second") :]
    assert "<svg" in chart
    assert chart.count('<circle class="dot') >= 2  # a rate per report after the first
    assert "7 | 03/01/2026 | Memory #0x53 | Correctable ECC | Asserted" in page
    assert "EDAC MC0: 1 CE memory read" in page
    assert "Remediation " in page[page.index('id="attempts"') :]  # what the remediator tried before
    assert 'id="resolve-form"' not in page  # not before it is claimed


def test_a_dimm_certain_by_its_class_label_map_shows_its_slot_and_serial(client: TestClient, db: Database) -> None:
    """EDAC mc0 channel 2 slot 0 on a compute-skx-2s host is slot A3 (remediator/dimm_labels.yaml)."""
    dimms = [
        DimmInventory(locator=f"A{n}", size_mb=32768, part_number="M393A4K40CB2-CVF", serial=serial)
        for n, serial in ((1, "AAAA0001"), (2, "AAAA0002"), (3, "1A2B3C4D"))
    ]
    ticket_id = open_dimm_ticket(db, hardware_class="compute-skx-2s", dimms=dimms)
    token = signed_in(client, db, "tom", Role.technician)
    page = client.get(f"/tickets/{ticket_id}").text
    assert "DIMM in slot <strong>A3</strong>" in page
    assert '<dd id="expected-serial">1A2B3C4D</dd>' in page
    assert "<dd>label map compute-skx-2s</dd>" in page
    assert "Confirm the slot" not in page
    assert 'id="dimm-candidates"' not in page
    client.post(f"/tickets/{ticket_id}/claim", data={"version": version_on(page), "csrf_token": token})
    assert "(the host reported 1A2B3C4D)" in client.get(f"/tickets/{ticket_id}").text


def test_an_uncertain_dimm_asks_for_a_candidate_serial(client: TestClient, db: Database) -> None:
    """Locators that repeat across sockets, an EDAC label that names none of them: every candidate is listed."""
    dimms = [
        DimmInventory(locator="DIMM_A1", bank_locator=f"P{socket} CHANNEL A", size_mb=32768, serial=f"S{socket}A1")
        for socket in (0, 1)
    ]
    ticket_id = open_dimm_ticket(db, dimms=dimms)
    token = signed_in(client, db, "tom", Role.technician)
    page = client.get(f"/tickets/{ticket_id}").text
    assert "Confirm the slot before pulling." in page
    assert "<td>DIMM_A1</td><td>P0 CHANNEL A</td><td>S0A1</td>" in page
    assert "<td>DIMM_A1</td><td>P1 CHANNEL A</td><td>S1A1</td>" not in page  # socket 0, by the EDAC label
    client.post(f"/tickets/{ticket_id}/claim", data={"version": version_on(page), "csrf_token": token})
    page = client.get(f"/tickets/{ticket_id}").text
    assert "it should be one of the candidates' serials" in page
    assert "the host reported" not in page


def test_resolve_keeps_what_was_typed_when_it_is_wrong_and_records_the_repair(client: TestClient, db: Database) -> None:
    ticket_id = open_dimm_ticket(db)
    token = signed_in(client, db, "tom", Role.technician)
    client.post(
        f"/tickets/{ticket_id}/claim",
        data={"version": version_on(client.get(f"/tickets/{ticket_id}").text), "csrf_token": token},
    )
    page = client.get(f"/tickets/{ticket_id}").text
    assert 'id="resolve-form"' in page
    form = {"csrf_token": token, "version": version_on(page), "old_serial": "1A2B3C4D", "new_serial": "1A2B3C4D"}
    same = client.post(f"/tickets/{ticket_id}/resolve", data={**form, "note": "swapped the DIMM"})
    assert same.status_code == 422
    assert "record the part that went in" in same.text
    assert 'value="1A2B3C4D"' in same.text
    assert "swapped the DIMM</textarea>" in same.text
    no_note = client.post(f"/tickets/{ticket_id}/resolve", data={**form, "new_serial": "9Z8Y7X6W", "note": ""})
    assert no_note.status_code == 422
    assert "Note" in no_note.text
    assert 'value="9Z8Y7X6W"' in no_note.text

    done = client.post(
        f"/tickets/{ticket_id}/resolve",
        data={**form, "new_serial": "9Z8Y7X6W", "note": "swapped the DIMM"},
        follow_redirects=False,
    )
    assert done.status_code == 303, done.text
    page = client.get(done.headers["location"]).text
    assert "resolved: the host is being re-checked" in page
    assert '<span class="state verifying" id="ticket-state">verifying</span>' in page
    with db.session() as session:
        [repair] = session.scalars(select(Repair).where(Repair.ticket_id == ticket_id)).all()
        assert (repair.old_serial, repair.new_serial, repair.replaced_by) == ("1A2B3C4D", "9Z8Y7X6W", "user:tom")
        assert session.get_one(Ticket, ticket_id).state == TicketState.verifying


def test_only_the_assignee_or_an_operator_resolves(client: TestClient, db: Database) -> None:
    ticket_id = open_dimm_ticket(db)
    with db.session() as session:
        tickets.claim(session, tickets.lock_ticket(session, ticket_id), actor="user:ann")
    token = signed_in(client, db, "tom", Role.technician)
    page = client.get(f"/tickets/{ticket_id}").text
    assert 'id="resolve-form"' not in page
    with db.session() as session:
        version = str(tickets.get_ticket(session, ticket_id).version)  # as a hand-made request would say
    form = {"csrf_token": token, "version": version, "old_serial": "A", "new_serial": "B", "note": "n"}
    refused = client.post(f"/tickets/{ticket_id}/resolve", data={**form, "override": "true"})
    assert refused.status_code == 409
    assert "assigned to user:ann" in refused.text

    password = make_user(db, "olga", Role.operator)
    login(client, "olga", password)
    page = client.get(f"/tickets/{ticket_id}").text
    assert "you resolve it as an operator" in page
    token = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)  # type: ignore[union-attr]
    done = client.post(
        f"/tickets/{ticket_id}/resolve", data={**form, "csrf_token": token, "override": "true"}, follow_redirects=False
    )
    assert done.status_code == 303, done.text


def test_a_technician_changes_only_the_tickets_of_their_datacenter(client: TestClient, db: Database) -> None:
    """The outside review's case: a technician of ams1 claimed, started and resolved a fra3 ticket. Another
    datacenter's ticket is read-only to them, in the pages and in the service behind every form."""
    theirs = open_dimm_ticket(db, "fra-001", datacenter="fra3", rack="fra3-r04")
    ours = open_dimm_ticket(db, "ams-001", datacenter="ams1", rack="ams1-r01")
    token = signed_in(client, db, "anna", Role.technician, datacenter="ams1")
    page = client.get(f"/tickets/{theirs}").text
    assert 'id="read-only"' in page
    assert 'id="claim"' not in page
    queue = client.get("/queue?datacenter=").text
    row = re.search(rf'<tr id="ticket-row-{theirs}".*?</tr>', queue, re.S)
    assert row is not None
    assert "Claim</button>" not in row.group(0)
    for action in ("claim", "start", "resolve"):
        form = {"version": "1", "csrf_token": token, "old_serial": "", "new_serial": "", "note": "done"}
        response = client.post(f"/tickets/{theirs}/{action}", data=form)
        assert response.status_code == 403 or "read-only to you" in response.text, (action, response.status_code)
    with db.session() as session:
        ticket = session.get(Ticket, theirs)
        assert ticket is not None
        assert (ticket.state, ticket.assignee) == (TicketState.open, None)
    # their own datacenter's ticket is theirs to work
    claimed = client.post(f"/tickets/{ours}/claim", data={"version": "1", "csrf_token": token})
    assert claimed.status_code in (200, 303), claimed.text
    with db.session() as session:
        ticket = session.get(Ticket, ours)
        assert ticket is not None
        assert ticket.assignee == "user:anna"


def test_a_resolve_whose_verification_cannot_start_is_not_saved(
    client: TestClient, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The remediator's reaction runs in the form's transaction: when it fails, the resolve is rolled back
    with it and the form comes back as typed, never a resolved ticket that nobody re-checks."""
    ticket_id = open_dimm_ticket(db)
    token = signed_in(client, db, "tom", Role.technician)
    client.post(
        f"/tickets/{ticket_id}/claim",
        data={"version": version_on(client.get(f"/tickets/{ticket_id}").text), "csrf_token": token},
    )
    seen = version_on(client.get(f"/tickets/{ticket_id}").text)

    def no_queue(*args: object, **kwargs: object) -> object:
        raise Conflict("host web-001 has no queue to re-check it on")

    monkeypatch.setattr(repairs, "host_signature", no_queue)
    form = {"csrf_token": token, "version": seen, "old_serial": "1A2B3C4D", "new_serial": "9Z8Y7X6W", "note": "swap"}
    refused = client.post(f"/tickets/{ticket_id}/resolve", data=form)
    assert refused.status_code == 409
    assert "has no queue to re-check it on" in refused.text
    assert 'value="9Z8Y7X6W"' in refused.text
    with db.session() as session:
        ticket = tickets.get_ticket(session, ticket_id)
        assert (ticket.state, str(ticket.version), ticket.events[-1].kind) == (TicketState.claimed, seen, "claimed")
        assert session.scalars(select(Repair).where(Repair.ticket_id == ticket_id)).all() == []
