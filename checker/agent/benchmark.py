"""The agent's own benchmark: a short, bounded CPU + memory/TLB run, once a day off-peak, on one
housekeeping CPU, scored per core per GHz so a host can be compared with its hardware class (our own check
for single-host drift) and a class with the score expected of it (seed 001: the erratum-298 BIOS workaround
disabled the TLB, and the whole Opteron 8356 class scored 1.66 HEP-SPEC06 per core per GHz against 3.4-3.9
on other models and platforms; remediator/benchmark_class.py).

A busy host is not measured: before the run the agent reads the 1-minute load average per CPU and the
chosen CPU's use and steal over SAMPLE_S from /proc/stat; over the limits it skips and tries again
RETRY_AFTER later within the window. What it saw, and the steal and thermal throttling during the run,
go with the score (`conditions`).

The work is fixed, so the time it takes is the measurement: SHA-256 over a 4 MiB buffer (compute at
C speed) and a chain of dependent reads, one per 4 KiB page in a shuffled order, over a 64 MiB buffer
(larger than most last-level caches and far beyond any TLB's reach: every read is a TLB miss and,
mostly, a cache miss). Each part is timed
REPEATS times and the fastest kept (the others were slowed by something else on the CPU). The score
is passes per second (one pass = one hash + one walk) divided by the CPU's nominal clock in GHz.
docs/agent.md, "Benchmark", has its cost and why the nominal clock.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import mmap
import os
import random
import re
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

from checker.collectors.base import HostAccess
from checker.collectors.isolated_workload import read_isolated
from checker.schemas import BenchmarkResult, CollectorRun, CollectorStatus

METHOD_VERSION = 1
NAME = f"fleetfix-cpumem-v{METHOD_VERSION}"
HASH_BYTES = 4 << 20
WALK_BYTES = 64 << 20
PAGE = 4096
WALK_LAPS = 4  # times round the chain per pass: the walk then weighs about as much as the hash
REPEATS = 7
BUDGET_S = 3.0  # repeats stop once the run has taken this long (a very slow host still finishes)
CPUINFO = "/proc/cpuinfo"
CPUFREQ = "/sys/devices/system/cpu/cpu{cpu}/cpufreq/{name}"
_MODEL_GHZ = re.compile(r"@\s*([0-9]+(?:\.[0-9]+)?)\s*GHz", re.IGNORECASE)
LOADAVG = "/proc/loadavg"
PROC_STAT = "/proc/stat"
THROTTLE = "/sys/devices/system/cpu/cpu{cpu}/thermal_throttle/core_throttle_count"
SAMPLE_S = 0.5  # the chosen CPU's use is sampled this long before the run
MAX_LOAD_PER_CPU = 0.5  # half the CPUs runnable on average over the last minute: a job is running
MAX_CPU_BUSY_PCT = 20.0  # the chosen CPU itself busy: the run would share it
MAX_STEAL_PCT = 5.0  # a hypervisor taking the CPU: the time measured is not the CPU's
RETRY_AFTER = dt.timedelta(minutes=15)


class HostBusy(Exception):
    """The host is too busy to be measured now; `seen` is what was read."""

    def __init__(self, why: str, seen: dict[str, float]) -> None:
        super().__init__(why)
        self.seen = seen


class WindowError(ValueError):
    """A benchmark window that is not HH:MM-HH:MM with the start before the end."""


def parse_window(text: str) -> tuple[int, int] | None:
    """'01:00-05:00' -> (60, 300) minutes of the local day; '' -> None (never run)."""
    text = text.strip()
    if not text:
        return None
    found = re.fullmatch(r"([01]\d|2[0-3]):([0-5]\d)-([01]\d|2[0-4]):([0-5]\d)", text)
    if not found:
        raise WindowError(f"{text!r} is not HH:MM-HH:MM (local time), e.g. 01:00-05:00")
    start = int(found[1]) * 60 + int(found[2])
    end = int(found[3]) * 60 + int(found[4])
    if not start < end <= 24 * 60:
        raise WindowError(f"{text!r}: the start must come before the end, within one day")
    return start, end


def nominal_ghz(host: HostAccess, cpu: int) -> tuple[float | None, str | None]:
    """The CPU's nominal clock and where it was read. Nominal, not current: a host held below its clock
    (a BIOS power setting, a thermal limit) must score low, and dividing by the current clock would hide it."""
    base = host.read_text(CPUFREQ.format(cpu=cpu, name="base_frequency"))  # intel_pstate, amd-pstate: kHz
    if base and base.strip().isdigit() and int(base) > 0:
        return int(base) / 1e6, "cpufreq base_frequency"
    cpuinfo = host.read_text(CPUINFO) or ""
    for line in cpuinfo.splitlines():
        if line.startswith("model name") and (found := _MODEL_GHZ.search(line)):
            return float(found[1]), "cpuinfo model name"  # Intel prints the nominal clock there
    top = host.read_text(CPUFREQ.format(cpu=cpu, name="cpuinfo_max_freq"))
    if top and top.strip().isdigit() and int(top) > 0:
        return int(top) / 1e6, "cpufreq cpuinfo_max_freq"
    for line in cpuinfo.splitlines():  # without cpufreq (old kernels, Opteron era) this is the clock it runs at
        if line.startswith("cpu MHz") and ":" in line:
            try:
                return float(line.split(":", 1)[1]) / 1000, "cpuinfo cpu MHz"
            except ValueError:
                break
    return None, None


def _chain(words: memoryview, pages: int) -> int:
    """Link one word of every page into a single cycle in a shuffled (but fixed) order; the first word's index."""
    order = list(range(pages))
    random.Random(METHOD_VERSION).shuffle(order)  # noqa: S311 - a fixed walk, the same on every host, not a secret
    slots = [page * (PAGE // 4) + (page % 64) * 16 for page in order]  # a cache line that varies per page
    for here, there in zip(slots, slots[1:] + slots[:1], strict=True):
        words[here] = there
    return slots[0]


def _walk(words: memoryview, start: int, steps: int) -> int:
    """Dependent loads: each read's address is the previous read's value, so nothing overlaps and every
    step pays a TLB miss and (mostly) a cache miss in full."""
    index = start
    for _ in range(steps):
        index = words[index]
    return index


def measure(*, repeats: int = REPEATS, budget_s: float = BUDGET_S) -> tuple[float, float, int]:
    """The fastest hash and walk times (seconds) of up to `repeats` runs, and the reads each walk made."""
    started = time.perf_counter()
    hashed = bytes(range(256)) * (HASH_BYTES // 256)
    pages = WALK_BYTES // PAGE
    area = mmap.mmap(-1, WALK_BYTES)  # anonymous, released when closed
    if hasattr(mmap, "MADV_NOHUGEPAGE"):
        area.madvise(mmap.MADV_NOHUGEPAGE)  # 4 KiB pages, so the walk measures the TLB whatever THP is set to
    words = memoryview(area).cast("I")
    best_hash = best_walk = float("inf")
    try:
        start = _chain(words, pages)
        for _ in range(repeats):
            t0 = time.perf_counter()
            hashlib.sha256(hashed).digest()
            t1 = time.perf_counter()
            _walk(words, start, WALK_LAPS * pages)
            t2 = time.perf_counter()
            best_hash, best_walk = min(best_hash, t1 - t0), min(best_walk, t2 - t1)
            if t2 - started > budget_s:
                break
    finally:
        words.release()
        area.close()
    return best_hash, best_walk, WALK_LAPS * pages


def housekeeping_cpu(host: HostAccess) -> tuple[int | None, str]:
    """The CPU to run on: the highest of those this process may use that is neither isolated nor nohz_full."""
    found, problems = read_isolated(host)
    if problems:  # a list with a problem is not trusted, as the agent's pinning does not trust it
        return None, f"{problems[0]}: not run"
    if found is None:
        return None, "the isolated CPUs cannot be read: not run"
    usable = sorted(set(os.sched_getaffinity(0)) - found)
    if not usable:
        return None, "every CPU this agent may use is isolated or nohz_full: not run"
    return usable[-1], ""


def cpu_times(host: HostAccess, cpu: int) -> list[int] | None:
    """The cpuN line of /proc/stat: user nice system idle iowait irq softirq steal (jiffies), or None."""
    for line in (host.read_text(PROC_STAT) or "").splitlines():
        if line.startswith(f"cpu{cpu} "):
            fields = line.split()[1:9]
            if len(fields) >= 4 and all(f.isdigit() for f in fields):
                return [int(f) for f in fields] + [0] * (8 - len(fields))
    return None


def cpu_use(before: list[int] | None, after: list[int] | None) -> tuple[float, float] | None:
    """Busy and steal per cent of the CPU between two samples (busy: not idle, not iowait, not steal)."""
    if before is None or after is None:
        return None
    delta = [b - a for a, b in zip(before, after, strict=True)]
    total = sum(delta)
    if total <= 0:
        return None
    idle, steal = delta[3] + delta[4], delta[7]
    return round(100 * (total - idle - steal) / total, 1), round(100 * steal / total, 1)


def throttle_count(host: HostAccess, cpu: int) -> int | None:
    text = (host.read_text(THROTTLE.format(cpu=cpu)) or "").strip()
    return int(text) if text.isdigit() else None


def load_seen(host: HostAccess, cpu: int, *, check: bool = True) -> dict[str, float]:
    """The load average per CPU and the CPU's own use and steal over SAMPLE_S; HostBusy over the limits
    (unless `check` is off: bench/agent_benchmark.py measures the cost on a busy machine)."""
    seen: dict[str, float] = {}
    fields = (host.read_text(LOADAVG) or "").split()
    with contextlib.suppress(IndexError, ValueError):
        seen["loadavg_1m"] = float(fields[0])
        seen["load_per_cpu"] = round(seen["loadavg_1m"] / (os.cpu_count() or 1), 3)
    first = cpu_times(host, cpu)
    if first is not None:
        time.sleep(SAMPLE_S)
        if (use := cpu_use(first, cpu_times(host, cpu))) is not None:
            seen["cpu_busy_pct"], seen["steal_pct"] = use
    limits = (("load_per_cpu", MAX_LOAD_PER_CPU), ("cpu_busy_pct", MAX_CPU_BUSY_PCT), ("steal_pct", MAX_STEAL_PCT))
    over = [f"{key} {seen[key]} > {limit}" for key, limit in limits if seen.get(key, 0.0) > limit]
    if over and check:
        raise HostBusy(f"host busy on cpu{cpu} ({', '.join(over)}): not run", seen)
    return seen


def run_benchmark(
    host: HostAccess, now: dt.datetime, *, check_load: bool = True
) -> tuple[BenchmarkResult | None, CollectorRun]:
    """One run pinned to one housekeeping CPU (this thread only, put back afterwards); HostBusy when the
    host is too busy to be measured."""
    started = time.perf_counter()
    cpu, why = housekeeping_cpu(host)
    if cpu is None:
        return None, CollectorRun(status=CollectorStatus.unavailable, duration_ms=0.0, reason=why)
    ghz, clock_source = nominal_ghz(host, cpu)
    if ghz is None:
        reason = f"no nominal clock for cpu{cpu} ({CPUINFO}, cpufreq): no per-GHz score"
        return None, CollectorRun(status=CollectorStatus.unavailable, duration_ms=0.0, reason=reason)
    seen = load_seen(host, cpu, check=check_load)
    before = os.sched_getaffinity(0)
    times, throttled = cpu_times(host, cpu), throttle_count(host, cpu)
    try:
        os.sched_setaffinity(0, {cpu})  # pid 0: this thread
        hash_s, walk_s, pages = measure()
    finally:
        os.sched_setaffinity(0, before)
    if (use := cpu_use(times, cpu_times(host, cpu))) is not None:
        seen["steal_pct_run"] = use[1]
    if throttled is not None and (after := throttle_count(host, cpu)) is not None:
        seen["throttle_events"] = float(after - throttled)
    duration = time.perf_counter() - started
    result = BenchmarkResult(
        name=NAME,
        score=round(1.0 / (hash_s + walk_s) / ghz, 3),
        method_version=METHOD_VERSION,
        duration_s=round(duration, 3),
        cpu=cpu,
        ghz=round(ghz, 3),
        clock_source=clock_source,
        ran_at=now,
        parts={"hash_mib_s": round(HASH_BYTES / 2**20 / hash_s, 1), "walk_mpages_s": round(pages / walk_s / 1e6, 3)},
        conditions=seen,
    )
    return result, CollectorRun(status=CollectorStatus.ok, duration_ms=duration * 1000)


@dataclass
class BenchmarkSchedule:
    """Once a local day, at a minute of the window fixed per host (spread across the fleet, the same every
    day), or at the first cycle after it within the window; the day of the last run is kept on disk. A host
    found busy is tried again RETRY_AFTER later, within the window."""

    window: tuple[int, int] | None
    hostname: str
    state_file: Path | None = None
    last_day: str | None = None
    retry_at: dt.datetime | None = None

    def __post_init__(self) -> None:
        if self.state_file is not None:
            try:
                self.last_day = json.loads(self.state_file.read_text(encoding="utf-8")).get("last_day")
            except (OSError, ValueError, AttributeError):
                self.last_day = None

    @property
    def minute(self) -> int | None:
        if self.window is None:
            return None
        start, end = self.window
        return start + zlib.crc32(self.hostname.encode()) % (end - start)

    def due(self, local: dt.datetime) -> bool:
        if self.window is None or (minute := self.minute) is None:
            return False
        now = local.hour * 60 + local.minute
        return minute <= now < self.window[1] and self.last_day != local.date().isoformat()

    def ran(self, local: dt.datetime) -> None:
        self.mark(local.date().isoformat())

    def mark(self, day: str | None) -> None:
        self.last_day = day
        if self.state_file is not None:
            with contextlib.suppress(OSError):  # in memory only: at worst one more run after a restart
                self.state_file.write_text(json.dumps({"last_day": self.last_day}), encoding="utf-8")

    def maybe_run(
        self, host: HostAccess, now: dt.datetime | None = None
    ) -> tuple[BenchmarkResult | None, CollectorRun] | None:
        """The run when one is due now (and mark the day, whatever its outcome), else None."""
        now = now or dt.datetime.now(dt.UTC)
        local = now.astimezone()
        if not self.due(local) or (self.retry_at is not None and now < self.retry_at):
            return None
        previous = self.last_day
        self.ran(local)  # before the run: a run that fails is not retried every cycle of the night
        try:
            return run_benchmark(host, now)
        except HostBusy as busy:  # not a failure: the day stays open, tried again later in the window
            self.mark(previous)
            self.retry_at = now + RETRY_AFTER
            seen = ", ".join(f"{k} {v}" for k, v in busy.seen.items())
            again = self.retry_at.astimezone(dt.UTC)
            reason = f"{busy}; saw {seen or 'nothing readable'}; tried again after {again:%H:%M} UTC"
            return None, CollectorRun(status=CollectorStatus.unavailable, duration_ms=0.0, reason=reason[:1000])
        except (MemoryError, OSError) as error:
            reason = f"benchmark failed: {type(error).__name__}: {error}"[:1000]
            return None, CollectorRun(status=CollectorStatus.error, duration_ms=0.0, reason=reason)
