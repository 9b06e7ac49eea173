"""What a host has, from the kernel's own files: MemTotal of /proc/meminfo, sockets and physical cores of
/proc/cpuinfo, and the whole-disk and physical-NIC names of /sys (LBNL NHC's check_hw_physmem,
check_hw_cpuinfo and check_hw_eth read the same files).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from checker.parsers.common import Parsed, guarded, int64, problem

_MEMTOTAL = re.compile(r"^MemTotal:\s*(\d{1,20})\s*kB\s*$", re.MULTILINE)

# /sys/block entries that are not disks: loop and RAM disks, device-mapper and md volumes (they sit on
# disks already counted), network block devices, compressed swap, optical drives and floppies.
_VIRTUAL_BLOCK = re.compile(r"^(?:loop|ram|zram|dm-|md|nbd|sr|fd|rbd|drbd)")


@guarded(lambda: None)
def parse_meminfo_total(text: str) -> Parsed[int | None]:
    """/proc/meminfo -> MemTotal in kB (the kernel always prints it in kB)."""
    m = _MEMTOTAL.search(text)
    if m is None:
        return Parsed(None, [problem("no 'MemTotal: N kB' line", text)])
    return Parsed(int64(int(m.group(1))), [])


@dataclass(frozen=True)
class CpuTopology:
    sockets: int
    cores: int  # distinct (physical id, core id): physical cores with at least one online thread
    threads: int  # processor blocks: online logical CPUs


@guarded(lambda: None)
def parse_cpu_topology(text: str) -> Parsed[CpuTopology | None]:
    """/proc/cpuinfo -> sockets and physical cores. cpuinfo lists online CPUs only, so a core whose
    threads are all offline is not counted; a block without 'physical id' / 'core id' (VMs, arm64) counts
    as its own core on socket 0."""
    sockets: set[str] = set()
    cores: set[tuple[str, str]] = set()
    threads = 0
    current: dict[str, str] = {}

    def close() -> None:
        nonlocal threads
        if "processor" not in current:
            return
        threads += 1
        socket = current.get("physical id", "0")
        sockets.add(socket)
        cores.add((socket, current.get("core id", f"cpu{current['processor']}")))

    for line in text.splitlines():
        key, sep, value = line.partition(":")
        key = " ".join(key.split()).lower()
        if not sep:
            continue
        if key == "processor":
            close()
            current = {}
        current.setdefault(key, value.strip())
    close()
    if threads == 0:
        return Parsed(None, [problem("no 'processor' lines", text)])
    return Parsed(CpuTopology(len(sockets), len(cores), threads), [])


def is_disk(name: str) -> bool:
    """A /sys/block name that can be a physical disk (the caller also checks it has a device link)."""
    return bool(name) and _VIRTUAL_BLOCK.match(name) is None
