"""The replay behind `fleetfix rules backtest`: one share of the stored reports through a rule set.

What makes it fast, each kept to what gives the same hits as replaying host by host
(tests/remediator/test_backtest_equivalence.py holds the host-by-host algorithm and compares):

- One streamed query (a server-side cursor on PostgreSQL, `yield_per`) ordered by (host, captured_at),
  where there used to be a query per host loading every row of the host at once; the composite index
  ix_reports_host_captured serves the order, and memory stays bounded whatever the history's length.
- Bodies come as JSON text and are decoded with orjson, then validated once into a Report as before.
  They are not taken on trust (pydantic's `model_construct` builds no nested model and parses no
  timestamp, so the derivers would meet dicts and strings); a repeated state is replayed from the same
  parsed report with only its captured_at moved, as the host-by-host replay did.
- A host's rules are narrowed once to those whose selector picks it (its inventory does not change
  during a replay), and per report to those that can change anything: a rule whose signal kind the
  report does not carry and that holds no timer or window samples for the host neither fires nor
  changes its state in remediator.evaluate. A windowed rule whose window emptied leaves
  `{"samples": []}`, which evaluate reads exactly as no entry; it is dropped so that rule is skipped too.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
from sqlalchemy import Text, cast, select
from sqlalchemy.orm import Session

from checker.schemas import Report
from remediator.evaluate import Firing
from remediator.host_evaluation import evaluate_host, report_signals
from remediator.models import Host
from remediator.models import Report as ReportRow
from remediator.rules import Rule, RuleSet
from remediator.signals import SignalValue

STREAM_BATCH = 500  # rows fetched per round trip: ~10 MB of 19 KB bodies, few round trips
PROGRESS_EVERY = 200  # replays between progress calls: a display refreshes a few times a second, no more


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
    rows: int = 0  # stored report rows read (one per observation state)
    reports: int = 0  # reports replayed: each row, and its last repeat again if it repeated
    hits: list[Hit] = field(default_factory=list)

    def by_rule(self) -> dict[str, list[Hit]]:
        grouped: dict[str, list[Hit]] = {}
        for hit in self.hits:
            grouped.setdefault(hit.rule_id, []).append(hit)
        return grouped


@dataclass(frozen=True)
class StoredRow:
    host_id: int
    captured_at: dt.datetime
    last_captured_at: dt.datetime
    repeats: int
    body: str


def stored_rows(session: Session, since: dt.datetime, *, share: int = 0, shares: int = 1) -> Iterator[StoredRow]:
    """The rows of hosts `host_id % shares == share` last seen at or after `since`, host by host, oldest first.

    `captured_at` orders a host's rows as the host-by-host replay ordered them; the report id breaks
    ties so the order is the same every run."""
    query = (
        select(
            ReportRow.host_id,
            ReportRow.captured_at,
            ReportRow.last_captured_at,
            ReportRow.repeats,
            cast(ReportRow.body, Text),
        )
        .where(ReportRow.last_captured_at >= since)
        .order_by(ReportRow.host_id, ReportRow.captured_at, ReportRow.id)
        .execution_options(yield_per=STREAM_BATCH)
    )
    if shares > 1:
        query = query.where(ReportRow.host_id % shares == share)
    for host_id, captured_at, last_captured_at, repeats, body in session.execute(query):
        yield StoredRow(host_id, captured_at, last_captured_at, repeats, body)


def decode(body: str) -> Any:
    """The stored body as the JSON column would have returned it. orjson refuses integers past 64 bits,
    which the standard library reads; no report field holds one, but a body that did is read all the same."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return json.loads(body)


class HostRules:
    """The rules that select one host, in the rule set's order, indexed by the signal kind each reads."""

    def __init__(self, host: Host, ruleset: RuleSet) -> None:
        self.ruleset = ruleset
        self.rules = [
            rule
            for rule in ruleset.rules
            if rule.selector.selects(hardware_class=host.hardware_class, datacenter=host.datacenter, labels=host.labels)
        ]
        self.by_kind: dict[str, list[int]] = {}
        self.by_id: dict[str, int] = {}
        for index, rule in enumerate(self.rules):
            self.by_kind.setdefault(rule.when.signal, []).append(index)
            self.by_id[rule.id] = index

    def live(self, signals: list[SignalValue], state: dict[str, Any]) -> list[Rule]:
        """The rules that can fire or change their state now: those reading a kind the report carries, and
        those holding a timer or window samples for the host (module docstring)."""
        chosen: set[int] = set()
        for kind in {s.kind for s in signals}:
            chosen.update(self.by_kind.get(kind, ()))
        chosen.update(self.by_id[rule_id] for rule_id in state if rule_id in self.by_id)
        return [self.rules[index] for index in sorted(chosen)]


def evaluate_live(
    host: Host, signals: list[SignalValue], rules: HostRules, memory: dict[str, Any], now: dt.datetime
) -> list[Firing]:
    """evaluate_host over the rules that can fire or change their state now (module docstring)."""
    live = rules.live(signals, memory.get("rules") or {})
    if not live:
        return []
    ruleset = RuleSet.model_construct(rules=live, safety=rules.ruleset.safety)
    firings = evaluate_host(host, signals, ruleset, memory, now)
    state = memory.get("rules") or {}
    for rule in live:
        if state.get(rule.id) == {"samples": []}:
            del state[rule.id]
    return firings


class HostReplay:
    """One host's replay: a fresh derivation memory, the rules that select it, its hits so far."""

    def __init__(self, host: Host, ruleset: RuleSet, result: BacktestResult) -> None:
        self.host = host
        self.rules = HostRules(host, ruleset)
        self.result = result
        self.memory: dict[str, Any] = {}
        self.open_hits: dict[str, Hit] = {}
        result.hosts += 1

    def replay(self, row: StoredRow) -> int:
        """The row's report, and its last repeat if it repeated; returns how many reports that was."""
        report = Report.model_validate(decode(row.body))
        replays = [report]
        if row.repeats:
            replays.append(report.model_copy(update={"captured_at": row.last_captured_at}))
        self.result.rows += 1
        for replay in replays:
            self.result.reports += 1
            signals = report_signals(self.host, replay, self.memory)
            for firing in evaluate_live(self.host, signals, self.rules, self.memory, replay.captured_at):
                self._count(firing, replay.captured_at)
        return len(replays)

    def _count(self, firing: Firing, at: dt.datetime) -> None:
        hit = self.open_hits.get(firing.rule.id)
        if hit is None:
            hit = Hit(firing.rule.id, self.host.hostname, at, at, 0, firing.signal.subject, firing.signal.value)
            self.open_hits[firing.rule.id] = hit
            self.result.hits.append(hit)
        hit.last_at = at
        hit.firings += 1
        hit.peak = max(hit.peak, firing.signal.value)


def replay_share(
    session: Session,
    ruleset: RuleSet,
    since: dt.datetime,
    *,
    share: int = 0,
    shares: int = 1,
    progress: Callable[[int], None] | None = None,
) -> BacktestResult:
    """Replay every host of one share (all hosts when `shares` is 1), row by row as the stream yields
    them (no host's history is held whole); hits unsorted. `progress` is told of replayed reports."""
    result = BacktestResult(since=since)
    current: HostReplay | None = None
    pending = 0
    for row in stored_rows(session, since, share=share, shares=shares):
        if current is None or current.host.id != row.host_id:
            if current is not None:
                session.expunge(current.host)  # a long replay keeps no host it is done with
            current = HostReplay(session.get_one(Host, row.host_id), ruleset, result)
        pending += current.replay(row)
        if progress is not None and pending >= PROGRESS_EVERY:
            progress(pending)
            pending = 0
    if progress is not None and pending:
        progress(pending)
    return result
