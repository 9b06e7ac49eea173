"""Alerts through real processes: `fleetfix worker` and `fleetfix scheduler` on real Redis and
PostgreSQL, Slack played by the local receiver. No eager mode."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from api.settings import CentralSettings
from core.db import Database, make_engine
from core.queue import INGEST_QUEUE, create_celery
from remediator.models import Remediation, RemediationState
from tests.builders.reports import payload, storm_reports
from tests.builders.runtime import central as central_runtime
from tests.conftest import truncate_all
from tests.processes import FleetfixProcess, base_env, wait_until
from tests.ticketing.notify.conftest import PUBLIC_URL, WEBHOOK_SECRET
from ticketing import service as tickets
from ticketing.models import Ticket
from ticketing.notify.models import AlertDelivery, DeliveryState
from ticketing.notify.receiver import SlackReceiver
from ticketing.schemas import TicketRequest

Enable = Callable[[CentralSettings], CentralSettings]


@pytest.fixture
def it_db(integration_pg_url: str) -> str:
    truncate_all(integration_pg_url)
    return integration_pg_url


def query(url: str, fn):  # type: ignore[no-untyped-def]
    engine = make_engine(url)
    try:
        with Session(engine) as session:
            return fn(session)
    finally:
        engine.dispose()


@pytest.fixture
def central(
    it_db: str, redis_url: str, receiver: SlackReceiver, tmp_path: Path
) -> Iterator[tuple[FleetfixProcess, FleetfixProcess]]:
    """A worker (ingest, remediate and notify queues, one process) and the scheduler, alerting to the receiver."""
    env = base_env(
        FLEETFIX_DATABASE_URL=it_db,
        FLEETFIX_BROKER_URL=redis_url,
        FLEETFIX_DATA_DIR=str(tmp_path),
        FLEETFIX_PUBLIC_URL=PUBLIC_URL,
        FLEETFIX_ALERTS_MODE="webhook",
        FLEETFIX_ALERTS_WINDOW_S="5",
        FLEETFIX_SLACK_CHANNEL="#fleet",
        FLEETFIX_SLACK_WEBHOOK_URL=receiver.add_webhook("#fleet", WEBHOOK_SECRET),
    )
    with (
        FleetfixProcess(["worker", "--concurrency", "1"], env, tmp_path / "worker.log") as worker,
        FleetfixProcess(["scheduler"], env, tmp_path / "beat.log") as beat,
    ):
        worker.wait_for_output("ready.")
        yield worker, beat
    for process in (worker, beat):
        assert WEBHOOK_SECRET not in process.log_path.read_text()


def deliveries(url: str) -> list[tuple[str, int, str]]:
    found: list[tuple[str, int, str]] = query(
        url,
        lambda s: [
            (d.state.value, d.attempts, d.last_error)
            for d in s.scalars(select(AlertDelivery).order_by(AlertDelivery.id))
        ],
    )
    return found


def test_the_worker_delivers_after_a_5xx_and_a_rate_limit(
    central: tuple[FleetfixProcess, FleetfixProcess], it_db: str, receiver: SlackReceiver, alerts_on: Enable
) -> None:
    worker, _beat = central
    receiver.fail_next(1, 503, "service_unavailable")
    receiver.fail_next(1, 429, "rate_limited", retry_after=1)
    settings = alerts_on(CentralSettings(alerts_mode="webhook", slack_webhook_url="http://unused.invalid/"))
    database = Database(it_db)
    central_runtime(database, settings=settings)  # this process's outbox is on, as a worker's root turns it on
    with database.session() as session:
        request = TicketRequest(hostname="it-1", datacenter="ams1", part_type="psu", part="PSU1", title="PSU1 failed")
        tickets.open_ticket(session, request, actor="test")
    database.dispose()

    [message] = receiver.wait_for(1, timeout=60)
    assert message.body["blocks"][0]["text"]["text"] == "Repair ticket opened in ams1"
    assert [r.status for r in receiver.received] == [503, 429, 200]
    assert deliveries(it_db) == [("sent", 3, "")]
    output = worker.output()
    assert "ticketing.notify.retrying" in output
    assert "Retry in" in output


def test_a_slack_outage_delays_no_remediation_and_its_alerts_arrive_after(
    central: tuple[FleetfixProcess, FleetfixProcess], it_db: str, redis_url: str, receiver: SlackReceiver
) -> None:
    worker, _beat = central
    receiver.stop()
    producer = create_celery(redis_url)
    for report in storm_reports("w-1"):
        producer.send_task("remediator.ingest_reports", args=[[payload(report)]], queue=INGEST_QUEUE)

    ticket = wait_until(lambda: query(it_db, lambda s: s.scalars(select(Ticket)).one_or_none()), 30, "a ticket", worker)
    remediation = query(it_db, lambda s: s.scalars(select(Remediation)).one())
    assert remediation.state == RemediationState.escalated

    def refused() -> list[tuple[str, int, str]] | None:
        found = deliveries(it_db)
        return found if len(found) == 1 and all(d[1] >= 1 for d in found) else None

    # the ticket and the hand-over commit together, so they are one message for the channel
    for state, _attempts, error in wait_until(refused, 30, "the message tried while Slack is down", worker):
        assert (state, error) == ("pending", "Slack unreachable: Connection refused")

    receiver.start()
    [message] = receiver.wait_for(1, timeout=90)
    assert message.body["blocks"][0]["text"]["text"] == "2 alerts in unknown"
    assert message.body["text"].startswith(
        "2 alerts in unknown: repair ticket opened, remediation handed to a technician"
    )
    links = " ".join(b["text"]["text"] for b in message.body["blocks"] if b["type"] == "section")
    assert f"{PUBLIC_URL}/tickets/{ticket.id}" in links
    assert f"{PUBLIC_URL}/hosts/w-1#remediation-{remediation.id}" in links
    wait_until(lambda: {d[0] for d in deliveries(it_db)} == {DeliveryState.sent.value}, 10, "marked sent", worker)
