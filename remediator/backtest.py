"""Backtest: replay stored reports through a rule pack and say what it would have done.

Reads only. Each host's stored observation states are replayed oldest first
with a fresh derivation memory; a state that repeated is replayed again at its
last repeat, so rates come out over the same intervals that ingest saw.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from checker.schemas import Report
from remediator.host_evaluation import evaluate_host, report_signals
from remediator.models import Host
from remediator.models import Report as ReportRow
from remediator.rules import RuleSet


@dataclass
class Hit:
    rule_id: str
    hostname: str
    first_at: dt.datetime
    last_at: dt.datetime
    firings: int
    subject: str
    peak: float


@dataclass
class BacktestResult:
    since: dt.datetime
    hosts: int = 0
    reports: int = 0
    hits: list[Hit] = field(default_factory=list)

    def by_rule(self) -> dict[str, list[Hit]]:
        grouped: dict[str, list[Hit]] = {}
        for hit in self.hits:
            grouped.setdefault(hit.rule_id, []).append(hit)
        return grouped


def backtest(session: Session, ruleset: RuleSet, since: dt.datetime) -> BacktestResult:
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
