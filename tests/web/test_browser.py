"""End to end in real headless Chromium: a technician signs in, claims a ticket from the queue, resolves
it, the host reports clean and comes back in service; an operator looks at approvals, rules and the audit
log. Every main page is screenshotted (under the test's tmp_path) and checked for its content, on a
tablet-sized screen.

The server is a real `fleetfix api` process on the run's PostgreSQL; the host's fresh report goes
through the real ingest route, and the scheduler's settle task is called in-process.
"""

from __future__ import annotations

import datetime as dt
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from core.auth import issue_token
from core.db import Database
from core.models import Role
from remediator import repairs
from tests.builders.people import make_user
from tests.builders.repairs import load_test_answers
from tests.builders.reports import edac_report, payload
from tests.builders.rollouts import halted_rollout
from tests.builders.runtime import wired
from tests.builders.tickets import open_dimm_ticket
from tests.conftest import truncate_all
from tests.processes import FleetfixProcess, base_env, free_port, wait_until

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
TABLET = {"width": 820, "height": 1180}  # a 10-11" tablet held upright
KERNEL_MARKUP = "<img src=x onerror=\"document.title='owned'\">EDAC MC0: 1 CE"
SEL_MARKUP = "<script>document.title='owned'</script>7 | Memory | Correctable ECC"

pytestmark = pytest.mark.browser


@pytest.fixture
def database(integration_pg_url: str, celery_app: object) -> Iterator[Database]:
    truncate_all(integration_pg_url)
    database = wired(Database(integration_pg_url))
    yield database
    database.dispose()


@pytest.fixture
def server(integration_pg_url: str, redis_url: str, tmp_path: Path) -> Iterator[str]:
    port = free_port()
    env = base_env(
        FLEETFIX_DATABASE_URL=integration_pg_url,
        FLEETFIX_BROKER_URL=redis_url,
        FLEETFIX_DATA_DIR=str(tmp_path / "data"),
        FLEETFIX_API_PORT=str(port),
        FLEETFIX_TICKET_SETTLE_S="0",  # the clean report that follows the repair is enough
    )
    base = f"http://127.0.0.1:{port}"
    with FleetfixProcess(["api"], env, tmp_path / "api.log") as api:

        def healthy() -> bool:
            try:
                return httpx.get(f"{base}/healthz", timeout=2).status_code == 200
            except httpx.TransportError:
                return False

        wait_until(healthy, 60, "fleetfix api to answer /healthz", api)
        yield base


@pytest.fixture
def browser() -> Iterator[object]:
    from playwright.sync_api import Error, sync_playwright

    if not Path(CHROMIUM).exists() and shutil.which("chromium") is None:
        pytest.fail(f"Chromium is not installed at {CHROMIUM}: install it with `apt-get install chromium`")
    with sync_playwright() as playwright:
        try:
            chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        except Error as error:
            pytest.fail(f"Chromium would not start ({error}); install it with `apt-get install chromium`")
        yield chromium
        chromium.close()


class Shots:
    """Screenshots of each page, and the checks that it rendered and fits the screen."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)

    def take(self, page: object, name: str, *expected: str) -> Path:
        from playwright.sync_api import Page

        assert isinstance(page, Page)
        page.wait_for_load_state("networkidle")
        text = page.locator("main").inner_text()
        for words in expected:
            assert words in text, f"{name}: {words!r} not on the page:\n{text[:2000]}"
        # Usable on a tablet: the page itself never scrolls sideways (wide tables scroll in their own box).
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"{name}: the page is {overflow}px wider than a tablet's screen"
        path = self.directory / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        assert path.stat().st_size > 10_000, f"{name}: the screenshot is nearly empty"
        assert page.title() != "owned"
        return path


def sign_in(page: object, base: str, username: str, password: str) -> None:
    from playwright.sync_api import Page

    assert isinstance(page, Page)
    page.goto(f"{base}/login")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/")


def test_technician_repairs_a_dimm_and_the_host_returns_to_service(
    database: Database, server: str, browser: object, tmp_path: Path
) -> None:
    from playwright.sync_api import Browser, expect

    assert isinstance(browser, Browser)
    ticket_id = open_dimm_ticket(database, "web-017", sel_raw=SEL_MARKUP, kernel_line=KERNEL_MARKUP)
    tech_password = make_user(database, "tom", Role.technician, datacenter="ams1")
    operator_password = make_user(database, "olga", Role.operator)
    shots = Shots(tmp_path / "screenshots")
    context = browser.new_context(viewport=TABLET, device_scale_factor=1)
    page = context.new_page()

    page.goto(f"{server}/queue")
    expect(page).to_have_url(f"{server}/login?next=/queue")
    shots.take(page, "login", "Sign in", "User name", "Password")
    sign_in(page, server, "tom", tech_password)
    shots.take(page, "dashboard", "Hosts by state", "ams1", "Open repair tickets", "web-017")
    assert page.locator(".chart-svg").count() == 2

    page.click("nav >> text=Tickets")
    row = page.locator(f"#ticket-row-{ticket_id}")
    expect(row).to_contain_text("web-017")
    shots.take(page, "queue", "Repair tickets in ams1", "web-017", "Claim")
    row.locator("button", has_text="Claim").click()  # HTMX: the row is swapped in place
    expect(row).to_contain_text("user:tom")
    expect(row).to_contain_text(f"Ticket {ticket_id} is yours.")

    row.locator(f"a[href='/tickets/{ticket_id}']").click()
    page.wait_for_url(f"{server}/tickets/{ticket_id}")
    shots.take(page, "ticket", "Go to", "ams1-r01", "U12", "Chan#2_DIMM#0", "M393A4K40CB2-CVF", "1A2B3C4D", "Evidence")
    assert page.locator("#evidence svg circle").count() >= 2
    # What came from the field is shown as text, and nothing in it ran.
    expect(page.locator("#kernel-log")).to_contain_text(KERNEL_MARKUP)
    expect(page.locator("#sel")).to_contain_text(SEL_MARKUP)
    assert page.locator("#kernel-log img, #sel script").count() == 0

    page.fill("input[name=old_serial]", "1A2B3C4D")
    page.fill("input[name=new_serial]", "1A2B3C4D")
    page.fill("textarea[name=note]", "Swapped the DIMM in Chan#2 slot 0")
    page.click("#resolve")
    expect(page.locator("#form-error")).to_contain_text("record the part that went in")
    expect(page.locator("textarea[name=note]")).to_have_value("Swapped the DIMM in Chan#2 slot 0")  # kept
    page.fill("input[name=new_serial]", "9Z8Y7X6W")
    page.click("#resolve")
    expect(page.locator("#ticket-state")).to_have_text("verifying")
    shots.take(page, "ticket-resolved", "being re-checked", "9Z8Y7X6W")

    # The host, re-checked, reports without the fault (through the real ingest route) …
    with database.session() as session:
        _, host_token = issue_token(session, name="host-web-017", role=Role.viewer, hostname="web-017")
    clean = edac_report("web-017", at=dt.datetime.now(dt.UTC), ce=6000)
    posted = httpx.post(
        f"{server}/api/v1/reports", json=payload(clean), headers={"Authorization": f"Bearer {host_token}"}
    )
    assert posted.status_code == 200, posted.text
    # … its load test passes (a worker would send it to the host: tests/ticketing/test_repair_load.py) …
    with database.session() as session:
        load_test_answers(session, ticket_id, dt.datetime.now(dt.UTC))
    # … and the scheduler's settle task closes the ticket and puts the host back in service.
    with database.session() as session:
        settled = repairs.settle_repairs(session)
    assert settled["closed"] == 1

    page.click("a[href='/hosts/web-017']")
    expect(page.locator("#host-state")).to_have_text("in service")
    shots.take(
        page, "host", "web-017", "Timeline", f"ticket {ticket_id} closed", f"ticket {ticket_id} claimed by user:tom"
    )
    page.goto(f"{server}/tickets/{ticket_id}")
    expect(page.locator("#ticket-state")).to_have_text("closed")
    expect(page.locator("#load-test")).to_contain_text("Verified under load")

    page.click("text=Sign out")
    page.wait_for_url(f"{server}/login")
    sign_in(page, server, "olga", operator_password)
    page.click("nav >> text=Approvals")
    shots.take(page, "approvals", "Waiting for approval")
    page.click("nav >> text=Rules")
    shots.take(page, "rules", "Fleet-wide pause", "dimm-ce-storm")
    page.click("nav >> text=Audit")
    shots.take(page, "audit", "Audit log", "ticketing.ticket.claimed", "user:tom", "ticketing.ticket.closed")
    context.close()
    print(f"screenshots: {shots.directory}")


def test_operator_reads_a_halted_rollout_and_resumes_it(
    database: Database, server: str, browser: object, tmp_path: Path
) -> None:
    from playwright.sync_api import Browser, expect

    assert isinstance(browser, Browser)
    rollout_id, ticket_id = halted_rollout(database)
    operator_password = make_user(database, "olga", Role.operator)
    shots = Shots(tmp_path / "screenshots")
    context = browser.new_context(viewport=TABLET, device_scale_factor=1)
    page = context.new_page()
    sign_in(page, server, "olga", operator_password)
    page.click("nav >> text=Rollouts")
    expected = ("Rollouts", "bios 2.10.2", "compute-skx-2s", "halted", "1 of 20", f"ticket {ticket_id}")
    shots.take(page, "rollouts", *expected)
    page.click(f"#rollout-row-{rollout_id} a[href='/rollouts/{rollout_id}']")
    page.wait_for_url(f"{server}/rollouts/{rollout_id}")
    expect(page.locator("#rollout-state")).to_have_text("halted")
    shots.take(
        page,
        "rollout-halted",
        "Waves",
        "canary",
        "Upgraded vs not yet upgraded",
        "kernel_event_count",
        "0 of 19 hosts",
        "Fisher's exact",
        "side effect on bios 2.10.2",
        "left alone",
    )
    assert page.locator("#wave-0 .state.started").count() == 1
    expect(page.locator("#halt-ticket")).to_have_attribute("href", f"/tickets/{ticket_id}")
    page.fill("#rollout-change input[name=reason]", "the panics were a bad PSU batch, not the BIOS")
    page.click("#rollout-change button[type=submit]")
    expect(page.locator("#rollout-state")).to_have_text("running")
    shots.take(page, "rollout-resumed", f"Rollout {rollout_id} resumed.", "Halt the rollout")
    page.click("nav >> text=Audit")
    shots.take(page, "audit-rollout", "remediator.rollout.resumed", "user:olga")
    context.close()
