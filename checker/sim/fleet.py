"""Virtual hosts and the faults injected into them.

A VirtualHost keeps hardware state (DIMM counters, boot id, firmware) and turns
it into a report for a given instant; time comes from the caller, so tests can
run a day of a fleet in a second. Faults change that state at realistic rates.
"""

from __future__ import annotations

import datetime as dt
import random
import uuid
from dataclasses import dataclass, field
from typing import Literal

from checker.schemas import (
    CollectorRun,
    CollectorStatus,
    CpuIdentity,
    DimmInventory,
    EdacController,
    EdacDimm,
    EdacState,
    Firmware,
    HostIdentity,
    Identity,
    Observations,
    Report,
)

FaultKind = Literal["dimm_ce_storm", "dimm_ce_moderate", "dimm_ue"]
FAULT_KINDS: tuple[FaultKind, ...] = ("dimm_ce_storm", "dimm_ce_moderate", "dimm_ue")


@dataclass(frozen=True)
class HardwareClass:
    name: str
    cpu_vendor: str
    cpu_family: int
    cpu_model: int
    cpu_stepping: int
    microcode: int
    model_name: str
    sockets: int
    channels: int  # DIMMs per socket
    dimm_size_mb: int
    mem_type: str
    edac_driver: str
    bios_version: str
    bmc_firmware: str


HARDWARE_CLASSES = (
    HardwareClass(
        "compute-skx-2s",
        "GenuineIntel",
        6,
        85,
        4,
        0x2007006,
        "Intel(R) Xeon(R) Gold 6138 CPU @ 2.00GHz",
        2,
        6,
        32768,
        "DDR4",
        "skx_edac",
        "2.10.2",
        "4.40.40.40",
    ),
    HardwareClass(
        "compute-icx-2s",
        "GenuineIntel",
        6,
        106,
        6,
        0xD0003A5,
        "Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz",
        2,
        8,
        32768,
        "DDR4",
        "i10nm_edac",
        "1.9.2",
        "6.10.30.00",
    ),
    HardwareClass(
        "storage-epyc-1s",
        "AuthenticAMD",
        25,
        1,
        1,
        0xA0011D1,
        "AMD EPYC 7443P 24-Core Processor",
        1,
        8,
        65536,
        "DDR4",
        "amd64_edac",
        "2.8.4",
        "2.13",
    ),
    HardwareClass(
        "legacy-opteron-8356",
        "AuthenticAMD",
        16,
        2,
        2,
        0x1000065,
        "Quad-Core AMD Opteron(tm) Processor 8356",
        4,
        4,
        4096,
        "DDR2",
        "amd64_edac",
        "1.3.7",
        "1.60",
    ),
)

DATACENTERS = ("ams1", "sjc2", "fra3")


@dataclass
class Fault:
    kind: FaultKind
    dimm_index: int
    ce_per_s: float = 0.0
    started_at: dt.datetime | None = None


@dataclass
class SimDimm:
    mc: int
    name: str
    label: str
    locator: str
    bank: str
    serial: str
    part_number: str
    size_mb: int
    mem_type: str
    ce_count: float = 0.0
    ue_count: int = 0


@dataclass
class VirtualHost:
    hostname: str
    hardware: HardwareClass
    datacenter: str
    row: str
    rack: str
    slot: str
    cluster: str
    dimms: list[SimDimm]
    boot_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    machine_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    faults: list[Fault] = field(default_factory=list)
    last_at: dt.datetime | None = None
    down: bool = False

    def inject(self, fault: Fault) -> None:
        self.faults.append(fault)

    def advance(self, now: dt.datetime) -> None:
        """Move hardware state to `now`: faults add errors for the time elapsed."""
        if self.last_at is not None:
            elapsed = max(0.0, (now - self.last_at).total_seconds())
            for fault in self.faults:
                dimm = self.dimms[fault.dimm_index]
                if fault.kind in ("dimm_ce_storm", "dimm_ce_moderate"):
                    dimm.ce_count = min(dimm.ce_count + fault.ce_per_s * elapsed, 2**32 - 1)
                elif fault.kind == "dimm_ue" and dimm.ue_count == 0:
                    dimm.ue_count = 1
        self.last_at = now

    def reboot(self) -> None:
        """Counters reset and a new boot id, as after a real reboot."""
        self.boot_id = str(uuid.uuid4())
        for dimm in self.dimms:
            dimm.ce_count = 0
            dimm.ue_count = 0

    def report(self, now: dt.datetime, *, interval_s: int = 60) -> Report:
        self.advance(now)
        controllers: dict[int, EdacController] = {}
        for dimm in self.dimms:
            controller = controllers.setdefault(
                dimm.mc, EdacController(mc=dimm.mc, mc_name=f"{self.hardware.edac_driver} MC#{dimm.mc}")
            )
            controller.dimms.append(
                EdacDimm(
                    mc=dimm.mc,
                    name=dimm.name,
                    layout="dimm",
                    label=dimm.label,
                    location=f"channel {dimm.name.removeprefix('dimm')} slot 0",
                    ce_count=int(dimm.ce_count),
                    ue_count=dimm.ue_count,
                    size_mb=dimm.size_mb,
                    mem_type=dimm.mem_type,
                )
            )
            controller.ce_count += int(dimm.ce_count)
            controller.ue_count += dimm.ue_count
        hw = self.hardware
        identity = Identity(
            kernel="6.1.0-28-amd64",
            cmdline="BOOT_IMAGE=/vmlinuz-6.1.0-28-amd64 root=/dev/sda1 ro quiet",
            cpus=[
                CpuIdentity(
                    socket=s,
                    vendor=hw.cpu_vendor,
                    family=hw.cpu_family,
                    model=hw.cpu_model,
                    stepping=hw.cpu_stepping,
                    microcode=hw.microcode,
                    model_name=hw.model_name,
                )
                for s in range(hw.sockets)
            ],
            dimms=[
                DimmInventory(
                    locator=d.locator,
                    bank_locator=d.bank,
                    size_mb=d.size_mb,
                    mem_type=d.mem_type,
                    manufacturer="Samsung",
                    part_number=d.part_number,
                    serial=d.serial,
                )
                for d in self.dimms
            ],
            firmware=Firmware(bios_version=hw.bios_version, bmc_firmware=hw.bmc_firmware),
        )
        ok = CollectorRun(status=CollectorStatus.ok, duration_ms=1.0)
        return Report(
            host=HostIdentity(
                hostname=self.hostname, machine_id=self.machine_id, boot_id=self.boot_id, agent_version="sim"
            ),
            captured_at=now,
            interval_s=interval_s,
            collectors={"edac": ok, "identity": ok},
            observations=Observations(
                edac=EdacState(controllers=list(controllers.values()), poll_msec=1000), identity=identity
            ),
        )


def _make_host(index: int, rng: random.Random) -> VirtualHost:
    hw = HARDWARE_CLASSES[index % len(HARDWARE_CLASSES)]
    datacenter = DATACENTERS[index % len(DATACENTERS)]
    rack_no = index // 20
    dimms = []
    for socket in range(hw.sockets):
        for channel in range(hw.channels):
            letter = "ABCDEFGH"[channel]
            locator = f"CPU{socket}_DIMM_{letter}1"
            dimms.append(
                SimDimm(
                    mc=socket,
                    name=f"dimm{channel}",
                    label=f"{locator}",
                    locator=locator,
                    bank=f"NODE {socket} CHANNEL {channel} DIMM 0",
                    serial=f"{rng.getrandbits(32):08X}",
                    part_number="M393A4K40CB2-CVF" if hw.mem_type == "DDR4" else "M395T5160QZ4-CE66",
                    size_mb=hw.dimm_size_mb,
                    mem_type=hw.mem_type,
                )
            )
    return VirtualHost(
        hostname=f"{datacenter}-{hw.name.split('-')[0]}-{index:05d}",
        hardware=hw,
        datacenter=datacenter,
        row=f"r{rack_no // 10 + 1:02d}",
        rack=f"{datacenter}-rack{rack_no:03d}",
        slot=f"U{(index % 20) * 2 + 1}",
        cluster=f"{datacenter}-{hw.name}",
        dimms=dimms,
    )


class SimulatedFleet:
    """N virtual hosts; `fault_fraction` of them get a random fault at start."""

    def __init__(self, size: int, *, seed: int = 1, fault_fraction: float = 0.1) -> None:
        self.rng = random.Random(seed)
        self.hosts = [_make_host(i, self.rng) for i in range(size)]
        faulty = self.rng.sample(range(size), k=max(1 if size else 0, round(size * fault_fraction)))
        for index in faulty:
            host = self.hosts[index]
            kind = FAULT_KINDS[self.rng.randrange(len(FAULT_KINDS))]
            host.inject(self.fault(kind, self.rng.randrange(len(host.dimms))))

    def fault(self, kind: FaultKind, dimm_index: int) -> Fault:
        if kind == "dimm_ce_storm":
            return Fault(kind, dimm_index, ce_per_s=self.rng.uniform(20, 80))
        if kind == "dimm_ce_moderate":
            return Fault(kind, dimm_index, ce_per_s=self.rng.uniform(0.05, 2))
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
