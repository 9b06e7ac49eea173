"""The backtest as it was before it was made fast: a query per host, every body validated, every rule
evaluated on every report. Kept as the oracle the fast replay must agree with
(tests/remediator/test_backtest_equivalence.py) and as the old path bench/backtest.py times beside it.
The algorithm below is the former remediator/backtest.py's, unchanged but for its result type.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from checker.schemas import Report
from remediator.backtest import BacktestResult, Hit
from remediator.host_evaluation import evaluate_host, report_signals
from remediator.models import Host
from remediator.models import Report as ReportRow
from remediator.rules import RuleSet


def reference_backtest(session: Session, ruleset: RuleSet, since: dt.datetime) -> BacktestResult:
    result = BacktestResult(since=since)
    host_ids = session.scalars(select(ReportRow.host_id).where(ReportRow.last_captured_at >= since).distinct()).all()
    for host_id in host_ids:
        host = session.get_one(Host, host_id)
        rows = session.scalars(
            select(ReportRow)
            .where(ReportRow.host_id == host_id, ReportRow.last_captured_at >= since)
            .order_by(ReportRow.captured_at)
        ).all()
        result.hosts += 1
        memory: dict[str, Any] = {}
        open_hits: dict[str, Hit] = {}
        for row in rows:
            result.rows += 1
            report = Report.model_validate(row.body)
            replays = [report]
            if row.repeats:
                replays.append(report.model_copy(update={"captured_at": row.last_captured_at}))
            for replay in replays:
                result.reports += 1
                signals = report_signals(host, replay, memory)
                firings = evaluate_host(host, signals, ruleset, memory, replay.captured_at)
                for firing in firings:
                    hit = open_hits.get(firing.rule.id)
                    if hit is None:
                        hit = Hit(
                            firing.rule.id,
                            host.hostname,
                            replay.captured_at,
                            replay.captured_at,
                            0,
                            firing.signal.subject,
                            firing.signal.value,
                        )
                        open_hits[firing.rule.id] = hit
                        result.hits.append(hit)
                    hit.last_at = replay.captured_at
                    hit.firings += 1
                    hit.peak = max(hit.peak, firing.signal.value)
    result.hits.sort(key=lambda h: (h.rule_id, h.first_at, h.hostname))
    return result
