"""The cputime side-effect watch: CPU time above run time in /proc/PID/stat (seed 001), through snapshots
built from our own /proc fixture (the corpus has no /proc/PID trees)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.samples import SnapshotBuilder, listing_to_files, ours
from checker.collectors import cputime
from checker.cycle import run_cycle
from checker.parsers.task_stat import parse_task_stat
from checker.schemas import CputimeWatch, Report

ONLY = {"cputime": cputime.collect}
PROC = listing_to_files(ours("proc-cputime.txt"), "/")
BOGUS_S = (2**31 + 320000 + 4000) / 100  # cmsRun's utime + stime, in seconds


def snapshot(tmp_path: Path, files: dict[str, str] | None = None) -> SnapshotBuilder:
    return SnapshotBuilder(tmp_path).files("/", files if files is not None else PROC)


def watch(report: Report) -> CputimeWatch:
    assert report.collectors["cputime"].status == "ok", report.collectors["cputime"]
    found = report.observations.cputime
    assert found is not None
    return found


def cycle(tmp_path: Path, files: dict[str, str] | None = None) -> CputimeWatch:
    return watch(run_cycle(snapshot(tmp_path, files).host(), hostname="batch-01", collectors=ONLY))


def test_the_parser_reads_the_time_fields() -> None:
    stat = parse_task_stat(PROC["proc/5100/task/5103/stat"]).value
    assert stat is not None
    assert (stat.pid, stat.comm, stat.utime, stat.stime, stat.starttime, stat.num_threads) == (
        5103,
        "root.exe",
        960000,
        30000,
        8000003,
        8,
    )
    bad = PROC["proc/1/stat"].replace(" 312 405 ", " 312 -405 ")
    assert parse_task_stat(bad).value is None


def test_a_young_job_with_22_million_seconds_is_flagged_by_its_thread(tmp_path: Path) -> None:
    found = cycle(tmp_path)
    assert found.flagged == 1
    (job,) = found.processes
    assert (job.pid, job.tid, job.comm, job.scope, job.threads) == (4711, 4711, "cmsRun", "thread", 1)
    assert job.cputime_s == pytest.approx(BOGUS_S)
    assert job.elapsed_s == pytest.approx(3600)
    assert job.excess_s == pytest.approx(BOGUS_S - 3600)
    assert job.stat_line.startswith("4711 (cmsRun) S 1")
    # systemd, cmsRun, root.exe, athena, sshd; not kthreadd's children nor the zombie
    assert (found.checked, found.unscanned, found.unverified, found.complete) == (5, 0, 0, True)
    # one cycle was a whole rotation: a host this small is judged whole every cycle
    assert (found.rotation_cycles, found.rotation_checked, found.rotation_ahead, found.rechecked) == (1, 5, 0, 0)
    assert (found.cpus, found.clk_tck, found.uptime_s, found.tolerance_s) == (16, 100, 90000.0, 3600.0)
    assert found.threads_read == 1 + 8 + 1  # cmsRun's, root.exe's and athena's: only those over their run time
    assert found.caps_hit == []


def test_busy_threads_and_exited_workers_are_not_flagged(tmp_path: Path) -> None:
    files = {k: v for k, v in PROC.items() if not k.startswith("proc/4711/")}
    found = cycle(tmp_path, files)
    # root.exe used 79,200 s in 10,000 s on 8 threads, athena 30,000 s with one thread left: both legitimate
    assert (found.flagged, found.processes, found.complete, found.checked) == (0, [], True, 4)


def test_time_no_cpu_count_explains_is_flagged_for_the_process(tmp_path: Path) -> None:
    """The bogus time sits in an exited thread's share: every live thread is fine, the total is impossible."""
    files = dict(PROC)
    files["proc/5200/stat"] = PROC["proc/5200/stat"].replace(" 2900000 100000 ", f" {2**31} 100000 ")
    found = cycle(tmp_path, files)
    athena = next(p for p in found.processes if p.pid == 5200)
    assert (athena.scope, athena.tid) == ("process", None)
    assert athena.excess_s == pytest.approx((2**31 + 100000) / 100 - 10000 * 16)
    assert found.flagged == 2


def test_without_the_cpu_count_an_unexplained_total_is_left_to_the_threads(tmp_path: Path) -> None:
    files = {k: v for k, v in PROC.items() if k != "sys/devices/system/cpu/possible"}
    found = cycle(tmp_path, files)
    assert (found.cpus, found.flagged, found.complete) == (None, 1, True)


def test_threads_past_the_cap_leave_a_process_unverified_and_the_scan_incomplete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cputime, "MAX_THREADS_READ", 4)
    found = cycle(tmp_path)
    # cmsRun (the most suspicious) and athena were read; root.exe's 8 threads did not fit
    assert (found.flagged, found.unverified, found.complete, found.caps_hit) == (1, 1, False, ["threads"])


def test_a_cycle_reads_its_slice_and_says_nothing_of_the_rest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cputime, "MAX_STATS_READ", 3)
    found = cycle(tmp_path)
    # pid 1 (one read), cmsRun (its stat and its one thread's): the rest waits for the next cycles, uncounted
    assert (found.checked, found.unscanned, found.unverified, found.flagged) == (2, 0, 0, 1)
    assert (found.complete, found.rotation_cycles, found.rotation_ahead) == (False, None, 4)
    assert found.caps_hit == ["processes"]


def test_the_byte_cap_stops_reading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cputime, "MAX_BYTES_READ", 600)
    found = cycle(tmp_path)
    assert "bytes" in found.caps_hit
    assert not found.complete
    assert found.rotation_ahead > 0  # the rest is read in the next cycles
    assert found.bytes_read < 600 + 1024


def test_a_malformed_stat_line_is_a_problem_naming_the_file(tmp_path: Path) -> None:
    files = dict(PROC)
    files["proc/6100/stat"] = "6100 (sshd) S 1 garbage\n"
    report = run_cycle(snapshot(tmp_path, files).host(), hostname="batch-01", collectors=ONLY)
    found = watch(report)
    assert (found.checked, found.unscanned, found.complete, found.flagged) == (4, 1, False, 1)
    assert any(p.startswith("/proc/6100/stat: ") for p in report.collectors["cputime"].problems)


def test_a_thread_that_cannot_be_judged_leaves_its_process_unverified(tmp_path: Path) -> None:
    files = dict(PROC)
    files["proc/5100/task/5103/stat"] = "5103 (root.exe) R\n"
    report = run_cycle(snapshot(tmp_path, files).host(), hostname="batch-01", collectors=ONLY)
    found = watch(report)
    assert (found.flagged, found.unverified, found.complete) == (1, 1, False)
    assert any(p.startswith("/proc/5100/task/5103/stat: ") for p in report.collectors["cputime"].problems)


@pytest.mark.parametrize("uptime", [None, "", "soon 12\n", "-5 1\n", "nan 1\n"])
def test_without_an_uptime_the_watch_is_unavailable(tmp_path: Path, uptime: str | None) -> None:
    files = {k: v for k, v in PROC.items() if k != "proc/uptime"}
    if uptime is not None:
        files["proc/uptime"] = uptime
    report = run_cycle(snapshot(tmp_path, files).host(), hostname="batch-01", collectors=ONLY)
    run = report.collectors["cputime"]
    assert run.status == "unavailable"
    assert run.reason is not None
    assert run.reason.startswith("/proc/uptime")
    assert report.observations.cputime is None


def test_this_machines_proc_is_clean_and_complete() -> None:
    from checker.collectors.base import LiveHost

    found = watch(run_cycle(LiveHost(), hostname="dev", collectors=ONLY))
    assert found.flagged == 0, found.processes
    assert found.checked > 0
