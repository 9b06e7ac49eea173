"""The kernel-log collector: every kernel-log sample read through /dev/kmsg, the journal and dmesg
fallbacks, and the cursor that makes restarts lose and repeat nothing."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from bench.samples import (
    BOOT_ID,
    BTIME,
    REFERENCE,
    SnapshotBuilder,
    journal_records,
    kmsg_records,
    sample,
    sample_names,
)
from checker.collectors import kernel_log
from checker.collectors.context import CollectorState
from checker.parsers.kernel_events import parse_kernel_log
from checker.schemas import KernelEventKind, KernelLogState, Report

K = KernelEventKind
ONLY_LOG = {"kernel_log": kernel_log.collect}
SB_EDAC = "kernel-log/dmesg-T-sb-edac-sandybridge-ce-read.log"
# Power-limit notifications only: a CPU at its RAPL limit, no fault (tests/checker/test_kernel_events.py)
NO_EVENTS = {"kernel-log/dmesg-xeon-power-limit-notification-and-thermal-throttle-sysfs.txt"}
CE_LINE = "EDAC MC0: 1 CE memory read error on CPU_SrcID#0_Ha#0_Chan#2_DIMM#0 (channel:2 slot:0 page:0x849923)"


def log_of(report: Report) -> KernelLogState:
    state = report.observations.kernel_log
    assert state is not None, report.collectors["kernel_log"]
    return state


def shape(state: KernelLogState) -> list[tuple[KernelEventKind, str | None, int, int]]:
    return [(e.kind, e.subject, e.count, len(e.lines)) for e in state.events]


@pytest.mark.parametrize("name", sample_names("kernel-log"))
def test_every_kernel_log_sample_through_kmsg_gives_the_events_of_its_log(name: str, tmp_path: Path) -> None:
    text = sample(name)
    snap = SnapshotBuilder(tmp_path).boot().kmsg(kmsg_records(text))
    report = snap.cycle(collectors=ONLY_LOG)
    assert report.collectors["kernel_log"].status == "ok"
    state = log_of(report)
    expected = parse_kernel_log(text, "file", reference=REFERENCE).value
    assert shape(state) == shape(expected)
    if name not in NO_EVENTS:
        assert state.events, "every kernel-log sample shows at least one hardware event"
    assert state.lines_read == len(kmsg_records(text).splitlines())
    assert all(e.seq is not None and e.timestamp is not None for e in state.events)


def test_kmsg_facts_of_the_sb_edac_sample(tmp_path: Path) -> None:
    snap = SnapshotBuilder(tmp_path).boot().kmsg(kmsg_records(sample(SB_EDAC), first_seq=500))
    state = log_of(snap.cycle(collectors=ONLY_LOG))
    assert (state.source, state.boot_id, state.first_seq, state.last_seq) == ("kmsg", BOOT_ID, 500, 507)
    ce = state.events[1]
    assert (ce.kind, ce.subject, ce.count, ce.seq) == (K.edac_ce, "CPU_SrcID#0_Ha#0_Chan#2_DIMM#0", 1, 501)
    assert "HANDLING MCE MEMORY ERROR" in ce.lines[0]
    assert ce.timestamp == dt.datetime.fromtimestamp(BTIME, dt.UTC) + dt.timedelta(seconds=1)


def test_cursor_across_restarts_reads_each_line_once(tmp_path: Path) -> None:
    cursor_file = tmp_path / "cursors.json"
    snap = SnapshotBuilder(tmp_path / "snap").boot()
    snap.kmsg(f"6,10,1000000,-;{CE_LINE}\n6,11,1000001,-;usb 1-1: new device\n")
    first = snap.cycle(CollectorState(cursor_file), collectors=ONLY_LOG)
    assert [e.seq for e in log_of(first).events] == [10]
    # The report was not delivered (no commit): a restarted agent reads the same lines again.
    again = snap.cycle(CollectorState(cursor_file), collectors=ONLY_LOG)
    assert [e.seq for e in log_of(again).events] == [10]
    state = CollectorState(cursor_file)
    snap.cycle(state, collectors=ONLY_LOG)
    state.commit()
    assert CollectorState(cursor_file).get("kernel_log") == {"source": "kmsg", "boot_id": BOOT_ID, "seq": 11}
    # After the restart the ring buffer still holds 10 and 11, and has 12 and 13 now.
    snap.kmsg(
        f"6,10,1000000,-;{CE_LINE}\n6,11,1000001,-;usb 1-1: new device\n"
        f"6,12,2000000,-;{CE_LINE.replace('1 CE', '3 CE')}\n6,13,2000001,-;{CE_LINE}\n"
    )
    state = CollectorState(cursor_file)
    later = log_of(snap.cycle(state, collectors=ONLY_LOG))
    assert [(e.seq, e.count) for e in later.events] == [(12, 3), (13, 1)]
    assert (later.first_seq, later.lines_read, later.lost_records, later.rebooted) == (12, 2, 0, False)
    state.commit()
    nothing_new = log_of(snap.cycle(CollectorState(cursor_file), collectors=ONLY_LOG))
    assert (nothing_new.events, nothing_new.lines_read) == ([], 0)


def test_records_overwritten_before_they_were_read_are_counted(tmp_path: Path) -> None:
    state = CollectorState()
    state.stage("kernel_log", {"source": "kmsg", "boot_id": BOOT_ID, "seq": 99})
    state.commit()
    # The buffer wrapped: the oldest record left is 150 (EPIPE on a live read), and 152 is gone too.
    snap = SnapshotBuilder(tmp_path).boot().kmsg(f"6,150,5,-;{CE_LINE}\n6,151,6,-;x\n6,153,7,-;{CE_LINE}\n")
    log = log_of(snap.cycle(state, collectors=ONLY_LOG))
    assert log.lost_records == (150 - 100) + 1
    assert [e.seq for e in log.events] == [150, 153]


def test_a_new_boot_id_is_a_reboot_read_from_its_start(tmp_path: Path) -> None:
    state = CollectorState()
    state.stage("kernel_log", {"source": "kmsg", "boot_id": "an-earlier-boot", "seq": 90_000})
    state.commit()
    snap = SnapshotBuilder(tmp_path).boot().kmsg(f"6,0,0,-;Linux version 6.1\n6,1,5,-;{CE_LINE}\n")
    log = log_of(snap.cycle(state, collectors=ONLY_LOG))
    assert (log.rebooted, log.boot_id, log.lost_records) == (True, BOOT_ID, 0)
    assert [e.seq for e in log.events] == [1]
    # The new boot's first records were already overwritten when it was read: that is loss too.
    state = CollectorState()
    state.stage("kernel_log", {"source": "kmsg", "boot_id": "an-earlier-boot", "seq": 5})
    state.commit()
    snap.kmsg(f"6,40,5,-;{CE_LINE}\n")
    assert log_of(snap.cycle(state, collectors=ONLY_LOG)).lost_records == 40


def test_journal_json_is_the_fallback_when_kmsg_cannot_be_opened(tmp_path: Path) -> None:
    text = sample("kernel-log/syslog-sb-edac-ivybridge-ce-scrubbing.log")
    snap = SnapshotBuilder(tmp_path).boot().command(kernel_log.JOURNAL_FIRST, journal_records(text))
    state = CollectorState()
    report = snap.cycle(state, collectors=ONLY_LOG)
    run = report.collectors["kernel_log"]
    assert (run.status, run.source) == ("ok", "journal")
    assert "/dev/kmsg unreadable" not in " ".join(run.problems)
    log = log_of(report)
    assert shape(log) == [(K.mce_logged, None, 1, 1), (K.edac_ce, "CPU_SrcID#1_Ha#0_Chan#0_DIMM#0", 1, 7)]
    assert log.events[1].timestamp is not None
    state.commit()
    cursor = state.get("kernel_log")
    assert cursor["source"] == "journal"
    assert cursor["journal_cursor"].startswith("s=0f1e;i=8;")
    # The next cycle asks the journal for what came after that cursor only; same boot, no reboot.
    snap.command([*kernel_log.JOURNAL, "--after-cursor", cursor["journal_cursor"]], "")
    later = log_of(snap.cycle(state, collectors=ONLY_LOG))
    assert (later.events, later.rebooted, later.boot_id) == ([], False, BOOT_ID)


def test_dmesg_is_the_last_fallback_and_remembers_the_printk_time(tmp_path: Path) -> None:
    text = sample("kernel-log/dmesg-hard-lockup-panic-hp-microserver-gen8-3.10.log")
    snap = SnapshotBuilder(tmp_path).boot().command(kernel_log.DMESG, text)
    state = CollectorState()
    report = snap.cycle(state, collectors=ONLY_LOG)
    run = report.collectors["kernel_log"]
    assert (run.status, run.source) == ("ok", "dmesg")
    assert any("journalctl" in p for p in run.problems)  # why the journal was not used
    (event,) = log_of(report).events
    assert (event.kind, event.subject) == (K.hard_lockup, "CPU 3")
    state.commit()
    assert log_of(snap.cycle(state, collectors=ONLY_LOG)).events == []  # already reported


def test_no_source_at_all_is_unavailable(tmp_path: Path) -> None:
    snap = SnapshotBuilder(tmp_path).boot()
    snap.command(kernel_log.DMESG, "", rc=1, stderr="dmesg: read kernel buffer failed: Operation not permitted")
    run = snap.cycle(collectors=ONLY_LOG).collectors["kernel_log"]
    assert run.status == "unavailable"
    assert "Operation not permitted" in (run.reason or "")


def test_kmsg_that_is_not_kmsg_is_an_error_with_an_excerpt(tmp_path: Path) -> None:
    snap = SnapshotBuilder(tmp_path).boot().kmsg("this is not\na kernel record\n")
    run = snap.cycle(collectors=ONLY_LOG).collectors["kernel_log"]
    assert run.status == "error"
    assert "not a /dev/kmsg record" in (run.reason or "")
    assert run.excerpt == "this is not\na kernel record\n"
