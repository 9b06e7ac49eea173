"""CPU cost of the isolated_workload collector (processes on isolated cores), beside the cycle without it.

1. The rich snapshot's workload (our /proc fixture: 7 processes, 7 thread stats).
2. This machine's live /proc, with CPU 1 reported as isolated (a development machine has none).
3. A snapshot of a big host past both caps: 1,000 kernel threads, 1,900 single-threaded processes
   and 100 processes of 30 threads (the newest), with kthreadd's children list, then without it.

Each figure is the median process CPU time of a cycle running only this collector, less that of a
cycle running none (boot id, machine id, the report model). It prints figures; it asserts nothing.
Usage: FLEETFIX_TEST_SAMPLES=../shared/fixtures .venv/bin/python bench/isolated_workload.py
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("FLEETFIX_TEST_SAMPLES", str(REPO.parent / "shared" / "fixtures"))

from bench._collector_cost import median_cpu_ms as collector_cpu_ms  # noqa: E402
from bench.samples import SnapshotBuilder, listing_to_files, ours, rich_snapshot  # noqa: E402
from checker.collectors import isolated_workload  # noqa: E402
from checker.collectors.base import HostAccess, LiveHost, SnapshotHost  # noqa: E402
from checker.schemas import IsolatedWorkload  # noqa: E402

ONLY = {"isolated_workload": isolated_workload.collect}


def median_cpu_ms(host: HostAccess, runs: int) -> tuple[float, IsolatedWorkload]:
    ms, report = collector_cpu_ms(host, "isolated_workload", isolated_workload.collect, runs)
    found = report.observations.isolated_workload
    assert found is not None, report.collectors["isolated_workload"]
    return ms, found


def line(what: str, ms: float, found: IsolatedWorkload) -> None:
    print(
        f"  {what:<58} cpu {ms:6.2f} ms  (stat files: {found.processes_scanned} processes, {found.threads_read}"
        f" threads; {len(found.processes)} reported, {found.dropped} dropped, {found.unscanned} unscanned)"
    )


class PretendIsolated:
    """This machine's /proc as it is, with CPU 1 reported isolated."""

    def __init__(self, inner: LiveHost) -> None:
        self.inner = inner

    def read_text(self, path: str) -> str | None:
        return "1\n" if path == "/sys/devices/system/cpu/isolated" else self.inner.read_text(path)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def big_host(directory: Path) -> SnapshotBuilder:
    files = listing_to_files(ours("proc-isolated-workload.txt"), "/")
    user, kthread, thread = files["proc/5150/stat"], files["proc/27/stat"], files["proc/4242/task/4243/stat"]
    big = {k: v for k, v in files.items() if not k.startswith("proc/") or k in ("proc/cmdline", "proc/2/stat")}
    pid = 10_000
    big["proc/2/task/2/children"] = " ".join(str(p) for p in range(pid, pid + 1000)) + " "
    for _ in range(1000):
        big[f"proc/{pid}/stat"] = kthread.replace("27 (", f"{pid} (", 1)
        pid += 1
    for _ in range(1900):
        big[f"proc/{pid}/stat"] = user.replace("5150 (", f"{pid} (", 1)
        pid += 1
    for _ in range(100):
        big[f"proc/{pid}/stat"] = user.replace("5150 (", f"{pid} (", 1).replace(" 20 0 1 0 ", " 20 0 30 0 ", 1)
        for tid in range(pid, pid + 30):
            big[f"proc/{pid}/task/{tid}/stat"] = thread.replace("4243 (", f"{tid} (", 1)
        pid += 30
    return SnapshotBuilder(directory).files("/", big)


def main() -> None:
    print(f"# command: FLEETFIX_TEST_SAMPLES=... .venv/bin/python bench/{Path(__file__).name}")
    print(f"# machine: {os.cpu_count()} cpus, python {sys.version.split()[0]}, {os.uname().release}")
    print("isolated_workload collector, median CPU time per cycle:")
    with tempfile.TemporaryDirectory() as tmp:
        rich = SnapshotHost(rich_snapshot(Path(tmp) / "rich").directory)
        line("rich snapshot (our /proc fixture)", *median_cpu_ms(rich, 500))
        line("this machine's live /proc, CPU 1 taken as isolated", *median_cpu_ms(PretendIsolated(LiveHost()), 200))
        big = big_host(Path(tmp) / "big")
        line("3,000 processes, past both caps", *median_cpu_ms(big.host(), 30))
        (big.directory / "root/proc/2/task/2/children").unlink()
        line("the same without kthreadd's children list", *median_cpu_ms(big.host(), 30))


if __name__ == "__main__":
    main()
