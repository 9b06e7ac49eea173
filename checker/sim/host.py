"""A virtual host: hardware and software state that moves only when a report is asked for.

`advance(now)` applies what the host's faults do over the time elapsed (errors counted,
sectors remapped, lockups and panics logged, SEL entries written); `report(now)` renders
the state as a version-1 report; `apply(action, params)` changes it the way a remediation
would. Randomness comes from the host's own seeded generator, so a fleet replays exactly.
"""

from __future__ import annotations

import datetime as dt
import random
import uuid
from dataclasses import dataclass, field
from typing import Any

from checker.schemas import MceRecord, Report
from checker.sim import actions, events, heat, logs, render, smi
from checker.sim.faults import Fault
from checker.sim.gpu import SimGpu
from checker.sim.hardware import EDAC_POLL_DEFAULT_MSEC, SEL_CAPACITY, DiskSpec, HardwareClass, default_weights
from checker.sim.pages import RasdaemonSim
from checker.sim.redfish import RedfishSim

BOOT_RECORDS = 1500  # kmsg records a boot writes before the agent's first read


def host_uuid(rng: random.Random) -> str:
    """A random UUID from the host's own generator, so a seeded fleet replays its boot ids too."""
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


@dataclass
class SimDimm:
    mc: int  # the EDAC memory controller (mcN in sysfs)
    name: str  # its sysfs entry: dimm2, csrow0/ch1
    label: str  # the EDAC label the driver gives it (CPU_SrcID#1_MC#0_Chan#2_DIMM#0, mc#0csrow#0channel#3)
    locator: str  # SMBIOS type 17 Locator: the slot's silkscreen name (B3, P1-DIMMD1)
    bank: str  # SMBIOS type 17 Bank Locator
    serial: str
    part_number: str
    size_mb: int
    mem_type: str
    socket: int = 0
    imc: int = 0  # the memory controller within its socket (Intel iMC)
    channel: int = 0  # the memory controller's channel
    row: int = 0  # the chip-select row (csrow layouts)
    layout: str = "dimm"  # dimm: dimmN entries (skx, i10nm); csrow: csrowN/chM (amd64)
    location: str = ""  # EDAC dimm_location ('channel 2 slot 0', 'csrow 0 channel 1')
    ce_count: float = 0.0
    ue_count: int = 0


@dataclass
class SimDisk:
    spec: DiskSpec
    serial: str
    power_on_hours: int
    temperature_c: float
    reallocated: int = 0
    pending: int = 0
    grown_defects: int = 0
    media_errors: int = 0
    percentage_used: int = 1
    available_spare: int = 100
    critical_warning: int = 0
    smart_passed: bool = True
    exit_status: int = 0
    firmware: str | None = None  # after a reflash; None: the model's shipped firmware


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
    disks: list[SimDisk] = field(default_factory=list)
    isolated: list[int] = field(default_factory=list)  # isolcpus / nohz_full cores (the latency cluster)
    boot_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    machine_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    faults: list[Fault] = field(default_factory=list)
    last_at: dt.datetime | None = None
    first_at: dt.datetime | None = None  # the first report's instant (power-on hours count from it)
    down: bool = False  # hung (or restarting): no reports, no ping answers, the BMC still says on
    powered_off: bool = False  # the chassis is off: no reports, no ping answers, the BMC says off
    agent_dead: bool = False  # the host runs and answers pings; only its agent is gone
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    kernel: str = ""
    bios_version: str = ""
    bmc_firmware: str = ""
    bios_pending: str | None = None  # a BIOS the BMC staged (update_bmc_firmware): it runs from the next cold boot
    nic_firmware: dict[str, str] = field(default_factory=dict)  # interface -> firmware reflashed away from the class's
    edac_poll_msec: int = EDAC_POLL_DEFAULT_MSEC
    demotion_enabled: bool = True
    interleave_weights: dict[str, int] = field(default_factory=dict)
    numa_balancing: int | None = None  # None: the class's setting (2 with CXL nodes, 1 on other NUMA hosts)
    benchmark_at: dt.datetime | None = None  # the last simulated benchmark run (one a simulated day)
    uptime_s: float = 86400.0  # at the first report
    boot_at: dt.datetime | None = None
    kmsg_seq: int = BOOT_RECORDS
    kmsg_pending: list[str] = field(default_factory=list)
    pstore: list[tuple[dt.datetime, list[str]]] = field(default_factory=list)  # (boot time, records) of a crash
    sel_pending: list[str] = field(default_factory=list)
    mce_pending: list[MceRecord] = field(default_factory=list)  # machine checks logged since the last report
    sel_next_id: int = 1
    sel_count: int = 0
    irq_extra: dict[tuple[str, int], float] = field(default_factory=dict)  # (row, cpu) -> counts from faults
    irq_widened: set[str] = field(default_factory=set)  # IRQs whose affinity a fault spread to every CPU
    reported_boot_id: str | None = None
    drained: bool = False  # out of the workload scheduler (no change on the host itself)
    offline_cpus: set[int] = field(default_factory=set)  # CPUs taken offline by the offline_cpu action
    rack_heat: Fault | None = None  # a rack_hot fault of this host or of its rack (checker/sim/heat.py)
    thresholds_asserted: dict[str, tuple[str, ...]] = field(default_factory=dict)  # sensor -> its SEL's (heat.py)
    gpus: list[SimGpu] = field(default_factory=list)  # NVIDIA GPUs of a GPU class (checker/sim/gpu.py)
    ras: RasdaemonSim = field(default_factory=RasdaemonSim)  # rasdaemon's rows and offlined pages (sim/pages.py)
    fail_next_action: str | None = None  # "hang", "fail" or "stay_down": consumed by the next apply()
    smi_count: float = 0.0  # MSR_SMI_COUNT since the boot (Intel); reported modulo 2**32
    reporting_mode: str = "cmci"  # how corrected memory errors reach the OS: cmci or firmware_first
    stalls_pending: list[tuple[dt.datetime, float]] = field(default_factory=list)  # all-core stalls (at, ms) to report
    probe_smi_seen: int | None = None  # MSR_SMI_COUNT at the stall probe's previous report (checker/sim/stalls.py)
    redfish: RedfishSim = field(default_factory=RedfishSim)  # a Redfish class's BMC and collector (sim/redfish.py)

    def __post_init__(self) -> None:
        self.kernel = self.kernel or self.hardware.kernel
        self.bios_version = self.bios_version or self.hardware.bios_version
        self.bmc_firmware = self.bmc_firmware or self.hardware.bmc_firmware
        if self.hardware.weighted_interleave and not self.interleave_weights:
            self.interleave_weights = default_weights(self.hardware, tuned=True)

    # -- faults -------------------------------------------------------------------

    def inject(self, fault: Fault) -> None:
        """Add a fault; what it changes at once (a version, a setting) changes now, the rest as time passes."""
        events.start(self, fault)
        self.faults.append(fault)

    @property
    def reporting(self) -> bool:
        """Whether its agent sends reports now."""
        return not (self.down or self.powered_off or self.agent_dead)

    def has(self, kind: str) -> bool:
        return any(f.kind == kind for f in self.faults)

    def clear(self, kinds: set[str] | frozenset[str]) -> list[str]:
        cleared: list[str] = [f.kind for f in self.faults if f.kind in kinds]
        for kind in cleared:
            events.stop(self, kind)
        self.faults = [f for f in self.faults if f.kind not in kinds]
        return cleared

    # -- time ---------------------------------------------------------------------

    def advance(self, now: dt.datetime) -> None:
        """Move state to `now`: faults add what they do over the time elapsed."""
        if self.first_at is None:
            self.first_at = now
            self.boot_at = self.boot_at or now - dt.timedelta(seconds=self.uptime_s)
            events.history(self, now)
        if self.last_at is not None and not (self.down or self.powered_off):
            elapsed = max(0.0, (now - self.last_at).total_seconds())
            for fault in list(self.faults):
                events.progress(self, fault, self.last_at, now, elapsed)
            smi.advance(self, elapsed)
        elif self.last_at is None:
            for fault in list(self.faults):
                events.progress(self, fault, now, now, 0.0)
        if self.rack_heat is not None or self.thresholds_asserted:  # the BMC watches its sensors, up or not
            heat.log_thresholds(self, self.last_at, now)
        self.last_at = now

    def reboot(self, at: dt.datetime | None = None) -> None:
        """Counters reset and a new boot id, as after a real reboot."""
        self.boot_id = host_uuid(self.rng)
        for dimm in self.dimms:
            dimm.ce_count = 0
            dimm.ue_count = 0
        self.irq_extra.clear()
        self.offline_cpus.clear()  # every CPU comes back online with the new boot
        self.ras.offlined.clear()  # and every soft-offlined page comes back into use
        self.smi_count = 0.0  # MSR_SMI_COUNT starts again at reset
        self.kmsg_pending.clear()
        self.kmsg_seq = BOOT_RECORDS + self.rng.randrange(200)
        when = at or self.last_at
        if when is not None:
            self.boot_at = when
            events.boot_entries(self, when)

    # -- output -------------------------------------------------------------------

    def log(self, at: dt.datetime, records: list[tuple[int, str]]) -> None:
        """Kernel messages written at `at` (this boot)."""
        base = self.boot_at or at
        usec = max(0, int((at - base).total_seconds() * 1_000_000))
        for i, (level, message) in enumerate(records):
            self.kmsg_pending.append(logs.kmsg(level, self.kmsg_seq, usec + i * 40, message))
            self.kmsg_seq += 1

    def sel(self, at: dt.datetime, sensor: str, event: str, direction: str = "Asserted", extra: str = "") -> None:
        """An entry the BMC logs; a full SEL logs nothing more."""
        if self.sel_count >= SEL_CAPACITY:
            return
        self.sel_pending.append(logs.sel_line(self.sel_next_id, at, sensor, event, direction, extra))
        self.sel_next_id += 1
        self.sel_count += 1

    def report(self, now: dt.datetime, *, interval_s: int = 60) -> Report:
        self.advance(now)
        return render.render_report(self, now, interval_s)

    def apply(self, action: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """Apply a remediation action as the real one would change the host; returns what changed."""
        return actions.apply_action(self, action, dict(params or {}))
