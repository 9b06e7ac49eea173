"""Tasks leave only after the outermost commit: never on a SAVEPOINT's release, never for rolled-back work."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from core.db import Database
from core.dispatch import pending_tasks, send_after_commit


class Recorded:
    """Stands in for a Celery signature: records that it was sent."""

    def __init__(self, name: str, sent: list[str]) -> None:
        self.name = name
        self.sent = sent

    def apply_async(self, *_: Any, **__: Any) -> None:
        self.sent.append(self.name)


def test_savepoints_neither_send_nor_lose_tasks(db: Database) -> None:
    sent: list[str] = []
    with db.sessionmaker() as session:
        with session.begin():
            send_after_commit(session, Recorded("planned-first", sent))  # type: ignore[arg-type]
            with session.begin_nested():
                session.execute(text("SELECT 1"))
            assert sent == []  # released savepoint: the outer transaction is not committed
            savepoint = session.begin_nested()
            send_after_commit(session, Recorded("inside-rolled-back", sent))  # type: ignore[arg-type]
            savepoint.rollback()
            assert [s.name for s in pending_tasks(session)] == ["planned-first"]
            assert sent == []
        assert sent == ["planned-first"]


def test_rollback_of_the_outer_transaction_drops_everything(db: Database) -> None:
    sent: list[str] = []
    with db.sessionmaker() as session:
        session.begin()
        send_after_commit(session, Recorded("never", sent))  # type: ignore[arg-type]
        session.rollback()
        assert pending_tasks(session) == []
        session.commit()
    assert sent == []


def test_batch_ingest_sends_remediation_tasks_only_at_its_commit(session: Session, monkeypatch: Any) -> None:
    """The bug this guards against: a task sent when a later host's SAVEPOINT was released."""
    from celery import Signature

    from remediator.ingest import ingest
    from remediator.rules import load_ruleset
    from tests.builders.reports import storm_reports

    sent: list[Any] = []
    monkeypatch.setattr(Signature, "apply_async", lambda self, *a, **k: sent.append(self.args))
    batch = [r for name in ("a-1", "a-2") for r in storm_reports(name)]  # a third would trip the breaker
    result = ingest(session, batch, ruleset=load_ruleset([]))
    assert len(result.remediations) == 2
    assert sent == []
    session.commit()
    assert sorted(a[0] for a in sent) == sorted(result.remediations)


def test_an_unreachable_broker_after_commit_is_logged_not_raised(db: Database, caplog: Any) -> None:
    """The change is committed; the caller must not see an error for work that was done, and the
    other tasks of the transaction still go."""
    from core.queue import create_celery

    dead = create_celery("redis://127.0.0.1:1/0", make_current=False)  # nothing listens on port 1
    sent: list[str] = []
    with db.sessionmaker() as session, session.begin():
        send_after_commit(session, dead.signature("remediator.run_remediation", args=[7]).set(retry=False))
        send_after_commit(session, Recorded("after-the-failed-one", sent))  # type: ignore[arg-type]
    assert sent == ["after-the-failed-one"]
    [record] = [r for r in caplog.records if r.getMessage() == "core.dispatch.send_failed"]
    assert record.fields["task"] == "remediator.run_remediation"  # type: ignore[attr-defined]
