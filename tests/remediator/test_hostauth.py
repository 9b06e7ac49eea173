"""Reports through the broker are authenticated per host: signed with the host's own credential."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import pytest
import redis
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from core.auth import issue_token
from core.db import Database, utcnow
from core.models import Role
from core.queue import INGEST_STREAM
from core.signing import report_key, sign_report
from remediator.hostauth import HostKeys, SignedPayload
from remediator.ingest import ingest_batch
from remediator.models import Host
from remediator.rules import RuleRegistry, load_ruleset
from remediator.stream import StreamIngester, publish_report
from remediator.tasks import with_signatures
from tests.builders.reports import edac_report
from tests.builders.runtime import wired
from tests.conftest import truncate_all

RULES = load_ruleset([])


def credential(database: Database, hostname: str) -> str:
    with database.session() as session:
        _, raw = issue_token(session, name=f"{hostname} agent", role=Role.viewer, hostname=hostname)
    return raw


def signed(token: str, hostname: str, *, about: str | None = None, at: dt.datetime | None = None) -> SignedPayload:
    body = edac_report(about or hostname, at=at or utcnow() - dt.timedelta(minutes=1)).model_dump_json()
    return SignedPayload(body=body, host=hostname, sig=sign_report(report_key(token), body.encode()))


def hosts(database: Database) -> list[str]:
    with database.session() as session:
        return sorted(session.scalars(select(Host.hostname)))


def test_a_signed_report_is_accepted_and_a_forged_one_refused(db: Database) -> None:
    token = credential(db, "web-001")
    other = credential(db, "web-002")
    good = signed(token, "web-001")
    tampered = SignedPayload(body=good.body.replace("web-001", "web-009"), host="web-001", sig=good.sig)  # type: ignore[union-attr]
    wrong_key = signed(other, "web-001")  # web-002's key, claiming to be web-001
    for_another = signed(other, "web-002", about="web-003")  # a valid signature, about someone else
    made_up = signed("ffx_not-a-credential-of-anyone", "web-004")
    result = ingest_batch(
        [good, tampered, wrong_key, for_another, made_up], database=db, ruleset=RULES, host_keys=HostKeys(db)
    )
    assert len(result.accepted) == 1
    refusals = {r.index: r.errors[0] for r in result.refused}
    assert sorted(refusals) == [1, 2, 3, 4]
    assert "does not match any live credential of host 'web-001'" in refusals[1]
    assert "does not match any live credential of host 'web-001'" in refusals[2]
    assert "'web-002' may only report for itself, not for 'web-003'" in refusals[3]
    assert "host 'web-004'" in refusals[4]
    assert hosts(db) == ["web-001"]


def test_unsigned_reports_pass_only_when_signatures_are_not_required(db: Database) -> None:
    body = edac_report("legacy-1", at=utcnow() - dt.timedelta(minutes=1)).model_dump_json()
    refused = ingest_batch([body], database=db, ruleset=RULES, host_keys=HostKeys(db), require_signed=True)
    assert refused.accepted == []
    assert refused.refused[0].errors == ["unsigned report: signatures are required"]
    accepted = ingest_batch([body], database=db, ruleset=RULES, host_keys=HostKeys(db), require_signed=False)
    assert len(accepted.accepted) == 1


def test_a_revoked_credential_stops_signing_after_the_cache_expires(db: Database) -> None:
    token = credential(db, "web-010")
    keys = HostKeys(db, ttl_s=0.0, miss_reload_s=0.0)
    first = ingest_batch([signed(token, "web-010")], database=db, ruleset=RULES, host_keys=keys)
    assert len(first.accepted) == 1
    from core.models import ApiToken

    with db.session() as session:
        row = session.scalars(select(ApiToken).where(ApiToken.hostname == "web-010")).one()
        row.revoked_at = utcnow()
    later = ingest_batch([signed(token, "web-010")], database=db, ruleset=RULES, host_keys=keys)
    assert later.accepted == []
    assert "does not match" in later.refused[0].errors[0]


def test_a_credential_issued_after_start_is_picked_up_on_the_first_miss(db: Database) -> None:
    keys = HostKeys(db, ttl_s=3600, miss_reload_s=0.0)
    keys.keys_for("anyone")  # loaded once, before the credential exists
    token = credential(db, "new-001")
    result = ingest_batch([signed(token, "new-001")], database=db, ruleset=RULES, host_keys=keys)
    assert len(result.accepted) == 1


def test_celery_payloads_pair_with_their_signatures() -> None:
    paired = with_signatures(["a", "b", "c"], [{"host": "h", "sig": "s"}, None])
    assert paired[0] == SignedPayload(body="a", host="h", sig="s")
    assert paired[1:] == ["b", "c"]
    assert with_signatures(["a"], None) == ["a"]


@pytest.fixture
def it_database(integration_pg_url: str, celery_app: object) -> Iterator[Database]:
    truncate_all(integration_pg_url)
    database = wired(Database(integration_pg_url))
    yield database
    database.dispose()


@pytest.mark.redis
def test_stream_entries_are_checked_against_their_hosts_keys(it_database: Database, redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    token = credential(it_database, "stream-001")
    good = signed(token, "stream-001")
    forged = signed(token, "stream-001", about="stream-002")
    publish_report(client, str(good.body), host=good.host, sig=good.sig)
    publish_report(client, str(forged.body), host=forged.host, sig=forged.sig)
    publish_report(client, edac_report("unsigned-1").model_dump_json())
    ingester = StreamIngester(redis_url, it_database, RuleRegistry(), block_ms=100, require_signed=True)
    ingester.ensure_group()
    assert ingester.run_once() == 3  # every entry is acknowledged: refused ones are not retried forever
    assert client.xlen(INGEST_STREAM) == 0
    assert hosts(it_database) == ["stream-001"]
    with Session(it_database.engine) as session:
        assert session.scalar(select(func.count()).select_from(Host)) == 1


def agent_report(hostname: str) -> dict[str, object]:
    return edac_report(hostname, at=utcnow() - dt.timedelta(minutes=1)).model_dump(mode="json")


@pytest.mark.redis
def test_an_agent_with_a_credential_signs_what_it_puts_on_the_stream(
    it_database: Database, redis_url: str, tmp_path: object
) -> None:
    from pathlib import Path

    from checker.agent.delivery import Delivery
    from checker.agent.spool import Spool
    from core.queue import create_celery
    from remediator.stream import signed_payload

    token = credential(it_database, "agent-001")
    delivery = Delivery(create_celery(redis_url), spool=Spool(Path(str(tmp_path)), 10), token=token)
    assert delivery.deliver(agent_report("agent-001")) == "broker"
    # A host reporting for another signs as that host, with its own key: no match.
    assert delivery.deliver(agent_report("agent-002")) == "broker"
    client = redis.Redis.from_url(redis_url)
    entries = client.xrange(INGEST_STREAM)
    assert [fields[b"host"] for _, fields in entries] == [b"agent-001", b"agent-002"]
    result = ingest_batch(
        [signed_payload(fields) for _, fields in entries],
        database=it_database,
        ruleset=RULES,
        host_keys=HostKeys(it_database),
        require_signed=True,
    )
    assert len(result.accepted) == 1
    assert "does not match any live credential of host 'agent-002'" in result.refused[0].errors[0]


def test_an_agent_on_another_broker_sends_signed_texts_to_the_ingest_task(db: Database, tmp_path: object) -> None:
    from pathlib import Path

    from checker.agent.delivery import INGEST_TASK, Delivery
    from checker.agent.spool import Spool
    from core.queue import INGEST_QUEUE, create_celery

    token = credential(db, "amqp-001")
    app = create_celery("memory://")
    delivery = Delivery(app, spool=Spool(Path(str(tmp_path)), 10), token=token)
    assert delivery.deliver(agent_report("amqp-001")) == "broker"
    with app.connection_for_read() as connection:
        message = connection.SimpleQueue(INGEST_QUEUE).get(timeout=5)
        (texts, signatures), _kwargs, _embed = message.decode()
        assert message.headers["task"] == INGEST_TASK
        message.ack()
    assert isinstance(texts[0], str)
    assert signatures[0]["host"] == "amqp-001"
    result = ingest_batch(
        with_signatures(texts, signatures), database=db, ruleset=RULES, host_keys=HostKeys(db), require_signed=True
    )
    assert len(result.accepted) == 1
