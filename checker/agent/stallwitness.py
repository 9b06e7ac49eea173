"""What else happened on the host during a stall probe window: what tells an SMI from other all-core stalls.

An all-core stall is the SMI signature (seed 000), but a hypervisor that deschedules every vCPU
(steal time), a CPU quota that throttles the agent's cgroup (the probe's threads with it: the unit's
CPUQuota=) and CPUs too busy for the probe's threads to run look the same. So each window also
records, from plain reads at its start and end (seed 004: no busy loops): the steal time of the
probed CPUs (/proc/stat, the cpuN lines' 8th field), the probe's own cgroup's throttling (cgroup v2
cpu.stat: nr_throttled, throttled_usec), the 1-minute load and online CPUs, the SMIs counted
(Intel's MSR_SMI_COUNT, 0x34, on the first probed CPU: the counter the `smi` collector reads; every
SMI stops every CPU, so one is enough), and whether the CPU says it runs under a hypervisor
(/proc/cpuinfo's `hypervisor` flag). Stdlib only, like the probe; an unreadable source is null, not zero.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from dataclasses import dataclass
from typing import Any

MSR_SMI_COUNT = 0x34
SMI_WRAP = 2**32  # bits 31:0 count and wrap
SMI_SAMPLE_S = 1.0  # between the first probe thread's reads of MSR_SMI_COUNT
PROC_STAT = "/proc/stat"
LOADAVG = "/proc/loadavg"
CPUINFO = "/proc/cpuinfo"
OWN_CGROUP = "/proc/self/cgroup"
CGROUP_ROOT = "/sys/fs/cgroup"


@dataclass(frozen=True)
class Sample:
    steal_ticks: int | None
    nr_throttled: int | None
    throttled_us: int | None
    smi_count: int | None


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def steal_ticks(text: str | None, cpus: list[int]) -> int | None:
    """The probed CPUs' steal time summed (USER_HZ ticks), from /proc/stat's cpuN lines."""
    if text is None:
        return None
    wanted = {f"cpu{cpu}" for cpu in cpus}
    total, seen = 0, 0
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0] in wanted and len(fields) > 8 and fields[8].isdigit():
            total += int(fields[8])
            seen += 1
    return total if seen else None


def cgroup_cpu_stat(own_cgroup: str | None) -> tuple[str | None, str]:
    """The cpu.stat path of this process's cgroup v2 (the `0::` line), or None and why."""
    for line in (own_cgroup or "").splitlines():
        if line.startswith("0::"):
            return f"{CGROUP_ROOT}{line[3:].rstrip('/')}/cpu.stat", ""
    return None, "no cgroup v2 entry in /proc/self/cgroup"


def throttling(text: str | None) -> tuple[int | None, int | None]:
    """(nr_throttled, throttled_usec) of a cgroup v2 cpu.stat; None where absent (no cpu controller)."""
    values: dict[str, int] = {}
    for line in (text or "").splitlines():
        key, _, value = line.partition(" ")
        if value.strip().isdigit():
            values[key] = int(value)
    return values.get("nr_throttled"), values.get("throttled_usec")


def hypervisor_flag(text: str | None) -> bool | None:
    """The first `flags` line of /proc/cpuinfo has `hypervisor` (x86); None without one (arm64, unreadable)."""
    for line in (text or "").splitlines():
        if line.startswith("flags"):
            return "hypervisor" in line.partition(":")[2].split()
    return None


def read_smi_count(cpu: int) -> int | None:
    """MSR_SMI_COUNT of one CPU through the msr driver; None when it cannot be read (no module, no
    permission, not Intel: the read fails with EIO)."""
    try:
        descriptor = os.open(f"/dev/cpu/{cpu}/msr", os.O_RDONLY)
    except OSError:
        return None
    try:
        raw = os.pread(descriptor, 8, MSR_SMI_COUNT)
    except OSError:
        return None
    finally:
        os.close(descriptor)
    return int.from_bytes(raw, "little") % SMI_WRAP if len(raw) == 8 else None


class SmiSampler:
    """MSR_SMI_COUNT of one CPU, read by that CPU's own probe thread every SMI_SAMPLE_S and right after
    each of its stalls (an open descriptor, one pread: on the CPU itself a local rdmsr, no IPI), so an
    all-core stall's SMIs are counted from about a second before it to just after it. Over a 10 s
    window instead, a platform's background SMIs (some take one a minute) would fall beside a stall
    that was no SMI one time in six."""

    def __init__(self, cpu: int, every_s: float = SMI_SAMPLE_S) -> None:
        self.cpu = cpu
        self.every_s = every_s
        self.samples: deque[tuple[float, int]] = deque(maxlen=8192)  # (monotonic, count): over two hours
        self.lock = threading.Lock()
        self.descriptor: int | None = None
        self.next_at = 0.0

    def open(self) -> None:
        try:
            self.descriptor = os.open(f"/dev/cpu/{self.cpu}/msr", os.O_RDONLY)
        except OSError:
            self.descriptor = None  # no msr module, no permission: the window's count is all there is

    def maybe(self, now: float, stalled: bool) -> None:
        if self.descriptor is None or (now < self.next_at and not stalled):
            return
        self.next_at = now + self.every_s
        try:
            raw = os.pread(self.descriptor, 8, MSR_SMI_COUNT)
        except OSError:  # not Intel (EIO): stop trying
            self.close()
            return
        with self.lock:
            self.samples.append((now, int.from_bytes(raw, "little") % SMI_WRAP))

    def around(self, start: float, end: float) -> tuple[int, float] | None:
        """SMIs from the last sample at or before `start` to the first at or after `end`, and that span."""
        with self.lock:
            samples = list(self.samples)
        before = next((s for s in reversed(samples) if s[0] <= start), None)
        after = next((s for s in samples if s[0] >= end), None)
        if before is None or after is None:
            return None
        return (after[1] - before[1]) % SMI_WRAP, round(after[0] - before[0], 3)

    def close(self) -> None:
        if self.descriptor is not None:
            os.close(self.descriptor)
            self.descriptor = None


class Witness:
    """Samples at each window's edges; `window()` gives the figures between two samples."""

    def __init__(self, cpus: list[int]) -> None:
        self.cpus = cpus
        self.cpu_stat, _ = cgroup_cpu_stat(_read(OWN_CGROUP))
        self.hypervisor = hypervisor_flag(_read(CPUINFO))  # read once: a host does not change it
        self.tick_ms = 1000 / os.sysconf("SC_CLK_TCK")

    def sample(self) -> Sample:
        nr, us = throttling(_read(self.cpu_stat)) if self.cpu_stat else (None, None)
        smi = read_smi_count(self.cpus[0]) if self.cpus else None
        return Sample(steal_ticks(_read(PROC_STAT), self.cpus), nr, us, smi)

    def window(self, before: Sample, after: Sample) -> dict[str, Any]:
        def delta(a: int | None, b: int | None) -> int | None:
            return b - a if a is not None and b is not None and b >= a else None

        steal = delta(before.steal_ticks, after.steal_ticks)
        throttled_us = delta(before.throttled_us, after.throttled_us)
        smis = (
            (after.smi_count - before.smi_count) % SMI_WRAP
            if before.smi_count is not None and after.smi_count is not None
            else None
        )
        load = (_read(LOADAVG) or "").split()
        return {
            "steal_ms": round(steal * self.tick_ms, 1) if steal is not None else None,
            "nr_throttled": delta(before.nr_throttled, after.nr_throttled),
            "throttled_ms": round(throttled_us / 1000, 1) if throttled_us is not None else None,
            "load1": float(load[0]) if load and _is_number(load[0]) else None,
            "online_cpus": os.cpu_count(),
            "smis": smis,
            "hypervisor": self.hypervisor,
        }


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
