"""CPU cost of the cputime collector (the cputime side-effect watch), beside the cycle without it.

1. Our /proc fixture (a 16-CPU batch node: 5 user processes, one with 22 million seconds too many).
2. This machine's live /proc, as it is.
3. A snapshot of a big batch node past every cap: 1,000 kernel threads (kthreadd's children), 100 busy
   30-thread jobs, each over its run time (so each wants its threads read), then 1,900 idle
   single-threaded processes, with kthreadd's children list; then without it (the kernel threads,
   the oldest, then take the process cap).

Each figure is the median process CPU time of a cycle running only this collector, less that of a
cycle running none (boot id, machine id, the report model). It prints figures; it asserts nothing.
Usage: FLEETFIX_TEST_SAMPLES=../shared/fixtures .venv/bin/python bench/cputime.py
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

from bench.samples import SnapshotBuilder, listing_to_files, ours  # noqa: E402
from checker.collectors import cputime  # noqa: E402
from checker.collectors.base import HostAccess, LiveHost  # noqa: E402
from checker.cycle import run_cycle  # noqa: E402
from checker.schemas import CputimeWatch  # noqa: E402

ONLY = {"cputime": cputime.collect}
PROC = listing_to_files(ours("proc-cputime.txt"), "/")


def median_cpu_ms(host: HostAccess, runs: int) -> tuple[float, CputimeWatch]:
    for _ in range(3):
        report = run_cycle(host, hostname="bench", collectors=ONLY)
    with_it, without = [], []
    for _ in range(runs):
        c = time.process_time()
        run_cycle(host, hostname="bench", collectors=ONLY)
        with_it.append(time.process_time() - c)
        c = time.process_time()
        run_cycle(host, hostname="bench", collectors={})
        without.append(time.process_time() - c)
    found = report.observations.cputime
    assert found is not None, report.collectors["cputime"]
    return (statistics.median(with_it) - statistics.median(without)) * 1000, found


def line(what: str, ms: float, found: CputimeWatch) -> None:
    print(
        f"  {what:<52} cpu {ms:6.2f} ms  ({found.checked} processes judged, {found.threads_read} thread stats,"
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


def main() -> None:
    print(f"# command: FLEETFIX_TEST_SAMPLES=... .venv/bin/python bench/{Path(__file__).name}")
    print(f"# machine: {os.cpu_count()} cpus, python {sys.version.split()[0]}, {os.uname().release}")
    print(
        f"cputime collector (caps: {cputime.MAX_PROCESSES_READ} processes, {cputime.MAX_THREADS_READ} threads,"
        f" {cputime.MAX_BYTES_READ // 1024} KiB), median CPU time per cycle:"
    )
    with tempfile.TemporaryDirectory() as tmp:
        fixture = SnapshotBuilder(Path(tmp) / "fixture").files("/", PROC)
        line("our /proc fixture (16-CPU batch node)", *median_cpu_ms(fixture.host(), 500))
        line("this machine's live /proc", *median_cpu_ms(LiveHost(), 200))
        big = big_node(Path(tmp) / "big")
        line("3,000 processes, past every cap", *median_cpu_ms(big.host(), 30))
        (big.directory / "root/proc/2/task/2/children").unlink()
        line("the same without kthreadd's children list", *median_cpu_ms(big.host(), 30))


if __name__ == "__main__":
    main()
