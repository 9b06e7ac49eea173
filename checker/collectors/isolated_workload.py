"""Processes on isolated cores: which user processes have threads whose last CPU is isolated.

TLB-shootdown IPIs on an isolated core come from munmap/mprotect in sibling threads of the process
running there; no IRQ affinity moves them, the process's owner must. This names that process. Only
hosts with isolated CPUs (isolcpus and nohz_full, from /proc/cmdline and /sys/devices/system/cpu) are
scanned, and cheaply (seed 004: the watcher must not be the jitter): kernel threads are known from
kthreadd's children list (one read) and skipped, then one /proc/PID/stat per process (single-threaded
ones end there), /proc/PID/task/TID/stat only for the threads of multi-threaded user processes, both
capped, and /proc/PID/comm only for the processes reported.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from checker.collectors.base import HostAccess
from checker.collectors.context import Context, Unavailable
from checker.parsers.common import parse_cpu_list
from checker.parsers.identity import parse_cmdline
from checker.parsers.task_stat import TaskStat, parse_task_stat
from checker.schemas import MAX_ISOLATED_PROCESSES, IsolatedProcess, IsolatedWorkload

PROC = "/proc"
CMDLINE = "/proc/cmdline"
SYS_ISOLATED = "/sys/devices/system/cpu/isolated"
SYS_NOHZ_FULL = "/sys/devices/system/cpu/nohz_full"
KTHREADD = 2  # every kernel thread but kthreadd itself is its child
MAX_PROCESSES_SCANNED = 512  # /proc/PID/stat files read per cycle, kthreadd's children not counted
MAX_THREADS_READ = 512  # /proc/PID/task/TID/stat files read per cycle
MAX_PID_DIGITS = 10


@dataclass
class _Found:
    stat: TaskStat
    threads: int = 0
    by_cpu: dict[int, int] = field(default_factory=dict)

    def count(self, task: TaskStat, isolated: set[int]) -> None:
        self.threads += 1
        if task.processor in isolated:
            self.by_cpu[task.processor] = self.by_cpu.get(task.processor, 0) + 1


def read_isolated(host: HostAccess) -> tuple[set[int] | None, list[str]]:
    """The isolcpus and nohz_full CPUs from the command line and sysfs (either may be all there is: a kernel
    without nohz_full support has no sysfs file), None when none of the three can be read; and the sysfs
    files' problems. The collector reports those; the agent's pinning (checker.agent.worker) trusts no
    list with one."""
    found: set[int] = set()
    problems: list[str] = []
    read_any = False
    cmdline = host.read_text(CMDLINE)
    if cmdline is not None:
        read_any = True
        parsed = parse_cmdline(cmdline).value  # its problems are the identity collector's to report
        found.update(parsed.isolated_cpus, parsed.nohz_full_cpus)
    for path in (SYS_ISOLATED, SYS_NOHZ_FULL):
        text = host.read_text(path)
        if text is None:
            continue
        read_any = True
        if text.strip() == "(null)":  # nohz_full on kernels where no CPU is nohz_full
            continue
        cpus = parse_cpu_list(text)
        problems += [f"{path}: {item}" for item in cpus.problems]
        found.update(cpus.value)
    return (found if read_any else None), problems


def isolated_cpus(ctx: Context) -> list[int] | None:
    """read_isolated, its problems reported."""
    found, problems = read_isolated(ctx.host)
    for item in problems:
        ctx.problem(item)
    return sorted(found) if found is not None else None


def _stat(ctx: Context, path: str) -> TaskStat | None:
    text = ctx.host.read_text(path)
    if text is None:
        return None  # the task exited since /proc was listed
    parsed = parse_task_stat(text)
    if parsed.value is None:
        ctx.problem(f"{path}: {parsed.problems[0] if parsed.problems else 'unreadable'}")
    return parsed.value


def kernel_threads(ctx: Context) -> set[int]:
    """kthreadd and its children (/proc/2/task/2/children, CONFIG_PROC_CHILDREN): one read spares a
    stat read per kernel thread, half the pids of a big host. Only when pid 2 is kthreadd (in a PID
    namespace it is not); a list that is missing or misses one costs that stat read, nothing more."""
    stat = _stat(ctx, f"{PROC}/{KTHREADD}/stat")
    if stat is None or not stat.kernel_thread:
        return set()
    children = ctx.host.read_text(f"{PROC}/{KTHREADD}/task/{KTHREADD}/children") or ""
    return {KTHREADD} | {int(c) for c in children.split() if c.isascii() and c.isdecimal() and len(c) <= MAX_PID_DIGITS}


def collect(ctx: Context) -> None:
    isolated_list = isolated_cpus(ctx)
    if isolated_list is None:
        raise Unavailable(f"{CMDLINE}, {SYS_ISOLATED} and {SYS_NOHZ_FULL} cannot be read")
    if not isolated_list:
        raise Unavailable("no isolated CPUs (isolcpus, nohz_full): no workload to watch")
    entries = ctx.host.list_dir(PROC)
    if entries is None:
        raise Unavailable(f"{PROC} cannot be listed")
    isolated = set(isolated_list)
    skip = kernel_threads(ctx)
    # Newest first: the workload started after boot, and so did few kernel threads (a list that was
    # not read leaves them to be found by their flags, where they would crowd out the cap).
    pids = sorted((int(e) for e in entries if e.isascii() and e.isdecimal() and len(e) <= MAX_PID_DIGITS), reverse=True)
    pids = [pid for pid in pids if pid not in skip]
    scanned = pids[:MAX_PROCESSES_SCANNED]
    unscanned = len(pids) - len(scanned)
    found: list[_Found] = []
    threaded: list[_Found] = []
    for pid in scanned:
        stat = _stat(ctx, f"{PROC}/{pid}/stat")
        if stat is None or stat.kernel_thread or stat.exited:
            continue  # kernel threads are the kernel's own per-CPU work, not a workload
        process = _Found(stat)
        found.append(process)
        if stat.num_threads <= 1:
            process.count(stat, isolated)
        else:
            threaded.append(process)
    # Threads cost a read each: processes whose main thread ran on an isolated CPU first (then the
    # newest), and one too big for what is left of the cap is skipped (counted), not read in part.
    threaded.sort(key=lambda p: (p.stat.processor not in isolated, -p.stat.pid))
    threads_read = 0
    for process in threaded:
        pid = process.stat.pid
        if threads_read + process.stat.num_threads > MAX_THREADS_READ:
            unscanned += 1
            continue
        for tid in ctx.host.list_dir(f"{PROC}/{pid}/task") or []:
            if threads_read >= MAX_THREADS_READ:
                break
            if not tid.isdecimal():
                continue
            task = _stat(ctx, f"{PROC}/{pid}/task/{tid}/stat")
            threads_read += 1
            if task is not None and not task.exited:
                process.count(task, isolated)
    on_isolated = sorted((p for p in found if p.by_cpu), key=lambda p: (-sum(p.by_cpu.values()), p.stat.pid))
    ctx.observations.isolated_workload = IsolatedWorkload(
        isolated_cpus=isolated_list,
        processes=[_reported(ctx, p) for p in on_isolated[:MAX_ISOLATED_PROCESSES]],
        dropped=max(0, len(on_isolated) - MAX_ISOLATED_PROCESSES),
        processes_scanned=len(scanned),
        threads_read=threads_read,
        unscanned=unscanned,
    )


def _reported(ctx: Context, process: _Found) -> IsolatedProcess:
    pid = process.stat.pid
    comm = ctx.host.read_text(f"{PROC}/{pid}/comm")
    return IsolatedProcess(
        pid=pid,
        comm=(comm.rstrip("\n") if comm else process.stat.comm)[:64],
        threads=process.threads,
        isolated_threads=sum(process.by_cpu.values()),
        threads_by_cpu={str(cpu): n for cpu, n in sorted(process.by_cpu.items())},
    )
