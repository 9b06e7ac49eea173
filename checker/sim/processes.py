"""A virtual host's processes as the agent's cputime watch reports them (docs/simulated-fleet.md).

Every host runs batch jobs one after another (eight hours each), its scan complete and clean: 140-199
user processes, two cycles of the agent's rotation through them (MAX_STATS_READ a cycle). A host
whose kernel build has the `cputime_wrap` side effect (checker/sim/hardware.py, KERNEL_BUILDS) shows
what INFN Pisa saw on 2.6.23.17-amdpatch: the running job's CPU time in /proc/PID/stat about 22 million
seconds above what it ran, with its stat line in the layout of the host's kernel (42 fields up to
2.6.23, 52 on the 6.x kernels).
"""

from __future__ import annotations

import datetime as dt
import zlib
from typing import TYPE_CHECKING

from checker.collectors.cputime import MAX_STATS_READ, TOLERANCE_S, USER_HZ
from checker.schemas import CputimeExcess, CputimeWatch
from checker.sim.hardware import CPUTIME_WRAP_TICKS, kernel_side_effects

if TYPE_CHECKING:
    from checker.sim.host import VirtualHost

BATCH_JOB = "cmsRun"  # a grid job's executable: what a batch node of the source's farm ran
JOB_START_AFTER_BOOT_S = 600  # the batch system starts its first job ten minutes after boot
JOB_LENGTH_S = 8 * 3600  # then one job after another, each eight hours
BUSY_SHARE = 0.97  # the job is CPU-bound: user + system time per second it runs


def _seed(host: VirtualHost) -> int:
    return zlib.crc32(host.hostname.encode())


def stat_line(kernel: str, pid: int, comm: str, utime: int, stime: int, start: int, cpu: int) -> str:
    """A /proc/PID/stat line as the kernel prints it (proc(5); fields 43-52 came with 2.6.24 and later)."""
    fields = [str(pid), f"({comm})", "R", "4080", str(pid), "4080", "0", "-1", "4194304", "183204", "0", "12", "0"]
    fields += [str(utime), str(stime), "0", "0", "20", "0", "1", "0", str(start), "2147483648", "204800"]
    fields += ["18446744073709551615", "4194304", "4215740", "140733193388032", "0", "0", "0", "0", "0", "0"]
    fields += ["0", "0", "0", "17", str(cpu), "0", "0", "0"]  # ... exit_signal, processor, rt_priority, policy, blkio
    if not kernel.startswith("2."):
        fields += ["0", "0", "6311936", "6314000", "27303936", "140733193390000", "140733193390020"]
        fields += ["140733193390020", "140733193392100", "0"]
    return " ".join(fields)


def cputime_watch(host: VirtualHost, now: dt.datetime) -> CputimeWatch:
    uptime = max(0.0, (now - host.boot_at).total_seconds()) if host.boot_at else 0.0
    seed = _seed(host)
    found: list[CputimeExcess] = []
    if "cputime_wrap" in kernel_side_effects(host.kernel) and uptime > JOB_START_AFTER_BOOT_S:
        jobs_before = int((uptime - JOB_START_AFTER_BOOT_S) // JOB_LENGTH_S)
        job_started = JOB_START_AFTER_BOOT_S + jobs_before * JOB_LENGTH_S
        elapsed = uptime - job_started
        utime = int(elapsed * BUSY_SHARE * USER_HZ) + CPUTIME_WRAP_TICKS  # the negative increment, read unsigned
        stime = int(elapsed * (1 - BUSY_SHARE) * USER_HZ)
        cputime = (utime + stime) / USER_HZ
        pid = 4000 + (seed + jobs_before * 7919) % 20000  # each job a new process
        line = stat_line(host.kernel, pid, BATCH_JOB, utime, stime, job_started * USER_HZ, seed % 4)
        found.append(
            CputimeExcess(
                pid=pid,
                tid=pid,
                comm=BATCH_JOB,
                threads=1,
                scope="thread",
                cputime_s=round(cputime, 2),
                elapsed_s=round(elapsed, 2),
                excess_s=round(cputime - elapsed, 2),
                stat_line=line,
            )
        )
    processes = 140 + seed % 60
    cycles = -(-processes // MAX_STATS_READ)  # the agent's rotation, one slice a cycle (a minute)
    per_cycle = -(-processes // cycles)
    slot = int(uptime // 60) % cycles
    checked = per_cycle if slot < cycles - 1 else processes - per_cycle * (cycles - 1)
    return CputimeWatch(
        checked=checked,
        flagged=len(found),
        processes=found,
        threads_read=len(found) + 3 * (seed % 4),  # the job's thread, and a few busy threaded daemons'
        bytes_read=checked * 330,
        complete=True,
        rotation_cycles=cycles,
        rotation_checked=processes,
        rotation_ahead=max(0, processes - per_cycle * (slot + 1)),
        rechecked=len(found),  # the job, flagged since it started, re-read every cycle
        tolerance_s=TOLERANCE_S,
        cpus=host.hardware.logical_cpus,
        clk_tck=USER_HZ,
        uptime_s=round(uptime, 2),
    )
