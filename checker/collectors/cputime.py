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

So: one /proc/PID/stat read per user process. A process within run time + tolerance is clean (no thread
of it can be far over its own). One above it has its threads read: a thread over its own run time +
tolerance flags it; if none is, the process is flagged only when it is over run time x CPUs + tolerance,
else it is a busy multi-threaded process. The tolerance is gross (an hour) on purpose: the symptom is
millions of seconds, and tick rounding or a clock quirk must never fire it.

A cycle reads at most MAX_STATS_READ stat files (a few ms of CPU where thousands of processes run):
its slice of a rotation through the process list, in pid order, from where the last cycle stopped
(checker.collectors.cputime_rotation), after re-reading the processes flagged before, so a flagged
process stays flagged while it is over rather than only when the rotation passes it.
"""

from __future__ import annotations

import os
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Literal

from checker.collectors.context import Context, Unavailable
from checker.collectors.cputime_rotation import CURSOR, MAX_WATCHED, Rotation, Watched
from checker.collectors.isolated_workload import MAX_PID_DIGITS, PROC, kernel_threads
from checker.parsers.common import parse_cpu_list
from checker.parsers.task_stat import TaskStat, parse_task_stat
from checker.schemas import MAX_CPUTIME_FINDINGS, CputimeExcess, CputimeWatch

UPTIME = "/proc/uptime"
BOOT_ID = "/proc/sys/kernel/random/boot_id"  # a new boot: the rotation starts afresh
POSSIBLE_CPUS = "/sys/devices/system/cpu/possible"
MAX_STATS_READ = 128  # /proc/PID/stat and /proc/PID/task/TID/stat files per cycle (bench/cputime.py)
MAX_THREADS_READ = 512  # one process's threads, read only when it comes first in its cycle's slice
MAX_BYTES_READ = 1 << 20  # all stat files of a cycle together (a stat line is 150-400 bytes)
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
    reads: int = 0  # stat files, processes' and threads'
    threads_read: int = 0
    unreadable: int = 0  # stat files read that did not parse (each a problem)
    caps: set[str] = field(default_factory=set)

    def read(self, path: str) -> _Judged | None:
        """One stat file, judged against the uptime; None when it is gone (the task exited) or unreadable."""
        self.reads += 1
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
    boot_id = (ctx.host.read_text(BOOT_ID) or "").strip()[:64] or None
    rotation = Rotation.load(ctx.state.get(CURSOR), uptime, boot_id)
    skip = kernel_threads(ctx)
    # One pass over what may be thousands of entries: this listing is most of a cycle's fixed cost.
    numbers = {int(e) for e in entries if e.isdecimal() and e.isascii() and len(e) <= MAX_PID_DIGITS}
    pids = sorted(numbers - skip)
    found: list[_Found] = []
    judged: set[int] = set()
    retry: list[Watched] = []  # flagged before, not verifiable this cycle: tried again next cycle
    rechecked = len(rotation.watch)
    for watched in rotation.watch:  # first, so what was flagged stays flagged while it is over
        alive, verdict = _recheck(scan, watched, cpus)
        if alive:
            judged.add(watched.pid)  # the slice passes it by this cycle
        if verdict is None:
            retry.append(watched)
        elif verdict is not False:
            found.append(verdict)
    checked, ahead = _slice(scan, rotation, pids, judged, cpus, found)
    found.sort(key=lambda f: -f.finding.excess_s)
    rotation.watch = [f.watched for f in found][: MAX_WATCHED - len(retry)] + retry
    ctx.state.stage(CURSOR, rotation.dump())
    last = rotation.last
    ctx.observations.cputime = CputimeWatch(
        checked=len(judged) + checked,  # retried ones included: read, though not judged to the end
        flagged=len(found),
        processes=[f.finding for f in found[:MAX_CPUTIME_FINDINGS]],
        threads_read=scan.threads_read,
        unscanned=rotation.unscanned,
        unverified=rotation.unverified + len(retry),
        caps_hit=sorted(scan.caps),
        bytes_read=scan.bytes_read,
        complete=rotation.complete and not retry,
        tolerance_s=TOLERANCE_S,
        cpus=cpus,
        clk_tck=scan.clk_tck,
        uptime_s=uptime,
        rotation_cycles=last.cycles if last is not None else None,
        rotation_checked=last.checked if last is not None else None,
        rotation_ahead=ahead,
        rechecked=rechecked,
    )


def _slice(
    scan: _Scan, rotation: Rotation, pids: list[int], judged: set[int], cpus: int | None, found: list[_Found]
) -> tuple[int, int]:
    """This cycle's part of the rotation: the pids after the cursor, in order, each judged whole, until
    MAX_STATS_READ stat files were read. Processes judged, and pids left for later cycles (0: the rotation
    ended here)."""
    ahead = pids if rotation.after is None else pids[bisect_right(pids, rotation.after) :]
    if not ahead and rotation.after is not None:
        rotation.finish()  # nothing left past the cursor (they exited, the pid space wrapped): begin again
        ahead = pids
    tally = rotation.current
    tally.cycles += 1
    slice_start = scan.reads
    checked = 0
    for index, pid in enumerate(ahead):
        if pid in judged:  # re-checked this cycle already
            tally.checked += 1
            rotation.after = pid
            continue
        used = scan.reads - slice_start  # the re-checks have their own bound (MAX_WATCHED)
        first = used == 0  # read whatever is left, so a rotation always moves on
        if not first and used >= MAX_STATS_READ:
            scan.caps.add("processes")
            return checked, len(ahead) - index
        if not first and scan.out_of_bytes():
            return checked, len(ahead) - index
        unreadable = scan.unreadable
        process = scan.read(f"{PROC}/{pid}/stat")
        if process is None or process.stat.kernel_thread or process.stat.exited:
            tally.unscanned += scan.unreadable - unreadable  # a stat line that did not parse: not judged
            rotation.after = pid  # gone, the kernel's own, or a zombie whose time is final
            continue
        # The slice's first may read up to MAX_THREADS_READ threads; the others what is left.
        limit = MAX_THREADS_READ if first else min(MAX_THREADS_READ, MAX_STATS_READ - (scan.reads - slice_start))
        if _over_run_time(process) and not first and limit < max(process.stat.num_threads, 1) <= MAX_THREADS_READ:
            scan.caps.add("processes")  # its threads do not fit in what is left: it comes first next cycle
            return checked, len(ahead) - index
        caps = set(scan.caps)
        verdict = _judge(scan, process, cpus, limit) if _over_run_time(process) else False
        if verdict is None and not first and "bytes" in scan.caps - caps:
            return checked, len(ahead) - index  # cut short by the byte cap: judged again next cycle
        checked += 1
        tally.checked += 1
        rotation.after = pid
        if verdict is None:
            tally.unverified += 1
        elif verdict is not False:
            found.append(verdict)
    rotation.finish()
    return checked, 0


def _recheck(scan: _Scan, watched: Watched, cpus: int | None) -> tuple[bool, _Found | Literal[False] | None]:
    """A process flagged before, read again: whether it is still there (not exited, its pid not another
    process's now: the rotation judges that one), and its finding while it is still over, False when it
    is not, None when that could not be told this cycle."""
    process = scan.read(f"{PROC}/{watched.pid}/stat")
    if process is None or process.stat.starttime != watched.start or process.stat.exited:
        return False, False
    if watched.tid is not None:  # the thread found over, alone: two reads while it still is
        thread = scan.read(f"{PROC}/{watched.pid}/task/{watched.tid}/stat")
        if thread is not None and thread.cputime_s > thread.elapsed_s + TOLERANCE_S:
            return True, _finding(process, thread, "thread", thread.cputime_s - thread.elapsed_s)
    if not _over_run_time(process):
        return True, False
    return True, _judge(scan, process, cpus, max(0, MAX_THREADS_READ - scan.threads_read))


def _over_run_time(process: _Judged) -> bool:
    """Above what one thread could have used: only then can a thread of it be over its own run time."""
    return process.cputime_s > process.elapsed_s + TOLERANCE_S


def _judge(scan: _Scan, process: _Judged, cpus: int | None, limit: int) -> _Found | Literal[False] | None:
    """A process above its run time: its worst thread if one is over its own run time, the process when
    no number of CPUs explains it, False when its threads explain it, None when that could not be told
    (more threads than `limit`, the byte cap, a thread's stat line that did not parse)."""
    stat = process.stat
    over_every_cpu = cpus is not None and process.cputime_s > process.elapsed_s * cpus + TOLERANCE_S
    threads: list[_Judged] = []
    read_all = False
    if max(stat.num_threads, 1) > limit:
        scan.caps.add("threads")  # one that does not fit is not read in part
    elif not scan.out_of_bytes():
        read_all = True
        read = 0
        for tid in scan.ctx.host.list_dir(f"{PROC}/{stat.pid}/task") or []:
            if read >= limit or scan.out_of_bytes():
                read_all = False
                break
            if tid.isascii() and tid.isdecimal():
                read += 1
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


@dataclass
class _Found:
    finding: CputimeExcess
    watched: Watched


def _finding(process: _Judged, over: _Judged, scope: str, excess: float) -> _Found:
    thread = scope == "thread"
    finding = CputimeExcess(
        pid=process.stat.pid,
        tid=over.stat.pid if thread else None,
        comm=process.stat.comm[:64],
        threads=process.stat.num_threads,
        scope="thread" if thread else "process",
        cputime_s=round(over.cputime_s, 2),
        elapsed_s=round(over.elapsed_s, 2),
        excess_s=round(max(0.0, excess), 2),
        stat_line=over.line,
    )
    return _Found(finding, Watched(process.stat.pid, process.stat.starttime, over.stat.pid if thread else None))
