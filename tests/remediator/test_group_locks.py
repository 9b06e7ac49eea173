"""A batch locks the group tickets its firings may reach in id order, before any detection reaches one:
two batches reaching the same two rack or switch tickets in opposite orders deadlocked (PostgreSQL aborted one;
docs/reliability.md, "Group tickets and lock order")."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from core.db import Database
from remediator import group_locks, ingest
from remediator.evaluate import Firing
from remediator.models import Host
from remediator.rules import Condition, Rule, Step, load_ruleset
from remediator.signals import SignalValue
from tests.builders.policies import host
from tests.builders.reports import edac_report
from tests.builders.runtime import wired
from ticketing.schemas import TicketRequest
from ticketing.service import open_ticket

T0 = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)
HOT = Rule(
    id="hot",
    description="d",
    when=Condition(signal="sensor_critical", value=1),
    plan=[Step(action="ticket", params={"part_type": "airflow", "part": "host", "in_service": True})],
)
CRC = Rule(
    id="crc",
    description="d",
    when=Condition(signal="nic_crc_error_rate", value=1),
    plan=[Step(action="ticket", params={"part_type": "nic", "in_service": True})],
)
DRAIN = Rule(
    id="drain", description="d", when=Condition(signal="sensor_critical", value=1), plan=[Step(action="drain")]
)


def group_ticket(session: Session, rack: str, part_type: str, part: str) -> int:
    request = TicketRequest(
        hostname=f"h-{rack}",
        datacenter="dc1",
        rack=rack,
        part_type=part_type,
        part=part,
        title=f"{part_type} {part}",
        group_key=f"rack dc1/{rack}:{part_type}:{part}",
        holds_host=False,
    )
    ticket, _ = open_ticket(session, request, actor="test", now=T0)
    return ticket.id


def firing(rule: Rule, **detail: Any) -> Firing:
    return Firing(rule, SignalValue(rule.when.signal, "x", 5.0, detail))


def batch(session: Session) -> tuple[list[tuple[Host, Firing, dt.datetime]], list[int]]:
    """Hosts of racks r2 then r1 fire the heat rule, one host a NIC rule facing switch sw1; tickets: r1's cooling
    first (lower id), then sw1's, then r2's; a closed rack ticket and another rack's are not taken."""
    r1 = group_ticket(session, "r1", "rack_airflow", "rack r1")
    sw1 = group_ticket(session, "r1", "switch", "switch sw1")
    r2 = group_ticket(session, "r2", "rack_airflow", "rack r2")
    group_ticket(session, "r3", "rack_airflow", "rack r3")  # nobody of the batch is in r3
    a, b = host(session, "a", rack="r2"), host(session, "b", rack="r1")
    fired = [(a, firing(HOT)), (b, firing(HOT)), (b, firing(CRC, switch="sw1")), (a, firing(DRAIN))]
    return [(h, f, T0) for h, f in fired], [r1, sw1, r2]


def test_the_batch_locks_the_group_tickets_its_firings_may_reach_in_id_order(session: Session) -> None:
    fired, expected = batch(session)
    assert group_locks.lock_group_tickets(session, fired) == sorted(expected)
    assert group_locks.lock_group_tickets(session, [x for x in fired if x[1].rule is DRAIN]) == []


def test_a_repeat_detection_takes_no_lock(session: Session) -> None:
    """A ticket that heard from the host (and sensor) within the detection interval takes a repeat detection,
    which writes nothing: it is not locked (a rack hot for hours would serialise every batch of its hosts).
    A new sensor of the host, or the interval passed, writes: locked."""
    from ticketing.models import Ticket

    fired, (r1, sw1, r2) = batch(session)
    for ticket_id, name in ((r1, "b"), (sw1, "b"), (r2, "a")):
        ticket = session.get_one(Ticket, ticket_id)
        ticket.last_detected_at = T0 - dt.timedelta(minutes=5)
        ticket.evidence = {**ticket.evidence, "heard_from": [{"host": name, "subjects": ["x"]}]}
    session.flush()
    assert group_locks.lock_group_tickets(session, fired) == []
    other_sensor = [
        (h, Firing(f.rule, SignalValue(f.signal.kind, "y", 5.0, f.signal.detail)), at) for h, f, at in fired
    ]
    assert group_locks.lock_group_tickets(session, other_sensor) == [r1, r2]  # a switch lists hosts, not ports
    later = [(h, f, T0 + dt.timedelta(hours=2)) for h, f, _ in fired]
    assert group_locks.lock_group_tickets(session, later) == [r1, sw1, r2]
    # review r7, finding 6: a more urgent rule's repeat detection raises the ticket's priority: a write, locked
    urgent = [(h, Firing(f.rule.model_copy(update={"priority": 2}), f.signal), at) for h, f, at in fired]
    assert group_locks.lock_group_tickets(session, urgent) == [r1, sw1, r2]


def test_ingest_locks_them_before_any_detection_is_decided(session: Session, monkeypatch: pytest.MonkeyPatch) -> None:
    """The order of calls in one ingest: the group lock first, then each firing's decision."""
    calls: list[str] = []
    monkeypatch.setattr(ingest, "lock_group_tickets", lambda _s, fired: calls.append(f"lock {len(fired)}"))
    monkeypatch.setattr(ingest, "decide", lambda *a, **k: calls.append("decide"))
    ruleset = load_ruleset([])
    per_ingest = []
    for k in range(4):  # a DIMM at 50 CE/s from the second report on: dimm-ce-storm fires once its `for` passed
        calls.clear()
        ingest.ingest(session, [edac_report(ce=3000 * k, at=T0 + dt.timedelta(minutes=k))], ruleset=ruleset)
        per_ingest.append(list(calls))
    assert any("decide" in calls for calls in per_ingest), per_ingest
    assert all(calls[0].startswith("lock ") and set(calls[1:]) <= {"decide"} for calls in per_ingest), per_ingest


@pytest.mark.postgres
def test_a_second_batch_waits_on_the_lowest_ticket_first(integration_pg_url: str) -> None:
    """The batch whose first firing is about rack r2 holds r1's ticket (the lowest id) too: another transaction
    can take none of them, so it cannot hold one the first will want next."""
    from tests.conftest import truncate_all

    truncate_all(integration_pg_url)
    database = wired(Database(integration_pg_url))
    try:
        with database.sessionmaker() as setup:
            fired, ids = batch(setup)
            setup.commit()
        first = database.sessionmaker()
        try:
            fired = [(first.merge(h), f, at) for h, f, at in fired]
            assert group_locks.lock_group_tickets(first, fired) == sorted(ids)
            with database.sessionmaker() as other:
                for ticket_id in ids:
                    with pytest.raises(OperationalError, match="could not obtain lock"):
                        other.execute(
                            text("SELECT id FROM tickets WHERE id = :id FOR UPDATE NOWAIT"), {"id": ticket_id}
                        )
                    other.rollback()
        finally:
            first.rollback()
            first.close()
    finally:
        database.dispose()
