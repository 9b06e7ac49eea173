"""Late reports (issue 13, hole 12): a report that arrives after a newer one of its host still has rows no
other report carries; they are counted once, into the same windows, and nothing runs backwards.

Each test delivers the same reports on time and out of order (held back, delivered twice) and compares
what the rules would see: the counts in the windows, the rows named, the errors summed."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from checker.schemas import CollectorRun, KernelLogState, MceRecord, RasAerEvent, RasdaemonState, Report
from remediator.derive import derive, derive_late
from remediator.derive.gaps import fill
from remediator.derive.memory import load_memory
from remediator.signals import SignalValue
from tests.builders.observations import (
    BASELINES,
    HOST,
    at,
    event,
    of,
    ras_event,
    report,
    sel_entry,
    sel_state,
)

ROUNDS = 6


def cycle(k: int, *, boot: str = "boot-1") -> Report:
    """The host's k-th report: each incremental source moved its cursor past one new row."""
    when = at(k)
    return report(
        when,
        boot=boot,
        kernel_log=KernelLogState(  # records 96+10k..105+10k read, one of them a soft lockup
            source="kmsg", boot_id=boot, events=[event("soft_lockup", 100 + 10 * k, when, "CPU 3")],
            first_seq=96 + 10 * k, last_seq=105 + 10 * k, lines_read=10,
        ),
        sel=sel_state(
            sel_entry(k, "Power Supply", "Failure detected", component=f"PS{k}", when=when), count=k, last_record_id=k
        ),
        rasdaemon=RasdaemonState(
            memory_events=[ras_event(k, count=3)],
            last_id=k,
            aer_events=[RasAerEvent(id=k, dev_name="0000:3b:00.0", err_type="Corrected", err_msg="Receiver Error")],
            last_ids={"mc_event": k, "aer_event": k, "mce_record": k},
            mce_records=[
                MceRecord(
                    id=k, timestamp=when, cpu=4, socket=0, bank=7, status="0x9c00004000010091",
                    error_class="memory", corrected=True, message="memory read error channel 1",
                )
            ],
        ),
    )  # fmt: skip


def deliver(order: Sequence[int]) -> tuple[list[SignalValue], dict[str, Any]]:
    """Derive the reports in the order given, as ingest does: on time, or late when older than the newest."""
    memory: dict[str, Any] = {}
    newest: dt.datetime | None = None
    signals: list[SignalValue] = []
    for k in order:
        one = cycle(k)
        if newest is not None and one.captured_at <= newest:
            derived = derive_late(one, memory)
        else:
            derived = derive(one, memory, HOST, baselines=BASELINES)
            newest = one.captured_at
        memory = json.loads(json.dumps(derived.memory))
        signals += derived.signals
    return signals, memory


def seen(signals: list[SignalValue]) -> dict[str, Any]:
    """What the rules are told over the run, independent of delivery order."""
    return {
        "psu": sorted(s.subject for s in of(signals, "psu_failure")),
        "ce_errors": sum(s.detail["delta"] for s in of(signals, "dimm_ce_rate")),
        "mce": sum(s.value for s in of(signals, "mce_memory_corrected")),
    }


def windows(memory: dict[str, Any]) -> dict[str, Any]:
    kept = load_memory(memory)
    assert kept.klog is not None
    return {
        "counts": {kind: sum(n for _, n in b) for kind, b in kept.klog.counts.items()},
        "aer": {dev: sum(n for _, n in b) for dev, b in kept.klog.devices.get("pcie_aer_corrected", {}).items()},
    }


IN_ORDER = list(range(1, ROUNDS + 1))


@pytest.mark.parametrize(
    "order",
    [
        [1, 2, 4, 3, 5, 6],  # an ingester died holding report 3
        [1, 2, 5, 3, 4, 6],  # two reports held back, delivered oldest first
        [1, 2, 5, 4, 3, 6],  # ... and newest first
        [1, 2, 4, 3, 3, 5, 6, 4],  # late and then delivered again; an on-time one delivered again
        [1, 2, 3, 6, 5, 4],  # the last three in reverse
    ],
    ids=["one-late", "two-late-oldest-first", "two-late-newest-first", "late-twice", "reversed-tail"],
)
def test_late_reports_count_what_only_they_carry_once(order: list[int]) -> None:
    expected_signals, expected_memory = deliver(IN_ORDER)
    signals, memory = deliver(order)
    assert seen(signals) == seen(expected_signals)
    assert windows(memory) == windows(expected_memory)
    assert load_memory(memory).gaps is None  # every gap a held-back report left was filled


def test_the_in_order_run_counts_every_row() -> None:
    """The baseline the permutations are held to is itself right (not two empty runs agreeing)."""
    signals, memory = deliver(IN_ORDER)
    # the first sight of rasdaemon's tables records their cursors only; the SEL's first sight counts the last day
    assert seen(signals) == {"psu": [f"PS{k}" for k in range(1, ROUNDS + 1)], "ce_errors": 15, "mce": 5}
    assert windows(memory) == {"counts": {"soft_lockup": ROUNDS}, "aer": {"0000:3b:00.0": ROUNDS - 1}}


def test_without_the_late_merge_the_held_back_rows_are_lost() -> None:
    """What hole 12 was: derive() alone drops a late report's rows."""
    memory: dict[str, Any] = {}
    signals: list[SignalValue] = []
    for k in [1, 2, 4, 3, 5, 6]:
        derived = derive(cycle(k), memory, HOST, baselines=BASELINES)
        memory, signals = derived.memory, signals + derived.signals
    assert "PS3" not in seen(signals)["psu"]
    assert windows(memory)["counts"] == {"soft_lockup": ROUNDS - 1}


def test_a_late_report_is_flagged_and_its_counters_derive_nothing() -> None:
    _, memory = deliver([1, 2, 4])
    late = derive_late(cycle(3), memory)
    assert {s.kind for s in late.signals} == {
        "kernel_event_count",
        "psu_failure",
        "dimm_ce_rate",
        "device_event_count",
        "mce_memory_corrected",
    }
    assert all(s.detail["late"] is True for s in late.signals)
    rate = of(late.signals, "dimm_ce_rate")[0]
    assert rate.detail["elapsed_s"] == cycle(3).interval_s  # over the late report's own cycle
    kept, before = load_memory(late.memory), load_memory(memory)
    assert (kept.at, kept.ras, kept.mce) == (before.at, before.ras, before.mce)  # cursors never move back
    assert kept.klog is not None
    assert before.klog is not None
    assert kept.klog.seq == before.klog.seq


def test_rows_outside_every_gap_are_not_counted() -> None:
    """A report older than the newest whose rows were counted already (a redelivery whose id the store
    lost) adds nothing; nor does one from another boot, whose sequence numbers name other records."""
    _, memory = deliver(IN_ORDER)
    assert derive_late(cycle(3), memory).signals == []
    assert derive_late(cycle(3, boot="boot-0"), memory).signals == []


def test_a_cleared_sel_drops_its_gaps() -> None:
    _, memory = deliver([1, 2, 4])
    assert "sel" in (load_memory(memory).gaps or {})
    cleared = report(at(5), sel=sel_state(sel_entry(1, "Event Logging Disabled", "Log area reset/cleared"), count=1))
    memory = derive(cleared, memory, HOST, baselines=BASELINES).memory
    assert "sel" not in (load_memory(memory).gaps or {})
    assert of(derive_late(cycle(3), memory).signals, "psu_failure") == []  # record 3 of the old log names nothing now


def test_a_reboot_keeps_the_previous_boots_gaps_only() -> None:
    _, memory = deliver([1, 2, 4])
    for k, boot in enumerate(["boot-2", "boot-3"], start=5):
        memory = derive(cycle(k, boot=boot), memory, HOST, baselines=BASELINES).memory
    spaces = set(load_memory(memory).gaps or {})
    assert "klog:boot-1" not in spaces  # two boots ago: its late events are not merged


def test_gaps_stay_bounded() -> None:
    memory: dict[str, Any] = {}
    for k in range(1, 200, 2):  # every other report lost for good
        memory = derive(cycle(k), memory, HOST, baselines=BASELINES).memory
    gaps = load_memory(memory).gaps or {}
    assert gaps
    assert all(len(kept) <= 16 for kept in gaps.values())
    assert len(json.dumps(memory)) < 16_000


def test_fill_takes_the_report_range_out_of_the_gaps() -> None:
    gaps = {"sel": [(3, 9), (20, 30)]}
    fill(gaps, "sel", [5, 6], 7)
    assert gaps == {"sel": [(3, 4), (8, 9), (20, 30)]}
    fill(gaps, "sel", [3], 9)
    assert gaps == {"sel": [(20, 30)]}
    fill(gaps, "sel", [20], 30)
    assert gaps == {}


def mcelog_cycle(k: int) -> Report:
    """The k-th report of a host whose machine checks come from mcelog's log file (no ids): the agent read
    one new corrected memory error past its file offset."""
    when = at(k)
    one = report(
        when,
        mce=[
            MceRecord(
                timestamp=when - dt.timedelta(seconds=5), cpu=2, socket=1, bank=8, status="0x9c00004000010091",
                error_class="memory", corrected=True, message=f"memory read error channel 1 (record {k})",
            )
        ],
    )  # fmt: skip
    one.collectors["mce"] = CollectorRun(status="ok", duration_ms=1.0, source="mcelog-file")
    return one


def deliver_mcelog(order: Sequence[int], reports: Callable[[int], Report] = mcelog_cycle) -> int:
    memory: dict[str, Any] = {}
    newest: dt.datetime | None = None
    counted = 0
    for k in order:
        one = reports(k)
        if newest is not None and one.captured_at <= newest:
            derived = derive_late(one, memory)
            assert all(s.detail["late"] is True for s in derived.signals)
        else:
            derived = derive(one, memory, HOST, baselines=BASELINES)
            newest = one.captured_at
        memory = json.loads(json.dumps(derived.memory))
        counted += sum(s.value for s in of(derived.signals, "mce_memory_corrected"))
    return counted


@pytest.mark.parametrize(
    "order",
    [[1, 2, 4, 3, 5, 6], [1, 2, 5, 4, 3, 6], [1, 2, 4, 3, 3, 5, 6, 4], [1, 2, 3, 6, 5, 4]],
    ids=["one-late", "two-late-newest-first", "late-twice", "reversed-tail"],
)
def test_late_mcelog_records_are_counted_once(order: list[int]) -> None:
    """mcelog's records carry no id; the keys (time and content) the deriver keeps for the last hour tell a
    late one apart from one already counted."""
    assert deliver_mcelog(IN_ORDER) == ROUNDS - 1  # the first sight counts nothing
    assert deliver_mcelog(order) == ROUNDS - 1


def test_a_late_mcelog_record_older_than_the_hour_kept_is_not_counted() -> None:
    """Past the hour of keys the deriver keeps, nothing tells a late record from one counted long ago: it
    is history (the negative case: a late merge that counted it could count a record twice)."""
    memory: dict[str, Any] = {}
    for k in (1, 2):
        memory = json.loads(json.dumps(derive(mcelog_cycle(k), memory, HOST, baselines=BASELINES).memory))
    hour_later = mcelog_cycle(2)
    hour_later.captured_at = at(2) + dt.timedelta(hours=2)
    assert hour_later.observations.mce is not None
    hour_later.observations.mce[0].timestamp = hour_later.captured_at - dt.timedelta(seconds=5)
    hour_later.observations.mce[0].message = "memory read error channel 1 (much later)"
    memory = json.loads(json.dumps(derive(hour_later, memory, HOST, baselines=BASELINES).memory))
    assert derive_late(mcelog_cycle(1), memory).signals == []  # long before the kept hour
    late = derive_late(mcelog_cycle(3).model_copy(update={"captured_at": hour_later.captured_at}), memory)
    assert late.signals == []  # record 3's time (k=3) is also more than an hour before the newest


def test_a_late_mcelog_record_is_not_counted_when_rasdaemon_has_the_same_events() -> None:
    """With rasdaemon's mce_record in the report, mcelog's records are the same events (mce.py): the late
    merge takes rasdaemon's rows by id and leaves mcelog's alone."""
    _, memory = deliver([1, 2, 4])
    late = cycle(3)
    late.observations.mce = mcelog_cycle(3).observations.mce
    found = derive_late(late, memory)
    assert sum(s.value for s in of(found.signals, "mce_memory_corrected")) == 1  # rasdaemon's row 3 only
