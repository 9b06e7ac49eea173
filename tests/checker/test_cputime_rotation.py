"""The cputime watch's rotation through /proc across cycles: a full rotation judges every user process,
a wrapped pid space loses none, flagged processes are re-read every cycle, and `complete` waits for a
full rotation. Through snapshots of our own /proc fixture, with the cursor kept as the agent keeps it."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from bench.samples import SnapshotBuilder, listing_to_files, ours
from checker.collectors import cputime
from checker.collectors.base import SnapshotHost
from checker.collectors.context import CollectorState
from checker.collectors.cputime_rotation import CURSOR
from checker.cycle import run_cycle
from checker.schemas import CputimeWatch

ONLY = {"cputime": cputime.collect}
PROC = listing_to_files(ours("proc-cputime.txt"), "/")
USER = [1, 4711, 5100, 5200, 6100]  # the fixture's user processes (6200 is a zombie, 27 kthreadd's child)
IDLE = PROC["proc/6100/stat"]


class Recording(SnapshotHost):
    """A snapshot host that remembers which process stat files a cycle read."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.read: list[int] = []

    def read_text(self, path: str) -> str | None:
        parts = path.split("/")
        if len(parts) == 4 and parts[1] == "proc" and parts[3] == "stat" and parts[2].isdecimal():
            self.read.append(int(parts[2]))
        return super().read_text(path)


def idle(pid: int, start: int = 700) -> str:
    return IDLE.replace("6100 (sshd)", f"{pid} (sshd)", 1).replace(" 0 1 0 700 ", f" 0 1 0 {start} ", 1)


def node(tmp_path: Path, extra: range) -> SnapshotBuilder:
    files = dict(PROC)
    for pid in extra:
        files[f"proc/{pid}/stat"] = idle(pid)
    return SnapshotBuilder(tmp_path).files("/", files)


def cycle(host: SnapshotHost, state: CollectorState) -> CputimeWatch:
    report = run_cycle(host, hostname="batch-01", collectors=ONLY, state=state)
    state.commit()  # the agent commits once the report is handed off
    assert report.collectors["cputime"].status == "ok", report.collectors["cputime"]
    found = report.observations.cputime
    assert found is not None
    return found


def test_a_full_rotation_judges_every_user_process_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cputime, "MAX_STATS_READ", 7)
    snap = node(tmp_path, range(7000, 7040))
    host, state = Recording(snap.directory), CollectorState()
    users = USER + list(range(7000, 7040))
    seen: list[CputimeWatch] = []
    read_in_slices: list[int] = []  # kthreadd's stat (every cycle) and cmsRun's re-checks left out
    while not seen or seen[-1].rotation_ahead:
        host.read.clear()
        seen.append(cycle(host, state))
        read_in_slices += [pid for pid in host.read if pid not in (2, 4711)]
        assert len(seen) < 50
    # every user process read, each once, in pid order (root.exe's 8 threads were read when it came first)
    assert sorted(set(read_in_slices) & set(users)) == sorted(set(users) - {4711})
    assert read_in_slices == sorted(read_in_slices)  # root.exe's stat twice: its threads did not fit the first time
    assert len(read_in_slices) <= len(set(read_in_slices)) + 1
    # 44 process stats, the zombie's and 10 thread stats at 7 a cycle, and a slot or two a process's
    # threads did not fit in
    assert len(seen) <= math.ceil((len(users) + 1 + 10) / 7) + 2
    last = seen[-1]
    assert (last.rotation_cycles, last.rotation_checked, last.complete) == (len(seen), len(users), True)
    # no verdict before the rotation ends; the flagged job is said every cycle from when it was found
    assert [w.complete for w in seen[:-1]] == [False] * (len(seen) - 1)
    assert [w.flagged for w in seen] == [1] * len(seen)
    assert all(w.processes[0].pid == 4711 for w in seen)
    assert all(w.rechecked == 1 for w in seen[1:])


def test_the_next_rotation_keeps_the_verdict_until_it_finds_something(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cputime, "MAX_STATS_READ", 10)
    files = {k: v for k, v in PROC.items() if not k.startswith("proc/4711/")}
    snap = SnapshotBuilder(tmp_path).files("/", files)
    for pid in range(7000, 7030):
        snap.file(f"/proc/{pid}/stat", idle(pid))
    host, state = snap.host(), CollectorState()
    first = [cycle(host, state)]
    while first[-1].rotation_ahead:
        first.append(cycle(host, state))
    assert len(first) > 2
    assert [(w.complete, w.flagged) for w in first] == [(False, 0)] * (len(first) - 1) + [(True, 0)]
    clean = cycle(host, state)  # mid-rotation: the last one found every process clean
    assert (clean.complete, clean.flagged, clean.rotation_ahead > 0) == (True, 0, True)
    snap.file("/proc/7029/stat", "7029 (sshd) S 1 garbage\n")  # a process the rotation cannot judge
    later = [cycle(host, state)]
    while later[-1].rotation_ahead:
        later.append(cycle(host, state))
    assert [w.complete for w in later] == [True] * (len(later) - 1) + [False]
    assert later[-1].unscanned == 1
    assert not cycle(host, state).complete  # and not before a whole rotation judged everything again


def test_a_wrapped_pid_space_is_handled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """pid_max reached: new processes get low pids, behind the cursor. They are judged in the next
    rotation; the old ones with high pids in this one; and when everything past the cursor has gone,
    the rotation ends and the next begins in the same cycle."""
    monkeypatch.setattr(cputime, "MAX_STATS_READ", 4)
    files = {k: v for k, v in PROC.items() if not k.startswith("proc/4711/")}
    snap = SnapshotBuilder(tmp_path).files("/", files)
    for pid in range(32_000, 32_012):
        snap.file(f"/proc/{pid}/stat", idle(pid))
    host, state = Recording(snap.directory), CollectorState()
    while (cursor := state.get(CURSOR).get("after") or 0) < 32_000:
        cycle(host, state)
    assert cursor < 32_011
    snap.file("/proc/300/stat", idle(300, start=8_990_000))  # born after the wrap, behind the cursor
    host.read.clear()
    while cycle(host, state).rotation_ahead:
        pass
    assert 300 not in host.read
    assert [p for p in range(32_000, 32_012) if p > cursor] == [p for p in host.read if p > cursor]
    host.read.clear()
    cycle(host, state)
    assert [p for p in host.read if p != 2][:2] == [1, 300]  # the next rotation, from the lowest pid
    # everything past the cursor exits: no empty cycle, the rotation ends and the next one reads
    while (state.get(CURSOR).get("after") or 0) < 32_000:
        cycle(host, state)
    for pid in range(32_000, 32_012):
        (snap.directory / f"root/proc/{pid}").rename(snap.directory / f"gone-{pid}")
    host.read.clear()
    found = cycle(host, state)
    assert [p for p in host.read if p != 2][:2] == [1, 300]
    assert found.rotation_cycles is not None


def test_a_flagged_process_is_dropped_when_it_exits_or_its_pid_is_reused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cputime, "MAX_STATS_READ", 3)
    snap = node(tmp_path, range(7000, 7020))
    host, state = snap.host(), CollectorState()
    assert cycle(host, state).flagged == 1
    assert cycle(host, state).flagged == 1
    snap.file("/proc/4711/stat", idle(4711, start=8_900_000))  # cmsRun exited; a new sshd got its pid
    found = cycle(host, state)
    assert (found.flagged, found.rechecked) == (0, 1)
    assert cycle(host, state).rechecked == 0


def test_a_reboot_or_a_broken_cursor_starts_afresh(tmp_path: Path) -> None:
    host = SnapshotBuilder(tmp_path).files("/", PROC).host()
    state = CollectorState()
    stale = {"after": 9999, "current": {"cycles": 3}, "last": None, "watch": [{"pid": 1, "start": 3}], "uptime_s": 1e6}
    state.stage(CURSOR, stale)  # a cursor from before a reboot: the uptime went back
    state.commit()
    found = cycle(host, state)
    assert (found.rechecked, found.rotation_cycles, found.complete, found.flagged) == (0, 1, True, 1)
    # another boot id: a reboot, though the uptime is past the stored one
    snap = SnapshotBuilder(tmp_path).boot("6b1d0c2e-0000-4000-8000-000000000001")
    state.stage(CURSOR, {**stale, "uptime_s": 10.0, "boot_id": "6b1d0c2e-0000-4000-8000-000000000000"})
    state.commit()
    assert cycle(snap.host(), state).rechecked == 0
    assert state.get(CURSOR)["boot_id"] == "6b1d0c2e-0000-4000-8000-000000000001"
    for broken in ({"after": "x"}, {"watch": [{"pid": -1}]}, {"last": [1]}, {"current": {"cycles": True}}):
        state.stage(CURSOR, broken)
        state.commit()
        assert cycle(host, state).complete


def test_a_cycle_stays_within_its_reads(tmp_path: Path) -> None:
    snap = node(tmp_path, range(7000, 9000))
    host, state = Recording(snap.directory), CollectorState()
    for _ in range(3):
        host.read.clear()
        found = cycle(host, state)
        assert len(host.read) <= cputime.MAX_STATS_READ + 2  # + kthreadd's stat and the re-check
        assert found.checked <= cputime.MAX_STATS_READ + 1
