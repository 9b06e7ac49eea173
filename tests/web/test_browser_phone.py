"""In real headless Chromium (issue 18): on a phone (390x844) a technician finds a host by its rack, reads
its facts and collapsed timeline and filters it, uses the queue as cards and filters it from the keyboard,
and comments on a ticket; an operator reassigns one ticket and cancels another, then finds both in the
audit log. Nothing on the queue, host or ticket page runs off the phone's screen; every step is
screenshotted to the test's tmp_path (`…/screenshots/*.png`, printed with -s), as test_browser.py does.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from core.db import Database
from core.models import Role
from remediator.models import Decision, Host, Remediation, RemediationState, RemediationStep, Signal
from tests.builders.people import make_user
from tests.builders.tickets import open_dimm_ticket
from tests.web.test_browser import Shots, browser, database, server, sign_in  # noqa: F401  (fixtures)

TIMES = "\N{MULTIPLICATION SIGN}"  # the timeline's repeat count
PHONE = {"width": 390, "height": 844}  # a 6.1" phone held upright, CSS pixels

pytestmark = pytest.mark.browser


def fits(page: object, name: str, *, whole: bool) -> None:
    """The page never scrolls sideways (the issue's check); with `whole`, no element of main reaches past
    the screen either, so nothing is cut off inside a box that scrolls on its own (the queue's old table)."""
    from playwright.sync_api import Page

    assert isinstance(page, Page)
    width = page.evaluate("document.scrollingElement.scrollWidth")
    inner = page.evaluate("window.innerWidth")
    assert width <= inner, f"{name}: the page is {width}px wide on a {inner}px phone"
    if whole:
        past = page.evaluate(
            """() => [...document.querySelectorAll('main *')]
                .filter(e => e.getClientRects().length && e.getBoundingClientRect().width > 0)
                .filter(e => e.getBoundingClientRect().right > window.innerWidth + 1)
                .map(e => e.tagName + (e.id ? '#' + e.id : '') + ' ' + (e.textContent || '').trim().slice(0, 40))"""
        )
        assert past == [], f"{name}: cut off on a phone: {past[:5]}"


def _noisy_host(db: Database, hostname: str) -> None:
    """The host reports every 5 s: the EDAC poll interval each time, and the same SEL fill level."""
    now = dt.datetime.now(dt.UTC)
    with db.session() as session:
        host = session.query(Host).filter_by(hostname=hostname).one()
        host.report_interval_s = 5
        for i in range(40):
            at = now - dt.timedelta(seconds=5 * (40 - i))
            session.add(
                Signal(
                    host_id=host.id,
                    kind="edac_poll_interval",
                    subject="edac",
                    value=37.0,
                    detail={"poll_msec": 37000},
                    observed_at=at,
                )
            )
            session.add(Signal(host_id=host.id, kind="sel_full", subject="sel", value=95.0, observed_at=at))


def test_phone_technician_and_operator_use_the_new_ui(
    database: Database,  # noqa: F811
    server: str,  # noqa: F811
    browser: object,  # noqa: F811
    tmp_path: Path,
) -> None:
    from playwright.sync_api import Browser, expect

    assert isinstance(browser, Browser)
    ticket_id = open_dimm_ticket(database, "web-031", rack="ams1-r42")
    second_id = open_dimm_ticket(database, "web-032", rack="ams1-r43")
    _noisy_host(database, "web-031")
    tech_password = make_user(database, "tom", Role.technician, datacenter="ams1")
    operator_password = make_user(database, "olga", Role.operator)
    shots = Shots(tmp_path / "screenshots")
    context = browser.new_context(viewport=PHONE, device_scale_factor=2, is_mobile=True, has_touch=True)
    page = context.new_page()
    sign_in(page, server, "tom", tech_password)

    # The queue as cards: every card's part and Claim button on screen.
    page.click("nav >> text=Tickets")
    shots.take(page, "phone-queue", "Repair tickets in ams1", "web-031", "web-032", "Claim")
    fits(page, "queue", whole=True)
    card = page.locator(f"#ticket-row-{ticket_id}")
    part = card.locator("td.long").bounding_box()
    assert part is not None
    assert part["x"] >= 0
    assert part["x"] + part["width"] <= PHONE["width"], part
    assert card.evaluate("e => getComputedStyle(e).display") == "block"  # a card, not a table row
    # Keyboard: sort by age from the select, with no mouse (HTMX swaps the list and keeps the URL).
    page.focus("select[name=sort]")
    page.keyboard.press("ArrowDown")
    page.wait_for_url("**/queue?*sort=age*")
    page.focus("select[name=state]")
    page.keyboard.press("End")  # the last state: cancelled
    page.wait_for_url("**state=cancelled*")
    expect(page.locator("#queue")).to_contain_text("No tickets match.")
    shots.take(page, "phone-queue-filtered", "No tickets match.")

    # Find the host by its rack, from the navigation.
    page.click("nav >> text=Hosts")
    page.fill("input[name=q]", "ams1-r42")
    page.keyboard.press("Enter")
    page.wait_for_url("**/hosts?q=ams1-r42")
    shots.take(page, "phone-host-search", "web-031")
    assert page.locator("#host-results li").count() == 1
    page.click("#host-results a")
    page.wait_for_url(f"{server}/hosts/web-031")
    shots.take(page, "phone-host", "Facts", "edac_poll_interval", "Timeline", "sel_full 95", f"{TIMES}40")
    fits(page, "host", whole=True)
    assert "edac_poll_interval" not in page.locator("#timeline").inner_text()
    assert page.locator("#timeline li.signal", has_text="sel_full").count() == 1  # 40 reports, one line
    page.select_option("#timeline-filter select[name=kind]", "ticket")
    page.click("#timeline-filter button")
    page.wait_for_url("**/hosts/web-031?kind=ticket")
    expect(page.locator("#timeline li.signal")).to_have_count(0)
    shots.take(page, "phone-host-tickets-only", f"ticket {ticket_id} opened by system:remediator")

    # The ticket page on the phone, and a comment.
    page.goto(f"{server}/tickets/{ticket_id}")
    fits(page, "ticket", whole=False)  # its evidence tables scroll in their own boxes, as on a tablet
    page.fill("#comment-form textarea[name=comment]", "Cage locked; security is on the way")
    page.click("#comment")
    expect(page.locator("#history")).to_contain_text("Cage locked; security is on the way")
    shots.take(page, "phone-ticket-commented", f"Comment added to ticket {ticket_id}.", "comment by user:tom")
    fits(page, "ticket after comment", whole=False)
    assert page.locator("#cancel-form, #assign-form").count() == 0  # an operator's

    # An operator reassigns the first ticket and cancels the second.
    page.click("text=Sign out")
    page.wait_for_url(f"{server}/login")
    sign_in(page, server, "olga", operator_password)
    page.goto(f"{server}/tickets/{ticket_id}")
    page.fill("#assign-form input[name=assignee]", "user:tom")
    page.fill("#assign-form input[name=reason]", "tom is in that aisle")
    page.click("#assign")
    expect(page.locator("#ticket-state")).to_have_text("claimed")
    shots.take(page, "phone-ticket-reassigned", "Assigned to user:tom", "assigned by user:olga")
    page.goto(f"{server}/tickets/{second_id}")
    page.fill("#cancel-form input[name=reason]", "duplicate: same DIMM as the first")
    page.click("#cancel")
    expect(page.locator("#ticket-state")).to_have_text("cancelled")
    shots.take(page, "phone-ticket-cancelled", f"Ticket {second_id} cancelled.", "duplicate: same DIMM")
    fits(page, "ticket cancelled", whole=False)
    page.click("nav >> text=Audit")
    audited = ("ticketing.ticket.assigned", "ticketing.ticket.cancelled", "ticketing.ticket.comment")
    shots.take(page, "phone-audit", *audited)
    context.close()
    print(f"screenshots: {shots.directory}")


def _remediations(db: Database) -> tuple[int, int, int]:
    """Two remediations awaiting approval and one running, each on its own host, and a decision."""
    ids = []
    with db.session() as session:
        for hostname, state in (
            ("web-041", RemediationState.awaiting_approval),
            ("web-042", RemediationState.awaiting_approval),
            ("web-043", RemediationState.running),
        ):
            host = Host(hostname=hostname, datacenter="ams1", rack="ams1-r05")
            session.add(host)
            session.flush()
            remediation = Remediation(
                host_id=host.id, rule_id="dimm-ce-storm", state=state, reason=f"CE storm on {hostname}"
            )
            remediation.steps = [RemediationStep(index=0, action="ticket", params={"part_type": "dimm"})]
            session.add(remediation)
            session.flush()
            ids.append(remediation.id)
            session.add(Decision(host_id=host.id, rule_id="dimm-ce-storm", outcome="planned", reason="storm"))
    return ids[0], ids[1], ids[2]


def test_phone_operator_bulk_cancels_pauses_and_aborts(
    database: Database,  # noqa: F811
    server: str,  # noqa: F811
    browser: object,  # noqa: F811
    tmp_path: Path,
) -> None:
    from playwright.sync_api import Browser, expect

    assert isinstance(browser, Browser)
    first, second, running = _remediations(database)
    operator_password = make_user(database, "olga", Role.operator)
    shots = Shots(tmp_path / "screenshots")
    context = browser.new_context(viewport=PHONE, device_scale_factor=2, is_mobile=True, has_touch=True)
    page = context.new_page()
    sign_in(page, server, "olga", operator_password)

    page.click("nav >> text=Approvals")
    shots.take(page, "phone-approvals", "Several at once", "CE storm on web-041", "CE storm on web-042")
    fits(page, "approvals", whole=False)
    page.check(f"#approval-{first} input[name=ids]")
    page.check(f"#approval-{second} input[name=ids]")
    page.fill("#bulk-form input[name=reason]", "both DIMMs are being swapped tonight anyway")
    page.click("#bulk-cancel")
    expect(page.locator("#messages")).to_contain_text(f"Cancelled: {first}, {second}.")
    shots.take(page, "phone-approvals-bulk-cancelled", "Nothing is waiting for approval.")

    page.goto(f"{server}/hosts/web-043")
    page.fill(f"#remediation-{running}-control input[name=reason]", "the aisle is closed for an hour")
    page.click(f"#pause-{running}")
    expect(page.locator("#messages")).to_contain_text(f"Remediation {running} paused.")
    expect(page.locator(f"#resume-{running}")).to_be_visible()
    shots.take(page, "phone-host-remediation-paused", "paused by user:olga")
    fits(page, "host with a paused remediation", whole=True)
    page.fill(f"#remediation-{running}-control input[name=reason]", "the DIMM was swapped by hand")
    page.click(f"#abort-{running}")
    expect(page.locator("#messages")).to_contain_text(f"Remediation {running} aborted.")
    expect(page.locator(f"#remediation-{running}-control")).to_have_count(0)

    page.click("#host-decisions")
    page.wait_for_url(f"{server}/decisions?hostname=web-043")
    shots.take(page, "phone-decisions-host", "Decision log for web-043", "dimm-ce-storm", "storm")
    fits(page, "decisions", whole=True)
    page.click("#decisions a >> text=dimm-ce-storm")
    page.wait_for_url(f"{server}/decisions?rule=dimm-ce-storm")
    expect(page.locator("#decisions li")).to_have_count(3)
    page.click("nav >> text=Audit")
    audited = ("remediator.remediation.cancel_requested", "remediator.remediation.paused", "user:olga")
    shots.take(page, "phone-audit-remediations", *audited)
    context.close()
    print(f"screenshots: {shots.directory}")
