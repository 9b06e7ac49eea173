"""Small builders of report sections for the derivation tests, and runners that feed reports in order
(derive() alone; derive() with the counter rates over a simulated host's reports)."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from checker.schemas import (
    CpuIdentity,
    DiskHealth,
    EdacState,
    Firmware,
    HostIdentity,
    Identity,
    InterruptRow,
    Interrupts,
    KernelEvent,
    KernelEventKind,
    KernelLogState,
    MemoryTiers,
    NicFirmware,
    NumaNode,
    Observations,
    RasdaemonState,
    RasMemoryEvent,
    Report,
    SelEntry,
    SelState,
)
from checker.sim import SimulatedFleet, VirtualHost
from checker.sim.events import valid_for
from remediator.baselines import FirmwareBaselines, load_baselines
from remediator.derive import Derived, HostFacts, derive
from remediator.derive.reporting import reporting_signals
from remediator.signals import PreviousCounter, SignalValue, counters_of, rate_signals
from tests.builders.reports import T0

HOST = HostFacts("web-001", "compute-skx-2s", "ams1", {"role": "web"})
BASELINES = load_baselines()


def at(minutes: float) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minutes)


def report(when: dt.datetime = T0, *, boot: str | None = "boot-1", **sections: Any) -> Report:
    return Report(
        host=HostIdentity(hostname=HOST.hostname, boot_id=boot),
        captured_at=when,
        observations=Observations(**sections),
    )


def event(
    kind: KernelEventKind | str,
    seq: int | None = None,
    when: dt.datetime | None = None,
    subject: str | None = None,
    lines: list[str] | None = None,
) -> KernelEvent:
    kind = KernelEventKind(kind)
    return KernelEvent(kind=kind, seq=seq, timestamp=when, subject=subject, lines=lines or [f"{kind.value} line"])


def kernel_log(*events: KernelEvent, boot: str | None = "boot-1", last_seq: int | None = None) -> KernelLogState:
    return KernelLogState(source="kmsg", boot_id=boot, events=list(events), last_seq=last_seq)


def sel_entry(
    record_id: int,
    sensor_type: str,
    event_text: str,
    *,
    name: str = "",
    direction: str | None = "asserted",
    component: str | None = None,
    when: dt.datetime | None = T0,
) -> SelEntry:
    return SelEntry(
        record_id=record_id,
        timestamp=when,
        sensor_type=sensor_type,
        sensor_name=name,
        event=event_text,
        direction=direction,
        component=component,
        raw=f"{record_id:x} | {sensor_type} {name} | {event_text}",
    )


def sel_state(*entries: SelEntry, count: int | None = None, percent: float | None = None, **extra: Any) -> SelState:
    return SelState(entries=list(entries), entry_count=count, percent_used=percent, **extra)


def disk(device: str = "/dev/sda", serial: str | None = "ZL2A0001", protocol: str = "ATA", **fields: Any) -> DiskHealth:
    fields.setdefault("smart_passed", True)
    return DiskHealth(device=device, serial=serial, protocol=protocol, **fields)


def cpu(
    vendor: str = "GenuineIntel", family: int = 6, model: int = 85, stepping: int | None = 4, **more: Any
) -> CpuIdentity:
    return CpuIdentity(socket=0, vendor=vendor, family=family, model=model, stepping=stepping, **more)


OPTERON = {
    "vendor": "AuthenticAMD",
    "family": 16,
    "model": 2,
    "stepping": 2,
    "model_name": "Quad-Core AMD Opteron(tm) Processor 8356",
}


def identity(
    *,
    kernel: str | None = "6.1.0-28-amd64",
    cpus: list[CpuIdentity] | None = None,
    bios: str | None = None,
    bmc: str | None = None,
    nics: list[NicFirmware] | None = None,
    isolated: list[int] | None = None,
    nohz_full: list[int] | None = None,
) -> Identity:
    return Identity(
        kernel=kernel,
        cpus=cpus if cpus is not None else [cpu()],
        isolated_cpus=isolated or [],
        nohz_full_cpus=nohz_full or [],
        firmware=Firmware(bios_version=bios, bmc_firmware=bmc, nics=nics or []),
    )


def interrupts(cpus: int, rows: dict[str, list[int]], affinity: dict[str, list[int]] | None = None) -> Interrupts:
    return Interrupts(
        cpu_count=cpus,
        rows=[InterruptRow(name=name, per_cpu=counts) for name, counts in rows.items()],
        irq_affinity=affinity or {},
    )


def tiers(
    cpuless: int = 1,
    *,
    demotion: bool | None = True,
    weights: dict[str, int] | None = None,
    numa_balancing: int | None = 2,
) -> MemoryTiers:
    nodes = [NumaNode(node=0, cpus=[0, 1, 2, 3], memory_mb=65536)]
    nodes += [NumaNode(node=1 + i, cpus=[], memory_mb=131072) for i in range(cpuless)]
    return MemoryTiers(
        nodes=nodes, demotion_enabled=demotion, interleave_weights=weights or {}, numa_balancing=numa_balancing
    )


def edac(poll_msec: int | None) -> EdacState:
    return EdacState(poll_msec=poll_msec)


def ras_event(
    event_id: int, err_type: str = "Corrected", count: int = 1, label: str = "CPU_SrcID#0_MC#0_Chan#2_DIMM#0"
) -> RasMemoryEvent:
    return RasMemoryEvent(id=event_id, err_type=err_type, err_count=count, label=label, err_msg="memory read error")


def rasdaemon(*events: RasMemoryEvent, last_id: int | None = None) -> RasdaemonState:
    return RasdaemonState(memory_events=list(events), last_id=last_id)


class Deriver:
    """Feeds reports to derive() in order, carrying memory the way the service stores it (as JSON)."""

    def __init__(self, host: HostFacts = HOST, baselines: FirmwareBaselines = BASELINES) -> None:
        self.host = host
        self.baselines = baselines
        self.memory: dict[str, Any] = {}
        self.last: Derived | None = None

    def __call__(self, one: Report) -> list[SignalValue]:
        self.last = derive(one, self.memory, self.host, baselines=self.baselines)
        self.memory = json.loads(json.dumps(self.last.memory))
        return self.last.signals


def of(signals: list[SignalValue], kind: str) -> list[SignalValue]:
    return [s for s in signals if s.kind == kind]


def by_subject(signals: list[SignalValue], kind: str) -> dict[str, SignalValue]:
    return {s.subject: s for s in signals if s.kind == kind}


class Watch:
    """derive() plus the EDAC counter rates the service computes, over a host's consecutive reports."""

    def __init__(self, host: VirtualHost) -> None:
        self.derive = Deriver(HostFacts(host.hostname, host.hardware.name, host.datacenter))
        self.previous: dict[str, PreviousCounter] = {}
        self.hardware_class = host.hardware.name
        baseline = load_baselines().for_class(host.hardware.name)
        self.expected_mode = baseline.error_reporting if baseline is not None else None
        self.smi_memory: dict[str, Any] = {}

    def __call__(self, report: Report) -> list[SignalValue]:
        signals = self.derive(report)
        counters = counters_of(report)
        signals += rate_signals(counters, self.previous, now=report.captured_at, boot_id=report.host.boot_id)
        for counter in counters:
            self.previous[counter.key] = PreviousCounter(counter.value, report.captured_at, report.host.boot_id)
        found, self.smi_memory = reporting_signals(  # SMI rate and reporting mode, as report_signals adds them
            report,
            signals,
            self.smi_memory,
            expected=self.expected_mode,
            hardware_class=self.hardware_class,
            ppr_active=lambda: False,
        )
        return signals + found


def clean_fleet(size: int = 15, seed: int = 11) -> SimulatedFleet:
    fleet = SimulatedFleet(size, seed=seed, fault_fraction=0)
    assert not any(h.faults for h in fleet.hosts)
    return fleet


def host_for(fleet: SimulatedFleet, kind: str) -> VirtualHost:
    return next(h for h in fleet.hosts if valid_for(h, kind))
