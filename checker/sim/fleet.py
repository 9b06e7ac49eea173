"""The simulated fleet: hosts spread over datacenters and racks, a seeded fraction of them faulty.

A VirtualHost keeps hardware state (DIMM counters, disks, SEL, kernel log, boot id, firmware)
and turns it into a report for a given instant; time comes from the caller, so tests can run
a day of a fleet in a second. Faults change that state at realistic rates (checker/sim/faults.py).
"""

from __future__ import annotations

import datetime as dt
import random

from checker.schemas import Report
from checker.sim.events import valid_for
from checker.sim.faults import FAULT_KINDS, FAULT_RATES, Fault, FaultKind
from checker.sim.hardware import DATACENTERS, HARDWARE_CLASSES, DiskSpec, HardwareClass
from checker.sim.host import SimDimm, SimDisk, VirtualHost, host_uuid

__all__ = ["FAULT_KINDS", "HARDWARE_CLASSES", "Fault", "SimulatedFleet", "VirtualHost"]

LATENCY_CLASS = "compute-icx-2s"  # every third host of this class serves the latency-critical tier
HOUSEKEEPING_PER_SOCKET = 4  # cores per socket left for the kernel, IRQs and the agent


def _dimms(hw: HardwareClass, rng: random.Random) -> list[SimDimm]:
    dimms = []
    for socket in range(hw.sockets):
        for channel in range(hw.channels):
            locator = f"CPU{socket}_DIMM_{'ABCDEFGH'[channel]}1"
            dimms.append(
                SimDimm(
                    mc=socket,
                    name=f"dimm{channel}",
                    label=locator,
                    locator=locator,
                    bank=f"NODE {socket} CHANNEL {channel} DIMM 0",
                    serial=f"{rng.getrandbits(32):08X}",
                    part_number={"DDR4": "M393A4K40CB2-CVF", "DDR5": "M321R8GA0BB0-CQKZJ"}.get(
                        hw.mem_type, "M395T5160QZ4-CE66"
                    ),
                    size_mb=hw.dimm_size_mb,
                    mem_type=hw.mem_type,
                )
            )
    return dimms


def _disk(spec: DiskSpec, rng: random.Random, legacy: bool) -> SimDisk:
    prefix = {"NVMe": "S4", "ATA": "ZL2", "SCSI": "Z40"}[spec.protocol]
    disk = SimDisk(
        spec=spec,
        serial=f"{prefix}{rng.getrandbits(32):08X}",
        power_on_hours=rng.randrange(40000, 80000) if legacy else rng.randrange(2000, 40000),
        temperature_c=float(rng.randrange(28, 45)),
        percentage_used=rng.randrange(1, 9) if spec.protocol == "NVMe" else 1,
    )
    # Plenty of healthy drives carry a few remapped sectors for years: only growth is a fault.
    if spec.rotational and rng.random() < 0.1:
        if spec.protocol == "SCSI":
            disk.grown_defects = rng.randrange(1, 12)
        else:
            disk.reallocated = rng.randrange(1, 40)
    return disk


def _make_host(index: int, rng: random.Random) -> VirtualHost:
    hw = HARDWARE_CLASSES[index % len(HARDWARE_CLASSES)]
    datacenter = DATACENTERS[index % len(DATACENTERS)]
    rack_no = index // 20
    dimms = _dimms(hw, rng)
    host_rng = random.Random(rng.getrandbits(32))
    latency = hw.name == LATENCY_CLASS and (index // len(HARDWARE_CLASSES)) % 3 == 0
    per_socket = hw.logical_cpus // hw.sockets
    isolated = [c for c in range(hw.logical_cpus) if c % per_socket >= HOUSEKEEPING_PER_SOCKET] if latency else []
    return VirtualHost(
        hostname=f"{datacenter}-{hw.name.split('-')[0]}-{index:05d}",
        hardware=hw,
        datacenter=datacenter,
        row=f"r{rack_no // 10 + 1:02d}",
        rack=f"{datacenter}-rack{rack_no:03d}",
        slot=f"U{(index % 20) * 2 + 1}",
        cluster=f"{datacenter}-latency" if latency else f"{datacenter}-{hw.name}",
        dimms=dimms,
        disks=[_disk(spec, host_rng, hw.name.startswith("legacy")) for spec in hw.disks],
        isolated=isolated,
        rng=host_rng,
        boot_id=host_uuid(host_rng),
        machine_id=host_uuid(host_rng).replace("-", ""),
        uptime_s=host_rng.uniform(1, 20) * 86400,
    )


class SimulatedFleet:
    """N virtual hosts; `fault_fraction` of them, drawn at random, get one fault each.

    Kinds are shared out in proportion to FAULT_RATES (each faulty host gets, among the kinds its
    hardware can have, the one furthest below its share so far), so even a small fleet shows the
    common faults and a large one shows them in realistic proportions.
    """

    def __init__(self, size: int, *, seed: int = 1, fault_fraction: float = 0.1) -> None:
        self.rng = random.Random(seed)
        self.hosts = [_make_host(i, self.rng) for i in range(size)]
        # Any fraction above zero means at least one faulty host (the demo always shows one); zero means none.
        count = max(1, round(size * fault_fraction)) if size and fault_fraction > 0 else 0
        faulty = self.rng.sample(range(size), k=count)
        given: dict[FaultKind, int] = dict.fromkeys(FAULT_KINDS, 0)
        for index in faulty:
            host = self.hosts[index]
            kinds = [kind for kind in FAULT_KINDS if valid_for(host, kind)]
            kind = min(kinds, key=lambda k: ((given[k] + 1) / FAULT_RATES[k], self.rng.random()))
            given[kind] += 1
            host.inject(self.fault(kind, self.rng.randrange(len(host.dimms))))

    def fault(self, kind: FaultKind, dimm_index: int = 0) -> Fault:
        """A fault of `kind` with rates drawn from the fleet's generator (DIMM faults on `dimm_index`)."""
        rng = self.rng
        if kind == "dimm_ce_storm":
            return Fault(kind, dimm_index, ce_per_s=rng.uniform(20, 80))
        if kind == "dimm_ce_moderate":
            return Fault(kind, dimm_index, ce_per_s=rng.uniform(0.05, 2))
        if kind == "cmci_storm":
            return Fault(kind, dimm_index, ce_per_s=rng.uniform(1, 5), per_hour=rng.uniform(12, 20))
        if kind == "soft_lockups":
            return Fault(kind, dimm_index, per_hour=rng.uniform(3, 6))
        if kind == "panic":
            return Fault(kind, dimm_index, per_hour=rng.uniform(0.2, 0.5))
        if kind == "smart_realloc_growing":
            return Fault(kind, dimm_index, per_hour=rng.uniform(20, 60))
        if kind == "nvme_critical_warning":
            return Fault(kind, dimm_index, variant=rng.choice(("spare", "reliability")), per_hour=rng.uniform(5, 20))
        if kind == "psu_failure":
            return Fault(kind, dimm_index, variant=rng.choice(("PS1", "PS2")))
        if kind == "fan_failure":
            return Fault(kind, dimm_index, variant=f"System Fan {rng.randrange(1, 7)}")
        if kind == "sel_full":
            return Fault(kind, dimm_index, per_hour=rng.uniform(60, 120))
        return Fault(kind, dimm_index)

    def by_name(self, hostname: str) -> VirtualHost:
        for host in self.hosts:
            if host.hostname == hostname:
                return host
        raise KeyError(hostname)

    def reports(self, now: dt.datetime, *, interval_s: int = 60) -> list[Report]:
        return [h.report(now, interval_s=interval_s) for h in self.hosts if not h.down]

    def inventory(self) -> list[dict[str, str]]:
        """Rows in the `fleetfix hosts import` CSV shape."""
        return [
            {
                "hostname": h.hostname,
                "hardware_class": h.hardware.name,
                "datacenter": h.datacenter,
                "row": h.row,
                "rack": h.rack,
                "slot": h.slot,
                "cluster": h.cluster,
            }
            for h in self.hosts
        ]
