"""The agent's own benchmark: a short, bounded CPU + memory/TLB run, once a day off-peak, on one
housekeeping CPU, scored per core per GHz so hosts of one hardware class can be compared (seed 001:
the erratum-298 BIOS workaround disabled the TLB and halved HEP-SPEC06 per core per GHz, 1.66 vs 3.4-3.9).

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


def run_benchmark(host: HostAccess, now: dt.datetime) -> tuple[BenchmarkResult | None, CollectorRun]:
    """One run pinned to one housekeeping CPU (this thread only, put back afterwards)."""
    started = time.perf_counter()
    cpu, why = housekeeping_cpu(host)
    if cpu is None:
        return None, CollectorRun(status=CollectorStatus.unavailable, duration_ms=0.0, reason=why)
    ghz, clock_source = nominal_ghz(host, cpu)
    if ghz is None:
        reason = f"no nominal clock for cpu{cpu} ({CPUINFO}, cpufreq): no per-GHz score"
        return None, CollectorRun(status=CollectorStatus.unavailable, duration_ms=0.0, reason=reason)
    before = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {cpu})  # pid 0: this thread
        hash_s, walk_s, pages = measure()
    finally:
        os.sched_setaffinity(0, before)
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
    )
    return result, CollectorRun(status=CollectorStatus.ok, duration_ms=duration * 1000)


@dataclass
class BenchmarkSchedule:
    """Once a local day, at a minute of the window fixed per host (spread across the fleet, the same every
    day), or at the first cycle after it within the window; the day of the last run is kept on disk."""

    window: tuple[int, int] | None
    hostname: str
    state_file: Path | None = None
    last_day: str | None = None

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
        self.last_day = local.date().isoformat()
        if self.state_file is not None:
            with contextlib.suppress(OSError):  # in memory only: at worst one more run after a restart
                self.state_file.write_text(json.dumps({"last_day": self.last_day}), encoding="utf-8")

    def maybe_run(
        self, host: HostAccess, now: dt.datetime | None = None
    ) -> tuple[BenchmarkResult | None, CollectorRun] | None:
        """The run when one is due now (and mark the day, whatever its outcome), else None."""
        now = now or dt.datetime.now(dt.UTC)
        local = now.astimezone()
        if not self.due(local):
            return None
        self.ran(local)  # before the run: a run that fails is not retried every cycle of the night
        try:
            return run_benchmark(host, now)
        except (MemoryError, OSError) as error:
            reason = f"benchmark failed: {type(error).__name__}: {error}"[:1000]
            return None, CollectorRun(status=CollectorStatus.error, duration_ms=0.0, reason=reason)
