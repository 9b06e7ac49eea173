"""The cputime side-effect watch (seed 001): user processes whose CPU time is more than they could have used.

INFN Pisa's first erratum-298 kernel (2.6.23.17-amdpatch) sometimes turned a negative cputime increment
into a huge unsigned one: /proc/[pid]/stat showed about 22 million seconds of CPU time on processes that
had run for hours, and the batch system killed about 2% of jobs for passing their CPU-time limit
(INFN/CCR-11/01, section 4). The symptom is CPU time above run time, and the bound is chosen so that no
healthy process can cross it, however many threads it runs:

- A thread runs on one CPU at a time, so its own utime + stime (/proc/PID/task/TID/stat) can never
  exceed its own run time (uptime - starttime). That bound is exact.
- A process's utime + stime (/proc/PID/stat) is its whole thread group's, including threads that have
  exited (the kernel keeps their time in the signal struct), so neither its thread count now nor its CPU
  affinity now bounds it; only the CPUs the host could ever run (/sys/devices/system/cpu/possible) do.

So: one /proc/PID/stat read per user process, oldest first (the bug shows on accumulated time; pids rise
with age until they wrap). A process within run time + tolerance is clean (no thread of it can be far
over its own). One above it has its threads read (the most suspicious first, capped): a thread over its
own run time + tolerance flags it; if none is, the process is flagged only when it is over run time x
CPUs + tolerance, else it is a busy multi-threaded process. The tolerance is gross (an hour) on purpose:
the symptom is millions of seconds, and tick rounding or a clock quirk must never fire it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Literal

from checker.collectors.context import Context, Unavailable
from checker.collectors.isolated_workload import MAX_PID_DIGITS, PROC, kernel_threads
from checker.parsers.common import parse_cpu_list
from checker.parsers.task_stat import TaskStat, parse_task_stat
from checker.schemas import MAX_CPUTIME_FINDINGS, CputimeExcess, CputimeWatch

UPTIME = "/proc/uptime"
POSSIBLE_CPUS = "/sys/devices/system/cpu/possible"
MAX_PROCESSES_READ = 1024  # /proc/PID/stat files per cycle
MAX_THREADS_READ = 512  # /proc/PID/task/TID/stat files per cycle
MAX_BYTES_READ = 1 << 20  # all stat files together (a stat line is 150-400 bytes)
TOLERANCE_S = 3600.0  # CPU seconds over the bound before anything is flagged
USER_HZ = 100  # what the kernel reports clock ticks in on x86 and most architectures, when sysconf cannot say
MAX_STAT_LINE = 1024


def clock_ticks() -> int:
    """sysconf(_SC_CLK_TCK): the unit of utime, stime and starttime (USER_HZ, an ABI constant per
    architecture, so the agent's own answer holds for a snapshot taken on the same architecture)."""
    try:
        ticks = os.sysconf("SC_CLK_TCK")
    except (ValueError, OSError):
        return USER_HZ
    return ticks if ticks > 0 else USER_HZ


@dataclass
class _Judged:
    stat: TaskStat
    line: str
    cputime_s: float
    elapsed_s: float

    @property
    def ratio(self) -> float:
        return self.cputime_s / max(self.elapsed_s, 1.0)


@dataclass
class _Scan:
    ctx: Context
    clk_tck: int
    uptime_s: float
    bytes_read: int = 0
    threads_read: int = 0
    unreadable: int = 0  # stat files read that did not parse (each a problem)
    caps: set[str] = field(default_factory=set)

    def read(self, path: str) -> _Judged | None:
        """One stat file, judged against the uptime; None when it is gone (the task exited) or unreadable."""
        text = self.ctx.host.read_text(path)
        if text is None:
            return None
        self.bytes_read += len(text)
        parsed = parse_task_stat(text)
        if parsed.value is None:
            self.ctx.problem(f"{path}: {parsed.problems[0] if parsed.problems else 'unreadable'}")
            self.unreadable += 1
            return None
        stat = parsed.value
        cputime = (stat.utime + stat.stime) / self.clk_tck
        elapsed = max(0.0, self.uptime_s - stat.starttime / self.clk_tck)
        return _Judged(stat, text.strip()[:MAX_STAT_LINE], cputime, elapsed)

    def out_of_bytes(self) -> bool:
        if self.bytes_read >= MAX_BYTES_READ:
            self.caps.add("bytes")
            return True
        return False


def read_uptime(ctx: Context) -> float:
    text = ctx.host.read_text(UPTIME)
    first = text.split()[0] if text and text.split() else ""
    try:
        uptime = float(first)
    except ValueError:
        uptime = -1.0
    if not 0 <= uptime < 1e10:
        raise Unavailable(f"{UPTIME} cannot be read" if text is None else f"{UPTIME}: not an uptime: {first[:40]!r}")
    return uptime


def possible_cpus(ctx: Context) -> int | None:
    """The most CPUs the host can ever have online (hotplug included): what bounds a thread group."""
    text = ctx.host.read_text(POSSIBLE_CPUS)
    if text is None:
        return None
    cpus = parse_cpu_list(text)
    for item in cpus.problems:
        ctx.problem(f"{POSSIBLE_CPUS}: {item}")
    return len(cpus.value) or None


def collect(ctx: Context) -> None:
    uptime = read_uptime(ctx)
    entries = ctx.host.list_dir(PROC)
    if entries is None:
        raise Unavailable(f"{PROC} cannot be listed")
    cpus = possible_cpus(ctx)
    scan = _Scan(ctx, clock_ticks(), uptime)
    skip = kernel_threads(ctx)
    pids = sorted(int(e) for e in entries if e.isascii() and e.isdecimal() and len(e) <= MAX_PID_DIGITS)
    pids = [pid for pid in pids if pid not in skip]
    if len(pids) > MAX_PROCESSES_READ:
        scan.caps.add("processes")
    unscanned = max(0, len(pids) - MAX_PROCESSES_READ)
    checked = 0
    over: list[_Judged] = []
    for index, pid in enumerate(pids[:MAX_PROCESSES_READ]):
        if scan.out_of_bytes():
            unscanned += min(len(pids), MAX_PROCESSES_READ) - index
            break
        unreadable = scan.unreadable
        process = scan.read(f"{PROC}/{pid}/stat")
        if process is None and scan.unreadable > unreadable:
            unscanned += 1  # not judged: the scan is not complete
        if process is None or process.stat.kernel_thread or process.stat.exited:
            continue  # gone, unreadable (a problem), the kernel's own, or a zombie whose time is final
        checked += 1
        if process.cputime_s > process.elapsed_s + TOLERANCE_S:
            over.append(process)
    findings: list[CputimeExcess] = []
    unverified = 0
    for process in sorted(over, key=lambda p: -p.ratio):  # the most suspicious get the thread reads first
        found = _judge(scan, process, cpus)
        if found is None:
            unverified += 1
        elif found is not False:
            findings.append(found)
    findings.sort(key=lambda f: -f.excess_s)
    ctx.observations.cputime = CputimeWatch(
        checked=checked,
        flagged=len(findings),
        processes=findings[:MAX_CPUTIME_FINDINGS],
        threads_read=scan.threads_read,
        unscanned=unscanned,
        unverified=unverified,
        caps_hit=sorted(scan.caps),
        bytes_read=scan.bytes_read,
        complete=unscanned == 0 and unverified == 0,
        tolerance_s=TOLERANCE_S,
        cpus=cpus,
        clk_tck=scan.clk_tck,
        uptime_s=uptime,
    )


def _judge(scan: _Scan, process: _Judged, cpus: int | None) -> CputimeExcess | Literal[False] | None:
    """A process above its run time: its worst thread if one is over its own run time, the process when
    no number of CPUs explains it, False when its threads explain it, None when that could not be told."""
    stat = process.stat
    over_every_cpu = cpus is not None and process.cputime_s > process.elapsed_s * cpus + TOLERANCE_S
    threads: list[_Judged] = []
    read_all = False
    if scan.threads_read + max(stat.num_threads, 1) > MAX_THREADS_READ:
        scan.caps.add("threads")  # one that does not fit in what is left is not read in part
    elif not scan.out_of_bytes():
        read_all = True
        for tid in scan.ctx.host.list_dir(f"{PROC}/{stat.pid}/task") or []:
            if scan.threads_read >= MAX_THREADS_READ or scan.out_of_bytes():
                read_all = False
                break
            if tid.isascii() and tid.isdecimal():
                scan.threads_read += 1
                unreadable = scan.unreadable
                if (thread := scan.read(f"{PROC}/{stat.pid}/task/{tid}/stat")) is not None:
                    threads.append(thread)
                elif scan.unreadable > unreadable:
                    read_all = False  # a thread that could not be judged clears nothing
    worst = max(
        (t for t in threads if t.cputime_s > t.elapsed_s + TOLERANCE_S),
        key=lambda t: t.cputime_s - t.elapsed_s,
        default=None,
    )
    if worst is not None:
        return _finding(process, worst, "thread", worst.cputime_s - worst.elapsed_s)
    if over_every_cpu:
        return _finding(process, process, "process", process.cputime_s - process.elapsed_s * (cpus or 1))
    return False if read_all else None


def _finding(process: _Judged, over: _Judged, scope: str, excess: float) -> CputimeExcess:
    return CputimeExcess(
        pid=process.stat.pid,
        tid=over.stat.pid if scope == "thread" else None,
        comm=process.stat.comm[:64],
        threads=process.stat.num_threads,
        scope="thread" if scope == "thread" else "process",
        cputime_s=round(over.cputime_s, 2),
        elapsed_s=round(over.elapsed_s, 2),
        excess_s=round(max(0.0, excess), 2),
        stat_line=over.line,
    )
