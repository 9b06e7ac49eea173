"""Ingest: a batch of reports in one transaction, each stored and evaluated once.

Per batch: the hosts it names are locked (registered first if new), so two
workers never evaluate the same host at once; then each host's reports are
taken oldest first. A report that says what the previous one said costs a
timestamp update on the stored row; a new observation state is one new row.

A report no newer than the host's latest is a duplicate (its id is stored, or
a stored row of the host spans its time with the same content) or late: it
arrived after a newer one (an ingester died holding it, or two ingesters
committed one host's reports in the other order). A late report is stored as
its own row, and the rows only it carries (kernel-log events, SEL entries,
rasdaemon rows past a cursor the agent has since moved) are counted into the
host's windows once (remediator.derive.late); its counters and snapshots are
older than what is known and derive nothing, so no rate runs backwards.

Payloads are validated by remediator.payloads; signals come from the report
and the host's derivation memory (remediator.host_evaluation), and the rules
decide what to plan.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import time
import uuid
from collections import defaultdict
from typing import Any, cast

import orjson
from sqlalchemy import Table, bindparam, select
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from checker.schemas import Report
from core import audit, metrics
from core.db import Database, insert_ignoring_conflicts, utcnow
from remediator import capacity_class, wire
from remediator.benchmarks import outlier_signals
from remediator.derive import derive_late
from remediator.evaluate import Firing, evaluate
from remediator.group_locks import lock_group_tickets
from remediator.host_evaluation import evaluate_host, report_signals
from remediator.hostauth import HostKeys, SignedPayload, about_the_signer, authenticate
from remediator.models import Host, HostState, Signal
from remediator.models import Report as ReportRow
from remediator.payloads import parse_one
from remediator.planning import decide
from remediator.rules import RuleSet
from remediator.schemas import IngestResult, Refusal, WireBase
from remediator.signals import SignalValue

log = logging.getLogger(__name__)
SYSTEM = "system:remediator"


def report_digest(report: Report) -> str:
    """What the report says, without what changes every cycle by nature.

    Left out: when it was said, how long collectors took, and counters that
    grow whatever the hardware does (interrupt counts, power-on hours,
    temperatures, log cursors, the agent's own memory and CPU time, the files the
    isolated-workload scan read). Their meaning is in the signals derived from
    them, which are stored on their own; the stored body keeps the values of
    the first report of each state.
    """
    doc = report.model_dump(
        mode="json",
        include={"host", "observations", "collectors"},
        exclude={
            "host": {"agent_version"},
            "collectors": {"__all__": {"duration_ms"}},
            "observations": {
                "interrupts": {"rows"},
                "disks": {"__all__": {"power_on_hours", "temperature_c"}},
                "kernel_log": {"first_seq", "last_seq", "lines_read"},
                "sensors": {"__all__": {"reading"}},
                "agent": {"rss_kb", "cpu_seconds", "last_delivery"},
                "isolated_workload": {"processes_scanned", "threads_read"},  # any process start moves them
                # the cputime watch's scan moves with every process start and every second of uptime
                "cputime": {
                    "checked": True,
                    "threads_read": True,
                    "bytes_read": True,
                    "uptime_s": True,
                    # where its rotation through the process list is, and what this cycle's slice hit
                    "caps_hit": True,
                    "rotation_cycles": True,
                    "rotation_checked": True,
                    "rotation_ahead": True,
                    "rechecked": True,
                    "processes": {"__all__": {"cputime_s", "elapsed_s", "excess_s", "stat_line"}},
                },
            },
        },
    )
    return hashlib.sha256(orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)).hexdigest()


def _same_stored_day(host: Host, report: Report) -> bool:
    """Whether a repeat of the host's stored state may extend that row: only within its UTC day,
    so that no row outlives the day it was stored in (remediator.retention prunes by day)."""
    if host.last_stored_report_id is None or host.last_stored_at is None:
        return False
    return host.last_stored_at.astimezone(dt.UTC).date() == report.captured_at.astimezone(dt.UTC).date()


def lock_hosts(session: Session, reports: list[Report]) -> dict[str, Host]:
    """The batch's hosts, registered if new, locked in id order (no deadlocks between batches)."""
    first_seen: dict[str, Report] = {}
    for report in reports:
        first_seen.setdefault(report.host.hostname, report)
    names = sorted(first_seen)
    query = select(Host).where(Host.hostname.in_(names)).order_by(Host.id).with_for_update()
    hosts = {h.hostname: h for h in session.scalars(query)}
    missing = [name for name in names if name not in hosts]
    if missing:
        rows: list[dict[str, Any]] = [
            {
                "hostname": name,
                "machine_id": first_seen[name].host.machine_id,
                "report_interval_s": first_seen[name].interval_s,
                "labels": {},
                "memory": {},
            }
            for name in missing
        ]
        insert_ignoring_conflicts(session, Host.__table__, rows, keys=["hostname"])
        for name in missing:
            audit.record(session, actor=SYSTEM, action="remediator.host.registered", object_type="host", object_id=name)
        added = select(Host).where(Host.hostname.in_(missing)).order_by(Host.id).with_for_update()
        hosts.update({h.hostname: h for h in session.scalars(added)})
    return hosts


def stored_ids(session: Session, unique: dict[Any, Report]) -> dict[Any, str]:
    """Report ids of this batch that a stored report already has (id -> its host's name). One indexed
    lookup per batch. Another host's id is refused: a report id is unique across the fleet, so such a
    report is never stored beside the other or dropped as a duplicate while the sender is told it was
    accepted. The same host's id is a duplicate delivery."""
    found = session.execute(
        select(ReportRow.id, Host.hostname)
        .join(Host, Host.id == ReportRow.host_id)
        .where(ReportRow.id.in_(list(unique)))
    ).all()
    return dict(found)


def spans_same_state(session: Session, host: Host, report: Report, digest: str) -> bool:
    """Whether a stored row of the host spans the report's time with the same content: the report is
    one of that row's repeats (or cannot be told from one), and storing it again would add nothing."""
    table = cast(Table, ReportRow.__table__)
    query = (
        select(table.c.id)
        .where(
            table.c.host_id == host.id,
            table.c.captured_at <= report.captured_at,
            table.c.last_captured_at >= report.captured_at,
            table.c.digest == digest,
        )
        .limit(1)
    )
    return session.execute(query).first() is not None


def _report_row(host: Host, report: Report, digest: str, received_at: dt.datetime) -> dict[str, Any]:
    return {
        "id": report.report_id,
        "host_id": host.id,
        "captured_at": report.captured_at,
        "last_captured_at": report.captured_at,
        "repeats": 0,
        "digest": digest,
        "received_at": received_at,
        "schema_version": report.schema_version,
        "body": report.model_dump(mode="json"),
    }


def _signal_rows(host: Host, report: Report, signals: list[SignalValue]) -> list[dict[str, Any]]:
    return [
        {
            "host_id": host.id,
            "report_id": report.report_id,
            "kind": s.kind,
            "subject": s.subject,
            "value": s.value,
            "detail": s.detail,
            "observed_at": report.captured_at,
        }
        for s in signals
    ]


def _late(
    session: Session, host: Host, report: Report, ruleset: RuleSet, received_at: dt.datetime
) -> tuple[dict[str, Any], list[SignalValue], list[Firing]] | None:
    """A report older than the host's latest whose id is not stored: None if a stored row of the host
    already holds its content (a repeat), else its row, the signals of the rows only it carries, and the
    rules those fire. Only the rules whose signal it yields are evaluated (an absent signal would reset
    another rule's `for` timer), at the host's latest time, so no timer runs backwards."""
    digest = report_digest(report)
    if spans_same_state(session, host, report, digest):
        return None
    memory = dict(host.memory or {})
    derived = derive_late(report, memory.get("derive") or {})
    if derived.changed:
        memory["derive"] = derived.memory
    signals = derived.signals
    firings: list[Firing] = []
    if signals:
        rules = [rule for rule in ruleset.rules if any(rule.when.matches(s) for s in signals)]
        latest = host.last_report_at or report.captured_at
        firings = evaluate(
            rules,
            signals,
            hardware_class=host.hardware_class,
            datacenter=host.datacenter,
            labels=host.labels,
            memory=memory,
            now=latest,
        )
    host.memory = memory
    metrics.REPORTS.labels("late").inc()
    log.info(
        "remediator.report.late",
        extra={
            "fields": {
                "host": host.hostname,
                "report_id": str(report.report_id),
                "captured_at": report.captured_at.isoformat(),
                "latest": host.last_report_at.isoformat() if host.last_report_at else None,
                "signals": len(signals),
            }
        },
    )
    return _report_row(host, report, digest, received_at), signals, firings


def ingest(
    session: Session, reports: list[Report], *, ruleset: RuleSet, now: dt.datetime | None = None
) -> IngestResult:
    """Store each new report once, derive its signals, and decide what the rules ask for."""
    result = IngestResult()
    received_at = now or utcnow()
    unique: dict[Any, Report] = {}
    for report in reports:
        if report.report_id in unique:
            result.duplicates.append(report.report_id)
        else:
            unique[report.report_id] = report
    if not unique:
        return result
    hosts = lock_hosts(session, list(unique.values()))
    stored = stored_ids(session, unique)
    for report_id, owner in stored.items():
        if owner == unique[report_id].host.hostname:
            continue
        report = unique.pop(report_id)
        result.refused.append(
            Refusal(
                index=-1,
                report_id=str(report_id),
                errors=[f"report_id: {report_id} is a stored report of {owner}, not of {report.host.hostname}"],
            )
        )
    new_rows: list[dict[str, Any]] = []
    repeats: dict[Any, list[Any]] = defaultdict(lambda: [0, None])
    signal_rows: list[dict[str, Any]] = []
    fired: list[tuple[Host, Report, list[Firing], dt.datetime]] = []  # decided at the time given

    for report in sorted(unique.values(), key=lambda r: (r.host.hostname, r.captured_at)):
        host = hosts[report.host.hostname]
        if host.last_report_at is not None and report.captured_at <= host.last_report_at:
            late = None if report.report_id in stored else _late(session, host, report, ruleset, received_at)
            if late is None:
                result.duplicates.append(report.report_id)
                continue
            row, signals, firings = late
            new_rows.append(row)
            result.accepted.append(report.report_id)
            signal_rows.extend(_signal_rows(host, report, signals))
            if firings:  # decided as of the host's latest report: nothing is planned in the past
                fired.append((host, report, firings, host.last_report_at or report.captured_at))
            continue
        digest = report_digest(report)
        if digest == host.last_digest and _same_stored_day(host, report):
            entry = repeats[(host.last_stored_report_id, host.last_stored_at)]
            entry[0] += 1
            entry[1] = report.captured_at
        else:
            new_rows.append(_report_row(host, report, digest, received_at))
            host.last_stored_report_id = report.report_id
            host.last_stored_at = report.captured_at
            host.last_digest = digest
        memory = dict(host.memory or {})
        signals = report_signals(host, report, memory)
        # judged here, not in derive: it needs the class's scores
        signals += outlier_signals(session, host, signals, memory, report.captured_at, boot_id=report.host.boot_id)
        signals += capacity_class.class_signals(session, host, report, memory, report.captured_at)  # the class median
        firings = evaluate_host(host, signals, ruleset, memory, report.captured_at)
        host.memory = memory
        host.last_report_at = report.captured_at
        host.last_report_id = report.report_id
        host.boot_id = report.host.boot_id
        host.report_interval_s = report.interval_s
        if host.state == HostState.unreachable:
            host.state = HostState.in_service
        result.accepted.append(report.report_id)
        signal_rows.extend(_signal_rows(host, report, signals))
        if firings:
            fired.append((host, report, firings, report.captured_at))

    insert_ignoring_conflicts(session, ReportRow.__table__, new_rows, keys=["id", "captured_at"])
    if repeats:
        table = cast(Table, ReportRow.__table__)
        session.execute(
            table.update()
            .where(table.c.id == bindparam("row_id"), table.c.captured_at == bindparam("row_at"))
            .values(repeats=table.c.repeats + bindparam("count"), last_captured_at=bindparam("at")),
            [
                {"row_id": row_id, "row_at": row_at, "count": count, "at": at}
                for (row_id, row_at), (count, at) in repeats.items()
            ],
        )
    if signal_rows:
        session.execute(cast(Table, Signal.__table__).insert(), signal_rows)
        metrics.count_signals(row["kind"] for row in signal_rows)
    session.flush()
    lock_group_tickets(session, [(host, f, at) for host, _, firings, at in fired for f in firings])
    for host, report, firings, decided_at in fired:
        for firing in firings:  # highest priority first; once one is planned the rest are held
            remediation = decide(session, host, firing, ruleset, report, decided_at)
            if remediation is not None:
                result.remediations.append(remediation.id)
    session.flush()
    result.bases = [
        WireBase(hostname=host.hostname, report_id=host.last_stored_report_id, captured_at=host.last_stored_at)
        for host in hosts.values()
        if host.last_stored_report_id is not None and host.last_stored_at is not None
    ]
    return result


def _parsed(entry: SignedPayload, now: dt.datetime) -> Report | Refusal:
    """A payload validated, or refused (index 0; the caller sets it). A delta report is refused whole (stage 1
    takes deltas over HTTP only: remediator.wire.stream_refusal). Whatever a payload trips, it is refused
    alone, naming what went wrong: one payload never loses its batch nor stops the stream's consumer."""
    try:
        if (refusal := wire.stream_refusal(entry.body)) is not None:
            return refusal
        return parse_one(entry.body, now)
    except Exception as error:  # a RecursionError of a deeply nested payload, or a bug: this payload only
        problem = f"report: could not be read ({type(error).__name__}: {str(error)[:200]})"
        log.warning("remediator.report.unreadable", extra={"fields": {"error": problem}})
        return Refusal(index=0, errors=[problem])


def ingest_batch(
    payloads: list[Any],
    *,
    database: Database,
    ruleset: RuleSet,
    host_keys: HostKeys | None = None,
    require_signed: bool = False,
) -> IngestResult:
    """Authenticate, validate, then store and evaluate in one transaction; refusals are one by one.

    A payload is a report (JSON text or object) or a SignedPayload from the
    broker (remediator.hostauth): a bad signature, or a host reporting for
    another, is refused like a malformed report. A delta report (checker.wire)
    is refused: stage 1 takes deltas over HTTP only. A payload that cannot be
    read at all (nested too deep, a bug) is refused alone, naming what.

    An unreachable database raises OperationalError to the caller, whose
    transport keeps the batch for later. If the batch fails for any other
    reason, each report is retried in its own transaction, so one report that
    trips a bug fails alone (logged with its id) and the rest are stored.
    """
    now, started = utcnow(), time.perf_counter()
    entries = [p if isinstance(p, SignedPayload) else SignedPayload(body=p) for p in payloads]
    passed, refused = authenticate(entries, host_keys, required=require_signed)
    reports: list[Report] = []
    at_index: dict[uuid.UUID, int] = {}
    for index, entry in passed:
        parsed = _parsed(entry, now)
        if isinstance(parsed, Report) and (problem := about_the_signer(parsed, entry)) is not None:
            parsed = Refusal(index=index, report_id=str(parsed.report_id), errors=[problem])
        if isinstance(parsed, Report):
            reports.append(parsed)
            at_index.setdefault(parsed.report_id, index)
        else:
            refused.append(parsed.model_copy(update={"index": index}))
    refused.sort(key=lambda r: r.index)
    metrics.REPORTS.labels("refused").inc(len(refused))
    for refusal in refused:
        log.warning(
            "remediator.report.refused",
            extra={"fields": {"index": refusal.index, "report_id": refusal.report_id, "errors": refusal.errors}},
        )
    try:
        with database.session() as session:
            result = ingest(session, reports, ruleset=ruleset)
        metrics.observe_ingest(result, reports, time.perf_counter() - started)
    except OperationalError:
        raise
    except Exception:  # a bug tripped by one report must not sink the others: isolate it
        result = IngestResult()
        if len(reports) == 1:
            log.exception("remediator.report.failed", extra={"fields": {"report_id": str(reports[0].report_id)}})
        else:
            for report in reports:
                one = ingest_batch([report.model_dump(mode="json")], database=database, ruleset=ruleset)
                result.accepted += one.accepted
                result.duplicates += one.duplicates
                result.remediations += one.remediations
                result.refused += one.refused
                result.bases += one.bases
    # what ingest itself refused (a report id another host's report has), at its place in the batch
    clashes = [
        r.model_copy(update={"index": at_index.get(uuid.UUID(r.report_id), -1) if r.report_id else -1})
        for r in result.refused
    ]
    metrics.REPORTS.labels("refused").inc(len(clashes))
    result.refused = sorted([*refused, *clashes], key=lambda r: r.index)
    return result
