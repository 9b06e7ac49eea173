"""Processes on isolated cores: the /proc/PID/task/TID/stat parser and the isolated_workload collector,
through snapshots built from our own /proc fixture (the corpus has no /proc/PID trees)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.samples import SnapshotBuilder, listing_to_files, ours
from checker.collectors import isolated_workload
from checker.collectors.base import SnapshotHost
from checker.cycle import run_cycle
from checker.parsers.task_stat import parse_task_stat
from checker.schemas import MAX_ISOLATED_PROCESSES, IsolatedWorkload, Report
from checker.snapshot import capture

ONLY_WORKLOAD = {"isolated_workload": isolated_workload.collect}
WORKLOAD = listing_to_files(ours("proc-isolated-workload.txt"), "/")


def workload_host(tmp_path: Path, files: dict[str, str] | None = None) -> SnapshotBuilder:
    return SnapshotBuilder(tmp_path).files("/", files if files is not None else WORKLOAD)


def section(report: Report) -> IsolatedWorkload:
    assert report.collectors["isolated_workload"].status == "ok", report.collectors["isolated_workload"]
    found = report.observations.isolated_workload
    assert found is not None
    return found


# -- the stat line -----------------------------------------------------------------------------


def test_stat_lines_of_the_fixture_parse() -> None:
    stats = {path: parse_task_stat(text) for path, text in WORKLOAD.items() if path.endswith("/stat")}
    assert all(parsed.problems == [] for parsed in stats.values())
    rx = stats["proc/4242/task/4243/stat"].value
    assert rx is not None
    assert (rx.pid, rx.comm, rx.state, rx.ppid, rx.num_threads, rx.processor) == (4243, "md-rx-0", "R", 1, 5, 2)
    assert not rx.kernel_thread
    assert not rx.exited


def test_comm_with_spaces_and_parentheses_is_cut_at_the_last_parenthesis() -> None:
    gc = parse_task_stat(WORKLOAD["proc/4242/task/4245/stat"]).value
    assert gc is not None
    assert (gc.pid, gc.comm, gc.state, gc.processor) == (4245, "gc) (x 2", "S", 2)
    feed = parse_task_stat(WORKLOAD["proc/5150/stat"]).value
    assert feed is not None
    assert (feed.comm, feed.num_threads, feed.processor) == ("feed) handler", 1, 3)
    # a name that looks like the fields that follow it cannot shift them
    tricky = WORKLOAD["proc/5150/stat"].replace("(feed) handler)", "(x) R 9 9 9 (y)")
    parsed = parse_task_stat(tricky).value
    assert parsed is not None
    assert (parsed.comm, parsed.state, parsed.ppid, parsed.processor) == ("x) R 9 9 9 (y", "S", 1, 3)


def test_kernel_threads_and_zombies_are_told_apart() -> None:
    facts = {}
    for pid in (27, 2, 6001, 1):
        stat = parse_task_stat(WORKLOAD[f"proc/{pid}/stat"]).value
        assert stat is not None
        facts[stat.comm] = (stat.kernel_thread, stat.exited, stat.processor)
    assert facts == {
        "ksoftirqd/2": (True, False, 2),
        "kthreadd": (True, False, 1),
        "probe": (False, True, 2),  # the zombie
        "systemd": (False, False, 0),
    }


@pytest.mark.parametrize(
    "text",
    [
        "",
        "4242",
        "4242 (trader",
        "4242 (trader) S 1 4242",  # cut before field 39
        "x (trader) S " + "1 " * 50,  # no pid
        WORKLOAD["proc/1/stat"].replace(" 17 0 0 0 ", " 17 zero 0 0 ", 1),  # processor is not a number
    ],
)
def test_lines_that_are_not_stat_lines_are_problems(text: str) -> None:
    parsed = parse_task_stat(text)
    assert parsed.value is None
    assert len(parsed.problems) == 1


# -- the collector -----------------------------------------------------------------------------


def test_processes_with_threads_on_isolated_cpus_through_a_snapshot(tmp_path: Path) -> None:
    found = section(workload_host(tmp_path).cycle(collectors=ONLY_WORKLOAD))
    assert found.isolated_cpus == [2, 3]
    # trader first (three of its five threads), then the single-threaded feed handler; never
    # ksoftirqd/2 (a kernel thread), the zombie, systemd or sshd (housekeeping CPUs only).
    assert [(p.pid, p.comm, p.threads, p.isolated_threads, p.threads_by_cpu) for p in found.processes] == [
        (4242, "trader", 5, 3, {"2": 2, "3": 1}),
        (5150, "feed) handler", 1, 1, {"3": 1}),
    ]
    # kthreadd and its child ksoftirqd/2 are skipped unread: five stat files, then seven thread stats
    assert (found.processes_scanned, found.threads_read, found.dropped, found.unscanned) == (5, 7, 0, 0)


def test_kernel_threads_are_skipped_by_their_flags_without_kthreadds_children_list(tmp_path: Path) -> None:
    files = {path: text for path, text in WORKLOAD.items() if path != "proc/2/task/2/children"}
    found = section(workload_host(tmp_path / "no-children", files).cycle(collectors=ONLY_WORKLOAD))
    assert [p.pid for p in found.processes] == [4242, 5150]
    assert found.processes_scanned == 6  # ksoftirqd/2's stat is read, and says it is a kernel thread
    # In a PID namespace pid 2 is no kthreadd: its "children" are not skipped
    files = {**WORKLOAD, "proc/2/stat": WORKLOAD["proc/1/stat"].replace("1 (systemd)", "2 (init)", 1)}
    files["proc/2/task/2/children"] = "4242 5150 \n"
    found = section(workload_host(tmp_path / "namespace", files).cycle(collectors=ONLY_WORKLOAD))
    assert [p.pid for p in found.processes] == [4242, 5150]


def test_fleetfix_snapshot_records_what_check_replays(tmp_path: Path) -> None:
    original = workload_host(tmp_path / "original")
    first, _ = capture(tmp_path / "copy", hostname="h", inner=original.host(), collectors=ONLY_WORKLOAD)
    assert (tmp_path / "copy/root/proc/4242/task/4245/stat").is_file()
    assert (tmp_path / "copy/root/proc/5150/comm").read_text() == "feed) handler\n"
    replayed = run_cycle(SnapshotHost(tmp_path / "copy"), hostname="h", collectors=ONLY_WORKLOAD)
    assert section(replayed) == section(first) == section(original.cycle(collectors=ONLY_WORKLOAD))


def test_isolated_cpus_from_sysfs_when_the_command_line_has_none(tmp_path: Path) -> None:
    files = {
        **WORKLOAD,
        "proc/cmdline": "BOOT_IMAGE=/vmlinuz root=/dev/sda1\n",
        "sys/devices/system/cpu/nohz_full": "(null)\n",
    }
    found = section(workload_host(tmp_path, files).cycle(collectors=ONLY_WORKLOAD))
    assert found.isolated_cpus == [2, 3]
    assert [p.pid for p in found.processes] == [4242, 5150]


def test_only_hosts_with_isolated_cpus_are_scanned(tmp_path: Path) -> None:
    files = {
        **WORKLOAD,
        "proc/cmdline": "BOOT_IMAGE=/vmlinuz root=/dev/sda1\n",
        "sys/devices/system/cpu/isolated": "\n",
        "sys/devices/system/cpu/nohz_full": "(null)\n",
    }
    report = workload_host(tmp_path, files).cycle(collectors=ONLY_WORKLOAD)
    run = report.collectors["isolated_workload"]
    assert run.status == "unavailable"
    assert "no isolated CPUs" in (run.reason or "")
    assert report.observations.isolated_workload is None
    empty = run_cycle(SnapshotHost(tmp_path / "nothing"), hostname="h", collectors=ONLY_WORKLOAD)
    assert empty.collectors["isolated_workload"].status == "unavailable"
    assert "/proc/cmdline" in (empty.collectors["isolated_workload"].reason or "")


def test_a_stat_file_that_does_not_parse_is_a_problem_not_a_failure(tmp_path: Path) -> None:
    files = {**WORKLOAD, "proc/4242/task/4246/stat": "garbage\n"}
    report = workload_host(tmp_path, files).cycle(collectors=ONLY_WORKLOAD)
    found = section(report)
    assert [p.pid for p in found.processes] == [4242, 5150]
    assert found.processes[0].threads == 4
    (problem,) = report.collectors["isolated_workload"].problems
    assert problem.startswith("/proc/4242/task/4246/stat: stat line without '(comm)'")


# -- bounds ------------------------------------------------------------------------------------


def single_threaded(pid: int, cpu: int) -> str:
    line = WORKLOAD["proc/5150/stat"].replace("5150 (feed) handler)", f"{pid} (worker-{pid})", 1)
    return line.replace(" 17 3 0 0 ", f" 17 {cpu} 0 0 ", 1)


def test_at_most_16_processes_are_reported_and_the_rest_counted(tmp_path: Path) -> None:
    extra = {f"proc/{pid}/stat": single_threaded(pid, 2 + pid % 2) for pid in range(8000, 8040)}
    found = section(workload_host(tmp_path, {**WORKLOAD, **extra}).cycle(collectors=ONLY_WORKLOAD))
    assert len(found.processes) == MAX_ISOLATED_PROCESSES
    assert found.processes[0].pid == 4242  # the most threads on isolated CPUs first
    assert found.dropped == 40 + 2 - MAX_ISOLATED_PROCESSES
    assert found.processes[1].comm == "feed) handler"  # no /proc/PID/comm for the workers: their stat names them
    assert found.processes[2].comm == "worker-8000"


def test_scans_stop_at_their_caps_and_say_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    snap = workload_host(tmp_path)
    monkeypatch.setattr(isolated_workload, "MAX_THREADS_READ", 4)
    found = section(snap.cycle(collectors=ONLY_WORKLOAD))
    # trader's five threads do not fit: it is skipped whole and counted, sshd's two are read
    assert (found.threads_read, found.unscanned) == (2, 1)
    assert [p.pid for p in found.processes] == [5150]
    monkeypatch.setattr(isolated_workload, "MAX_PROCESSES_SCANNED", 2)
    found = section(snap.cycle(collectors=ONLY_WORKLOAD))
    # newest first: sshd (its two threads read) and the zombie; 5150, 4242 and systemd are not
    assert (found.processes_scanned, found.threads_read, found.unscanned) == (2, 2, 3)
    assert found.processes == []


def test_threads_of_processes_whose_main_thread_is_isolated_are_read_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = dict(WORKLOAD)
    files["proc/7000/stat"] = files["proc/7000/stat"].replace(" 17 1 0 0 ", " 17 3 0 0 ", 1)
    files["proc/7000/task/7000/stat"] = files["proc/7000/task/7000/stat"].replace(" 17 1 0 0 ", " 17 3 0 0 ", 1)
    monkeypatch.setattr(isolated_workload, "MAX_THREADS_READ", 5)
    found = section(workload_host(tmp_path, files).cycle(collectors=ONLY_WORKLOAD))
    # sshd's main thread last ran on CPU 3: its threads are read before trader's, which then do not fit
    assert [(p.pid, p.threads_by_cpu) for p in found.processes] == [(5150, {"3": 1}), (7000, {"3": 1})]
    assert found.unscanned == 1
