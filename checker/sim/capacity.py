"""Lost capacity in the simulated fleet (the `capacity_lost` fault) and every host's capacity section.

Variants, chosen from the fault's dimm_index (no draw from the fleet's generator, so the other faults'
streams stay): `dimm_disabled` — firmware disabled a DIMM: it leaves dmidecode and EDAC, MemTotal drops by
its size, and the BMC logs "Memory Device Disabled" (ipmitool's text for IPMI sensor type 0Ch offset 04h)
naming it; `cpu_disabled` — a core failed its self-test and firmware left it out: two logical CPUs fewer in
cpu/present and /proc/cpuinfo, nothing in the SEL (as many BIOSes do); `disk_missing` — a drive dropped off
its controller: gone from /sys/block and from smartctl's scan (a host with one disk loses a DIMM instead).
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from checker.sections.capacity import BlockDevice, Capacity

if TYPE_CHECKING:
    from checker.sim.faults import Fault
    from checker.sim.host import SimDimm, SimDisk, VirtualHost

KIND = "capacity_lost"
VARIANTS = ("dimm_disabled", "cpu_disabled", "disk_missing")
RESERVED = 0.015  # MemTotal below installed memory: the struct page array (1.56 %), firmware's ranges
THREADS_PER_CORE = 2


def variant_of(dimm_index: int) -> str:
    return VARIANTS[dimm_index % len(VARIANTS)]


def fault_of(host: VirtualHost) -> Fault | None:
    return next((f for f in host.faults if f.kind == KIND), None)


def lost(host: VirtualHost) -> str | None:
    """The variant the host suffers, with a one-disk host's disk_missing turned into a lost DIMM."""
    fault = fault_of(host)
    if fault is None:
        return None
    if fault.variant == "disk_missing" and len(host.disks) < 2:
        return "dimm_disabled"
    return fault.variant or "dimm_disabled"


def present_dimms(host: VirtualHost) -> list[SimDimm]:
    fault = fault_of(host)
    if lost(host) != "dimm_disabled" or fault is None:
        return list(host.dimms)
    return [d for i, d in enumerate(host.dimms) if i != fault.dimm_index % len(host.dimms)]


def present_disks(host: VirtualHost) -> list[int]:
    """Indexes of the host's disks the OS sees (the last one is the one that drops off)."""
    count = len(host.disks)
    return list(range(count - 1 if lost(host) == "disk_missing" else count))


def cpus_present(host: VirtualHost) -> int:
    cpus = host.hardware.logical_cpus
    return cpus - THREADS_PER_CORE if lost(host) == "cpu_disabled" else cpus


def log(host: VirtualHost, fault: Fault, at: dt.datetime) -> None:
    """What the BMC logs when the fault is first seen."""
    if lost(host) != "dimm_disabled":
        return
    dimm = host.dimms[fault.dimm_index % len(host.dimms)]
    name = dimm.locator if "DIMM" in dimm.locator.upper() else f"DIMM {dimm.locator}"
    host.sel(at, "Memory #0x53", "Memory Device Disabled", extra=name)


def _block_name(disk: SimDisk, index: int) -> str:
    device = disk.spec.device.removeprefix("/dev/")
    return f"{device}n1" if disk.spec.protocol == "NVMe" else device or f"sd{chr(97 + index)}"


def capacity(host: VirtualHost) -> Capacity:
    hw = host.hardware
    present = cpus_present(host)
    dram_mb = sum(d.size_mb for d in present_dimms(host))
    total_kb = int((dram_mb + hw.cxl_nodes * hw.cxl_node_mb) * 1024 * (1 - RESERVED))
    offline = sorted(c for c in host.offline_cpus if c < present)
    return Capacity(
        mem_total_kb=total_kb,
        cpus_present=present,
        cpus_online=present - len(offline),
        cpus_offline=offline,
        sockets=hw.sockets,
        cores=present // THREADS_PER_CORE,
        disks=[
            BlockDevice(
                name=_block_name(host.disks[i], i),
                model=host.disks[i].spec.model[:128],
                serial=host.disks[i].serial,
                rotational=host.disks[i].spec.rotational,
            )
            for i in present_disks(host)
        ],
        nics=list(hw.nic_interfaces),
    )
