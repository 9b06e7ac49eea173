"""Backtest: replay stored reports through a rule pack and say what it would have done.

Reads only. Each host's stored observation states are replayed oldest first
with a fresh derivation memory; a state that repeated is replayed again at its
last repeat, so rates come out over the same intervals that ingest saw.

A host's replay depends only on its own rows and records, so hosts are shared out
over worker processes (`host_id % workers`), each with its own connection and
streamed query (remediator.backtest_replay); their hits are merged and sorted,
which gives the same result as one process. The workers are started with
`spawn`, not `fork`: a forked child would inherit the parent's open database
connection and whatever threads the caller runs. A spawned worker imports the
caller's main module again, so that module guards its entry point
(`if __name__ == "__main__"`), as api/__main__.py and bench/backtest.py do.
"""

from __future__ import annotations

import datetime as dt
import multiprocessing
import queue
import traceback
from collections.abc import Callable
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from remediator.backtest_replay import BacktestResult, Hit, replay_share
from remediator.models import Report as ReportRow
from remediator.rules import RuleSet

__all__ = ["BacktestError", "BacktestResult", "Hit", "backtest", "to_replay"]

Progress = Callable[[int], None]


class BacktestError(RuntimeError):
    """A worker process failed; its traceback is the message."""


def to_replay(session: Session, since: dt.datetime) -> int:
    """Reports a backtest from `since` will replay (rows, plus the last repeat of those that repeated):
    the total of a progress bar, from one count over the last_captured_at index."""
    count = select(
        func.count(),
        func.count().filter(ReportRow.repeats > 0),
    ).where(ReportRow.last_captured_at >= since)
    total, repeated = session.execute(count).one()
    return int(total) + int(repeated)


def backtest(
    session: Session,
    ruleset: RuleSet,
    since: dt.datetime,
    *,
    workers: int = 1,
    progress: Progress | None = None,
) -> BacktestResult:
    """Replay the reports stored since `since` through `ruleset`; `workers` processes share the hosts
    (1: in this process, on `session`). Workers read what is committed, on connections of their own, and
    only on PostgreSQL: SQLite transactions here take the write lock at BEGIN (core/db.py), so workers
    would only queue behind one another. `progress` is called with counts of replayed reports."""
    if workers <= 1 or session.get_bind().engine.url.get_backend_name() != "postgresql":
        result = replay_share(session, ruleset, since, progress=progress)
    else:
        url = session.get_bind().engine.url.render_as_string(hide_password=False)
        result = _fan_out(url, ruleset, since, workers, progress)
    result.hits.sort(key=lambda h: (h.rule_id, h.first_at, h.hostname))
    return result


def _fan_out(url: str, ruleset: RuleSet, since: dt.datetime, workers: int, progress: Progress | None) -> BacktestResult:
    context = multiprocessing.get_context("spawn")
    messages: Any = context.Queue()
    processes = [
        context.Process(target=_worker, args=(url, ruleset, since, share, workers, messages), daemon=True)
        for share in range(workers)
    ]
    for process in processes:
        process.start()
    merged = BacktestResult(since=since)
    done: set[int] = set()
    try:
        while len(done) < workers:
            try:
                kind, share, payload = messages.get(timeout=1.0)
            except queue.Empty:
                dead = [p for n, p in enumerate(processes) if n not in done and not p.is_alive()]
                if dead:
                    raise BacktestError(f"a backtest worker exited with code {dead[0].exitcode}") from None
                continue
            if kind == "progress":
                if progress is not None:
                    progress(payload)
            elif kind == "error":
                raise BacktestError(payload)
            else:
                done.add(share)
                merged.hosts += payload.hosts
                merged.rows += payload.rows
                merged.reports += payload.reports
                merged.hits += payload.hits
    finally:
        for process in processes:
            if process.is_alive() and len(done) < workers:
                process.terminate()
            process.join()
    return merged


def _worker(url: str, ruleset: RuleSet, since: dt.datetime, share: int, shares: int, messages: Any) -> None:
    """One share of the hosts, on a connection of its own; tells the parent its progress and its result."""
    from core.db import Database

    database = Database(url, pool_size=1)
    try:
        with database.sessionmaker() as session:
            result = replay_share(
                session,
                ruleset,
                since,
                share=share,
                shares=shares,
                progress=lambda n: messages.put(("progress", share, n)),
            )
        messages.put(("done", share, result))
    except BaseException:
        messages.put(("error", share, traceback.format_exc()))
        raise
    finally:
        database.dispose()
