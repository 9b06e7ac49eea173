"""Ingest: batches in one transaction, storage that grows with change, nothing lost."""

from __future__ import annotations

import datetime as dt
import random

from kombu.transport.memory import Channel
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from checker.schemas import KernelEvent, KernelLogState, Report
from core.db import Database
from remediator import ingest as ingest_module
from remediator.ingest import ingest, report_digest
from remediator.models import Host, Remediation, Signal
from remediator.models import Report as ReportRow
from remediator.rules import load_ruleset
from tests.builders.reports import T0, edac_report, payload
from tests.builders.runtime import central, runtime_of

RULES = load_ruleset([])


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def rows(session: Session) -> list[ReportRow]:
    return list(session.scalars(select(ReportRow).order_by(ReportRow.captured_at)))


def test_unchanged_report_costs_a_timestamp_update(session: Session) -> None:
    reports = [edac_report(ce=5, at=at(60 * i)) for i in range(4)]
    assert len({report_digest(r) for r in reports}) == 1  # same observations, different ids and times
    for report in reports:
        ingest(session, [report], ruleset=RULES)
    [row] = rows(session)
    assert row.id == reports[0].report_id
    assert row.repeats == 3
    assert row.last_captured_at == at(180)
    host = session.scalars(select(Host)).one()
    assert host.last_report_id == reports[-1].report_id


def test_a_change_is_a_new_row_and_a_signal(session: Session) -> None:
    ingest(session, [edac_report(ce=5, at=at(0)), edac_report(ce=5, at=at(60))], ruleset=RULES)
    ingest(session, [edac_report(ce=65, at=at(120))], ruleset=RULES)
    stored = rows(session)
    assert [(r.repeats, r.captured_at) for r in stored] == [(1, at(0)), (0, at(120))]
    [rate] = session.scalars(select(Signal).where(Signal.kind == "dimm_ce_rate")).all()
    assert rate.value == 1.0  # 60 errors over the 60 s since the previous report, not since the last change


def test_batch_is_evaluated_oldest_first_whatever_the_order(session: Session) -> None:
    batch = [edac_report(ce=60 * i, at=at(60 * i)) for i in range(5)]
    random.Random(7).shuffle(batch)
    result = ingest(session, batch, ruleset=RULES)
    assert len(result.accepted) == 5
    rates = session.scalars(select(Signal.value).where(Signal.kind == "dimm_ce_rate")).all()
    assert rates == [1.0, 1.0, 1.0, 1.0]


def test_redelivery_and_late_arrivals_are_not_evaluated_again(session: Session) -> None:
    first, second = edac_report(ce=0, at=at(0)), edac_report(ce=6000, at=at(60))
    ingest(session, [first, second], ruleset=RULES)
    again = ingest(session, [second, first, second], ruleset=RULES)
    assert again.accepted == []
    assert sorted(map(str, again.duplicates)) == sorted(map(str, [second.report_id, first.report_id, second.report_id]))
    assert session.scalar(select(func.count()).select_from(Signal).where(Signal.kind == "dimm_ce_rate")) == 1


def test_many_hosts_in_one_batch_are_registered_once(session: Session) -> None:
    batch = [edac_report(f"bulk-{i:03d}", at=at(0)) for i in range(120)]
    batch += [edac_report(f"bulk-{i:03d}", at=at(60)) for i in range(120)]
    result = ingest(session, batch, ruleset=RULES)
    assert len(result.accepted) == 240
    assert session.scalar(select(func.count()).select_from(Host)) == 120
    assert session.scalar(select(func.sum(ReportRow.repeats))) == 120


def test_database_outage_hands_the_batch_to_a_retrying_task(celery_app: object) -> None:
    """The batch consumer acks after it returns, so it must not drop reports when the database is down."""
    from celery_batches import SimpleRequest

    from remediator import tasks

    unreachable = Database("postgresql+psycopg://postgres@127.0.0.1:1/nowhere")
    central(unreachable, celery_app)  # the in-process app's tasks now run with that database
    for queue in Channel.queues.values():
        queue.queue.clear()
    payloads = [payload(edac_report(f"outage-{i}")) for i in range(3)]
    requests = [
        SimpleRequest(str(i), "remediator.ingest_report", (p,), {}, {}, "test", False, None, None, {})
        for i, p in enumerate(payloads)
    ]
    tasks.ingest_report.run(requests)
    ingest_queue = Channel.queues["ingest"]
    assert ingest_queue.qsize() == 1
    message = ingest_queue.get()
    assert message["headers"]["task"] == "remediator.ingest_reports"
    assert message["headers"]["eta"] is not None  # retried after a pause, not spun
    unreachable.dispose()


def test_a_report_that_trips_a_bug_fails_alone(db: Database, monkeypatch: object) -> None:
    from remediator import tasks

    poison = edac_report("poison-1")
    real = ingest_module.report_signals

    def flaky(host: Host, report: object, memory: dict[str, object]) -> list[object]:
        if host.hostname == "poison-1":
            raise ZeroDivisionError("a bug")
        return real(host, report, memory)  # type: ignore[arg-type]

    monkeypatch.setattr(ingest_module, "report_signals", flaky)  # type: ignore[attr-defined]
    payloads = [payload(edac_report("fine-1")), payload(poison), payload(edac_report("fine-2"))]
    result = tasks.ingest_payloads(runtime_of(db).remediator, payloads)
    assert len(result.accepted) == 2
    with db.session() as session:
        names = set(session.scalars(select(Host.hostname)))
    assert {"fine-1", "fine-2"} <= names


def test_reports_from_the_future_are_refused(session: Session) -> None:
    from remediator.payloads import parse_reports

    now = dt.datetime.now(dt.UTC)
    ahead = edac_report("skewed-1", at=now + dt.timedelta(hours=2))
    fine = edac_report("fine-1", at=now + dt.timedelta(minutes=1))  # within the allowed skew
    reports, refused = parse_reports([payload(ahead), payload(fine)], now=now)
    assert [r.host.hostname for r in reports] == ["fine-1"]
    assert refused[0].index == 0
    assert refused[0].errors[0].startswith("captured_at: 7200 s ahead")


# -- late reports (issue 13, hole 12) ---------------------------------------------------------------


def with_lockup(report: Report, k: int, *, lockup: bool = True) -> Report:
    """The report of cycle k, its kernel-log read covering records 10k..10k+9 (one soft lockup in it, or none)."""
    line = "watchdog: BUG: soft lockup - CPU#3 stuck for 22s! [kworker/3:1:123]"
    events = [
        KernelEvent(kind="soft_lockup", seq=10 * k + 5, timestamp=report.captured_at, subject="CPU 3", lines=[line])
    ]
    klog = KernelLogState(
        source="kmsg", boot_id="boot-1", first_seq=10 * k, last_seq=10 * k + 9, lines_read=10,
        events=events if lockup else [],
    )  # fmt: skip
    return report.model_copy(update={"observations": report.observations.model_copy(update={"kernel_log": klog})})


def lockup_reports() -> list[Report]:
    return [with_lockup(edac_report(ce=0, at=at(60 * k)), k, lockup=k != 2) for k in range(1, 5)]


def test_a_late_report_is_stored_and_its_events_are_counted_once(session: Session) -> None:
    one, two, three, four = lockup_reports()
    ingest(session, [one, two], ruleset=RULES)
    ingest(session, [four], ruleset=RULES)  # an ingester died holding three
    late = ingest(session, [three], ruleset=RULES)
    assert late.accepted == [three.report_id]
    assert late.remediations  # the third soft lockup of the day: soft-lockups plans its reboot
    planned = session.get_one(Remediation, late.remediations[0])
    assert planned.created_at == four.captured_at  # decided as of the host's latest report, not in the past
    assert three.report_id in {r.id for r in rows(session)}
    host = session.scalars(select(Host)).one()
    assert host.last_report_id == four.report_id  # the newest stays the newest
    counts = session.scalars(
        select(Signal).where(Signal.kind == "kernel_event_count", Signal.report_id == three.report_id)
    ).all()
    assert [(s.value, s.detail["late"]) for s in counts] == [(3.0, True)]
    again = ingest(session, [three], ruleset=RULES)
    assert (again.accepted, again.duplicates, again.remediations) == ([], [three.report_id], [])


def test_a_late_report_of_a_stored_state_is_a_duplicate(session: Session) -> None:
    """A repeat that was folded into a stored row, delivered again: its id is not stored, but the row holds it."""
    reports = [edac_report(ce=5, at=at(60 * i)) for i in range(4)]
    ingest(session, reports, ruleset=RULES)
    again = ingest(session, [reports[2]], ruleset=RULES)
    assert again.duplicates == [reports[2].report_id]
    [row] = rows(session)
    assert row.repeats == 3


def test_a_late_report_moves_no_rate_back_and_resets_no_other_rules_timer(session: Session) -> None:
    ruleset = load_ruleset([])
    storm = [with_lockup(edac_report(ce=3000 * k, at=at(60 * k)), k, lockup=False) for k in range(0, 3)]
    ingest(session, [storm[0]], ruleset=ruleset)
    ingest(session, [storm[2]], ruleset=ruleset)  # 50 CE/s: dimm-ce-storm's `for: 30s` starts
    host = session.scalars(select(Host)).one()
    since = host.memory["rules"]["dimm-ce-storm"]["since_by"]  # a DIMM rule: a timer per DIMM
    assert len(since) == 1
    edac_state = dict(host.memory["edac"])
    late = with_lockup(edac_report(ce=3000, at=at(60)), 1)
    assert ingest(session, [late], ruleset=ruleset).accepted == [late.report_id]
    session.refresh(host)
    assert host.memory["rules"]["dimm-ce-storm"]["since_by"] == since
    assert host.memory["edac"] == edac_state
    rates = session.scalars(select(Signal).where(Signal.kind == "dimm_ce_rate")).all()
    assert [s.report_id for s in rates] == [storm[2].report_id]


def test_a_soft_lockup_from_the_new_boot_before_the_reboots_end_stamp_escalates(session: Session) -> None:
    """The agent reports from the new boot before its worker stamps the reboot's result (resume() at
    worker_ready), so that first report is captured before the result's `finished_at`. It is after the fix all
    the same (another boot), and its new soft lockup is the fault returning: kernel_event_count is emitted only
    for reports with new events, so a firing skipped here would never come back and the fix would settle."""
    from remediator.models import Decision, RemediationState, StepState

    first = ingest(session, [with_lockup(edac_report(ce=0, at=at(60 * k)), k) for k in range(1, 4)], ruleset=RULES)
    [remediation_id] = first.remediations
    fix = session.get_one(Remediation, remediation_id)
    assert fix.rule_id == "soft-lockups"
    reboot = next(step for step in fix.steps if step.action == "reboot")
    for step in fix.steps:
        step.state, step.finished_at = StepState.succeeded, at(300)
    reboot.result = {
        "outcome": "succeeded",
        "changed": {"completed_across_restart": True},
        "verified": {"boot_id": "boot-2"},
        "finished_at": at(300).isoformat(),  # stamped at worker_ready, after the agent's first report
    }
    fix.state, fix.settle_until = RemediationState.verifying, at(3600)
    session.flush()

    report = with_lockup(edac_report(ce=0, at=at(290)), 0)  # the new boot's first report, its first lockup
    klog = report.observations.kernel_log
    assert klog is not None
    report = report.model_copy(
        update={
            "host": report.host.model_copy(update={"boot_id": "boot-2"}),
            "observations": report.observations.model_copy(
                update={"kernel_log": klog.model_copy(update={"boot_id": "boot-2"})}
            ),
        }
    )
    result = ingest(session, [report], ruleset=RULES)
    assert result.accepted == [report.report_id]
    session.refresh(fix)
    assert fix.state != RemediationState.verifying  # escalated: the fix did not hold
    outcomes = session.scalars(
        select(Decision.outcome).where(Decision.rule_id == "soft-lockups", Decision.remediation_id == fix.id)
    ).all()
    assert "skipped" not in outcomes
