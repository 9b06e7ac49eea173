"""CPU cost of the cputime collector (the cputime side-effect watch), beside the cycle without it.

1. Our /proc fixture (a 16-CPU batch node: 5 user processes, one with 22 million seconds too many).
2. This machine's live /proc, as it is.
3. A snapshot of a big batch node: 1,000 kernel threads (kthreadd's children), 100 busy 30-thread
   jobs, each over its run time (so each wants its threads read), then 1,900 idle single-threaded
   processes, with kthreadd's children list; then without it (the kernel threads are then read to be
   skipped). On it: before, one cycle reading what the collector read before the rotation (1,024
   process stats and 512 thread stats: MAX_STATS_READ set to 1,536, nothing kept between cycles);
   after, every cycle of three full rotations with the cursor kept (median and largest), and how
   many cycles a rotation takes.

Each figure is the median process CPU time of a cycle running only this collector, less that of a
cycle running none (boot id, machine id, the report model). It prints figures; it asserts nothing.
With --slices, the 3,000-process node's per-cycle cost for several MAX_STATS_READ (how the slice was
chosen), and a slice of 1 (what listing /proc costs whatever the slice).
Usage: FLEETFIX_TEST_SAMPLES=../shared/fixtures .venv/bin/python bench/cputime.py [--slices]
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("FLEETFIX_TEST_SAMPLES", str(REPO.parent / "shared" / "fixtures"))

from bench._collector_cost import median_cpu_ms as collector_cpu_ms  # noqa: E402
from bench.samples import SnapshotBuilder, listing_to_files, ours  # noqa: E402
from checker.collectors import cputime  # noqa: E402
from checker.collectors.base import HostAccess, LiveHost  # noqa: E402
from checker.collectors.context import CollectorState  # noqa: E402
from checker.cycle import run_cycle  # noqa: E402
from checker.schemas import CputimeWatch  # noqa: E402

ONLY = {"cputime": cputime.collect}
PROC = listing_to_files(ours("proc-cputime.txt"), "/")


def median_cpu_ms(host: HostAccess, runs: int) -> tuple[float, CputimeWatch]:
    ms, report = collector_cpu_ms(host, "cputime", cputime.collect, runs)
    found = report.observations.cputime
    assert found is not None, report.collectors["cputime"]
    return ms, found


def baseline_ms(host: HostAccess, runs: int) -> float:
    times = []
    for _ in range(runs):
        c = time.process_time()
        run_cycle(host, hostname="bench", collectors={})
        times.append(time.process_time() - c)
    return statistics.median(times) * 1000


def rotation_cpu_ms(host: HostAccess, rotations: int) -> tuple[float, float, int, CputimeWatch]:
    """Per cycle, with the cursor kept (committed as the agent does once a report is handed off): the
    median and the largest over `rotations` full rotations after a first one, and a rotation's cycles."""
    state = CollectorState()
    times: list[float] = []
    finished = -1  # the first rotation warms up
    found: CputimeWatch | None = None
    while finished < rotations:
        c = time.process_time()
        report = run_cycle(host, hostname="bench", collectors=ONLY, state=state)
        spent = time.process_time() - c
        state.commit()
        found = report.observations.cputime
        assert found is not None, report.collectors["cputime"]
        if finished >= 0:
            times.append(spent)
        finished += found.rotation_ahead == 0
    assert found is not None
    assert found.rotation_cycles is not None
    base = baseline_ms(host, 30)
    return statistics.median(times) * 1000 - base, max(times) * 1000 - base, found.rotation_cycles, found


def line(what: str, ms: float, found: CputimeWatch) -> None:
    print(
        f"  {what:<60} cpu {ms:6.2f} ms  ({found.checked} processes judged, {found.threads_read} thread stats,"
        f" {found.bytes_read // 1024} KiB; {found.flagged} flagged, {found.unscanned} unscanned,"
        f" {found.unverified} unverified; caps hit: {', '.join(found.caps_hit) or 'none'})"
    )


def big_node(directory: Path) -> SnapshotBuilder:
    kthread, idle = PROC["proc/27/stat"], PROC["proc/6100/stat"]
    busy, thread = PROC["proc/5100/stat"], PROC["proc/5100/task/5101/stat"]
    big = {k: v for k, v in PROC.items() if not k.startswith("proc/") or k in ("proc/uptime", "proc/2/stat")}
    pid = 10_000
    big["proc/2/task/2/children"] = " ".join(str(p) for p in range(pid, pid + 1000)) + " "
    for _ in range(1000):
        big[f"proc/{pid}/stat"] = kthread.replace("27 (", f"{pid} (", 1)
        pid += 1
    for _ in range(100):  # the oldest user processes: within the process cap, past the thread cap
        big[f"proc/{pid}/stat"] = busy.replace("5100 (", f"{pid} (", 1).replace(" 20 0 8 0 ", " 20 0 30 0 ", 1)
        for tid in range(pid, pid + 30):
            big[f"proc/{pid}/task/{tid}/stat"] = thread.replace("5101 (", f"{tid} (", 1)
        pid += 30
    for _ in range(1900):
        big[f"proc/{pid}/stat"] = idle.replace("6100 (", f"{pid} (", 1)
        pid += 1
    return SnapshotBuilder(directory).files("/", big)


def slices() -> None:
    print(f"# command: FLEETFIX_TEST_SAMPLES=... .venv/bin/python bench/{Path(__file__).name} --slices")
    print("3,000 processes, per cycle of the rotation for each MAX_STATS_READ (median, largest; cycles a rotation):")
    chosen = cputime.MAX_STATS_READ
    with tempfile.TemporaryDirectory() as tmp:
        big = big_node(Path(tmp) / "big")
        try:
            for size in (1, 64, 128, 192, 256):
                cputime.MAX_STATS_READ = size
                median, largest, cycles, _ = rotation_cpu_ms(big.host(), 1 if size == 1 else 2)
                print(f"  {size:>4} stat files  cpu {median:5.2f} ms  largest {largest:5.2f} ms  {cycles} cycles")
        finally:
            cputime.MAX_STATS_READ = chosen


def main() -> None:
    if "--slices" in sys.argv[1:]:
        slices()
        return
    print(f"# command: FLEETFIX_TEST_SAMPLES=... .venv/bin/python bench/{Path(__file__).name}")
    print(f"# machine: {os.cpu_count()} cpus, python {sys.version.split()[0]}, {os.uname().release}")
    print(
        f"cputime collector (caps per cycle: {cputime.MAX_STATS_READ} stat files, {cputime.MAX_THREADS_READ}"
        f" threads of one process, {cputime.MAX_BYTES_READ // 1024} KiB), median CPU time per cycle:"
    )
    with tempfile.TemporaryDirectory() as tmp:
        fixture = SnapshotBuilder(Path(tmp) / "fixture").files("/", PROC)
        line("our /proc fixture (16-CPU batch node)", *median_cpu_ms(fixture.host(), 500))
        line("this machine's live /proc", *median_cpu_ms(LiveHost(), 200))
        big = big_node(Path(tmp) / "big")
        for what in ("3,000 processes", "the same without kthreadd's children list"):
            if what != "3,000 processes":
                (big.directory / "root/proc/2/task/2/children").unlink()
            rotation = cputime.MAX_STATS_READ
            cputime.MAX_STATS_READ = 1024 + 512
            try:
                line(f"{what}: before, one pass of 1,024 + 512 stats", *median_cpu_ms(big.host(), 30))
            finally:
                cputime.MAX_STATS_READ = rotation
            median, largest, cycles, found = rotation_cpu_ms(big.host(), 3)
            line(f"{what}: after, per cycle of the rotation", median, found)
            print(f"  {'':<60} largest {largest:5.2f} ms; a full rotation takes {cycles} cycles")


if __name__ == "__main__":
    main()
