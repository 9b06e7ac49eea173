"""The Jira backend against a local Jira stand-in (ticketing.backends.jira_receiver) over real HTTP,
and the sync task in a real worker process riding out a Jira outage."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import pytest
from celery import current_app
from sqlalchemy import select
from sqlalchemy.orm import Session

from api.settings import load_central_settings
from core.db import Database, make_engine
from core.queue import create_celery
from core.settings import SettingsError
from tests.builders.runtime import wired
from tests.conftest import truncate_all
from tests.processes import FleetfixProcess, base_env, free_port, wait_until
from ticketing import opening, sync
from ticketing import service as tickets
from ticketing.backends import TrackerRejected, TrackerUnavailable
from ticketing.backends.jira import JiraTracker, dedup_label
from ticketing.backends.jira_receiver import JiraReceiver
from ticketing.models import TrackerLink
from ticketing.schemas import Replacement, Resolution, TicketRequest

TOKEN = "jira-pat-Zq8v"
NOW = dt.datetime(2026, 6, 1, 9, 0, tzinfo=dt.UTC)
PUBLIC = "https://fleetfix.example.net"


@pytest.fixture
def receiver() -> Iterator[JiraReceiver]:
    with JiraReceiver(token=TOKEN, project="OPS") as running:
        yield running


def jira(receiver: JiraReceiver, *, token: str = TOKEN, project: str = "OPS") -> JiraTracker:
    return JiraTracker(receiver.url, project=project, token=token)


def open_one(session: Session, hostname: str = "web-1") -> int:
    ticket, _ = tickets.open_ticket(
        session,
        TicketRequest(
            hostname=hostname,
            datacenter="ams1",
            rack="R12-07",
            part_type="dimm",
            part="CPU 0 DIMM 8",
            title="Replace DIMM CPU 0 DIMM 8: uncorrectable ECC in the SEL",
            priority=1,
            evidence={"location": {"datacenter": "ams1", "row": "R12", "rack": "R12-07", "slot": "U21"}},
        ),
        actor="system:remediator",
        now=NOW,
    )
    return ticket.id


def work_it(session: Session, ticket_id: int) -> None:
    ticket = tickets.lock_ticket(session, ticket_id)
    tickets.claim(session, ticket, actor="user:alice")
    tickets.start(session, ticket, actor="user:alice")
    tickets.comment(session, ticket, actor="user:alice", note="DIMM 8 seated crooked")
    tickets.resolve(
        session,
        ticket,
        Resolution(replacements=[Replacement(old_serial="1A2B3C4D", new_serial="77AA88BB")], note="replaced"),
        actor="user:alice",
    )
    tickets.begin_verification(session, ticket, actor="system:remediator", settle=dt.timedelta(minutes=30))


def test_a_ticket_becomes_an_issue_that_follows_its_lifecycle(session: Session, receiver: JiraReceiver) -> None:
    ticket_id = open_one(session)
    tracker = jira(receiver)
    link = sync.push(session, ticket_id, tracker, public_url=PUBLIC)
    assert link is not None
    assert link.external_key == "OPS-1"
    assert link.external_url == f"{receiver.url}/browse/OPS-1"
    issue = receiver.issues["OPS-1"]
    assert issue.fields["labels"] == [
        "fleetfix",
        dedup_label("web-1:dimm:CPU 0 DIMM 8"),
        f"fleetfix-ticket-{ticket_id}",
        "fleetfix-p1",
    ]
    assert issue.fields["issuetype"] == {"name": "Task"}
    assert "{noformat}web-1:dimm:CPU 0 DIMM 8{noformat}" in issue.fields["description"]
    assert f"{PUBLIC}/tickets/{ticket_id}" in issue.fields["description"]
    assert "row R12, rack R12-07, slot U21" in issue.fields["description"]
    assert issue.comments == []
    assert issue.status == "Open"

    work_it(session, ticket_id)
    sync.push(session, ticket_id, tracker, public_url=PUBLIC)
    assert [c.splitlines()[0] for c in issue.comments] == [
        "user:alice: claimed (open → claimed)",
        "user:alice: started (claimed → in_progress)",
        "user:alice: comment",
        "user:alice: resolved (in_progress → resolved)",
        "system:remediator: verifying (resolved → verifying)",
    ]
    assert "replaced the part: serial 1A2B3C4D → 77AA88BB" in issue.comments[3]
    assert issue.status == "Resolved"

    ticket = tickets.lock_ticket(session, ticket_id)
    tickets.reopen(session, ticket, actor="system:remediator", reason="fault returned while verifying")
    sync.push(session, ticket_id, tracker, public_url=PUBLIC)
    assert issue.status == "Reopened"
    assert len(receiver.calls("POST", "/rest/api/2/issue")) == 1 + len(issue.comments) + 3  # create, comments, moves


def test_a_retried_sync_adopts_the_issue_and_posts_nothing_twice(session: Session, receiver: JiraReceiver) -> None:
    ticket_id = open_one(session)
    work_it(session, ticket_id)
    tracker = jira(receiver)
    sync.push(session, ticket_id, tracker, public_url=PUBLIC)
    comments = list(receiver.issues["OPS-1"].comments)
    # as if the first attempt's transaction had been lost after Jira did the work
    session.delete(session.get_one(TrackerLink, ticket_id))
    session.flush()
    link = sync.push(session, ticket_id, tracker, public_url=PUBLIC)
    assert link is not None
    assert link.external_key == "OPS-1"
    assert list(receiver.issues) == ["OPS-1"]
    assert receiver.issues["OPS-1"].comments == comments


def test_an_outage_is_retried_and_recorded_then_recovers(session: Session, receiver: JiraReceiver) -> None:
    ticket_id = open_one(session)
    tracker = jira(receiver)
    receiver.unavailable = True
    with pytest.raises(TrackerUnavailable, match=r"jira POST /rest/api/2/search: HTTP 503"):
        sync.push(session, ticket_id, tracker, public_url=PUBLIC)
    assert sync.record_failure(session, ticket_id, "jira", "jira POST /rest/api/2/search: HTTP 503") == 1
    receiver.stop()
    with pytest.raises(TrackerUnavailable, match="ConnectError"):
        sync.push(session, ticket_id, tracker, public_url=PUBLIC)
    receiver.unavailable = False
    receiver.start()
    link = sync.push(session, ticket_id, tracker, public_url=PUBLIC)
    assert link is not None
    assert (link.external_key, link.attempts, link.last_error) == ("OPS-1", 0, "")


def test_refusals_are_not_retried_and_never_show_the_token(session: Session, receiver: JiraReceiver) -> None:
    ticket_id = open_one(session)
    with pytest.raises(TrackerRejected, match=r"HTTP 400: project: project 'NOPE' does not exist"):
        sync.push(session, ticket_id, jira(receiver, project="NOPE"), public_url=PUBLIC)
    wrong = jira(receiver, token="not-the-token")
    with pytest.raises(TrackerRejected, match="HTTP 401") as refused:
        sync.push(session, ticket_id, wrong, public_url=PUBLIC)
    assert "not-the-token" not in str(refused.value)
    assert "not-the-token" not in repr(wrong)
    assert receiver.issues == {}


def test_basic_auth_with_a_user(session: Session) -> None:
    with JiraReceiver(token=TOKEN, user="ops-bot@example.net", project="OPS") as cloud:
        tracker = JiraTracker(cloud.url, project="OPS", token=TOKEN, user="ops-bot@example.net")
        ticket_id = open_one(session)
        assert sync.push(session, ticket_id, tracker, public_url=PUBLIC) is not None
        assert cloud.requests
        assert all(r.authorized for r in cloud.requests)


def test_jira_settings_are_required_together(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEETFIX_TICKET_TRACKER", "jira")
    monkeypatch.setenv("FLEETFIX_JIRA_URL", "https://jira.example.net")
    with pytest.raises(SettingsError, match="FLEETFIX_JIRA_PROJECT is required when FLEETFIX_TICKET_TRACKER=jira"):
        load_central_settings()
    monkeypatch.setenv("FLEETFIX_JIRA_PROJECT", "OPS")
    monkeypatch.setenv("FLEETFIX_JIRA_API_TOKEN", TOKEN)
    settings = load_central_settings()
    assert TOKEN not in repr(settings)
    assert TOKEN not in str(settings.model_dump())


@pytest.fixture
def it_db(integration_pg_url: str) -> str:
    truncate_all(integration_pg_url)
    return integration_pg_url


def test_the_worker_rides_out_a_jira_outage(it_db: str, redis_url: str, tmp_path: Path) -> None:
    port = free_port()
    receiver = JiraReceiver(token=TOKEN, project="OPS", port=port)  # not started: Jira is down
    env = base_env(
        FLEETFIX_DATABASE_URL=it_db,
        FLEETFIX_BROKER_URL=redis_url,
        FLEETFIX_DATA_DIR=str(tmp_path),
        FLEETFIX_TICKET_TRACKER="jira",
        FLEETFIX_JIRA_URL=receiver.url,
        FLEETFIX_JIRA_PROJECT="OPS",
        FLEETFIX_JIRA_API_TOKEN=TOKEN,
        FLEETFIX_LOG_LEVEL="DEBUG",
    )
    with FleetfixProcess(["worker", "--queues", "notify", "--concurrency", "1"], env, tmp_path / "w.log") as worker:
        worker.wait_for_output("ready.")
        previous_app = current_app._get_current_object()
        create_celery(redis_url)  # the changes below send their sync task through Redis on commit
        database = wired(Database(it_db))
        try:
            with database.session() as session:
                ticket_id = open_one(session)
            with database.session() as session:
                ticket = tickets.lock_ticket(session, ticket_id)
                tickets.claim(session, ticket, actor="user:alice")
            worker.wait_for_output("ticketing.tracker.unavailable", timeout=30)

            def link() -> TrackerLink | None:
                engine = make_engine(it_db)
                try:
                    with Session(engine) as session:
                        return session.scalars(select(TrackerLink).where(TrackerLink.attempts > 0)).one_or_none()
                finally:
                    engine.dispose()

            failing = wait_until(link, 30, "the failure recorded on the link", worker)
            assert "ConnectError" in failing.last_error
            # while Jira is down the ticket goes on
            with database.session() as session:
                ticket = tickets.lock_ticket(session, ticket_id)
                tickets.start(session, ticket, actor="user:alice")
            receiver.start()
            issue = wait_until(lambda: receiver.issues.get("OPS-1"), 60, "the issue in Jira", worker)
            wait_until(lambda: len(issue.comments) == 2, 30, "both changes as comments", worker)
            assert [c.splitlines()[0] for c in issue.comments] == [
                "user:alice: claimed (open → claimed)",
                "user:alice: started (claimed → in_progress)",
            ]
            assert issue.status == "In Progress"
            assert len(receiver.issues) == 1
            assert TOKEN not in worker.output()
        finally:
            receiver.stop()
            database.dispose()
            previous_app.set_current()  # later tests send on the app they had
            previous_app.set_default()


def test_a_raised_priority_reaches_the_issue_s_summary_and_label(session: Session, receiver: JiraReceiver) -> None:
    """Review r7, finding 3: the fleetfix-pN label and the summary were written only when the issue was made;
    a more urgent rule's raise (ticketing.opening.raise_priority) only posted a comment."""
    ticket, _ = tickets.open_ticket(
        session,
        TicketRequest(hostname="web-1", part_type="fan", part="FAN1", title="Fan FAN1 slowing", priority=4),
        actor="system:remediator",
        now=NOW,
    )
    tracker = jira(receiver)
    link = sync.push(session, ticket.id, tracker, public_url=PUBLIC)
    assert link is not None
    issue = receiver.issues[str(link.external_key)]
    assert "fleetfix-p4" in issue.fields["labels"]
    issue.fields["labels"].append("team-dc")  # a person's own label stays
    assert receiver.calls("PUT") == []
    locked = tickets.lock_ticket(session, ticket.id)
    opening.raise_priority(
        session, locked, priority=3, title="Fan FAN1 past its critical threshold", actor="system:remediator", now=NOW
    )
    sync.push(session, ticket.id, tracker, public_url=PUBLIC)
    assert issue.fields["summary"] == "Fan FAN1 past its critical threshold"
    assert [label for label in issue.fields["labels"] if label.startswith("fleetfix-p")] == ["fleetfix-p3"]
    assert "team-dc" in issue.fields["labels"]
    assert len(receiver.calls("PUT")) == 1
    sync.push(session, ticket.id, tracker, public_url=PUBLIC)  # nothing new: no second edit
    assert len(receiver.calls("PUT")) == 1
