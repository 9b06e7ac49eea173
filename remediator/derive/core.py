"""The entry point: derive(report, memory, host) -> signals and the new memory.

"Now" is the report's captured_at, never the clock, so replaying reports gives the same
signals. A report no newer than the last one derived (a duplicate delivery, or one that
arrived out of order) yields nothing here and leaves memory as it was: the rows only it
carries are counted by remediator.derive.late, from the gaps that on-time reports leave
(remediator.derive.gaps). A report section that is absent (its collector did not run) leaves
that section's memory alone.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from checker.schemas import Report, utc
from remediator.baselines import FirmwareBaselines
from remediator.derive.aer import aer_signals, counts_aer
from remediator.derive.configuration import edac_poll_signals, errata_signals, firmware_signals
from remediator.derive.cputime import cputime_signals
from remediator.derive.disks import disk_signals
from remediator.derive.gaps import note_gaps
from remediator.derive.interrupts import irq_signals
from remediator.derive.kernel import kernel_signals
from remediator.derive.mce import mce_signals
from remediator.derive.memory import HostMemory, KernelMemory, RasMemory, load_memory
from remediator.derive.performance import benchmark_signals
from remediator.derive.rasdaemon import ras_signals
from remediator.derive.sel import sel_signals
from remediator.derive.sensors import sensor_signals
from remediator.derive.stalls import stall_signals
from remediator.derive.tiers import tier_signals
from remediator.errata import ERRATA, Erratum
from remediator.signals import SignalValue


@dataclass(frozen=True)
class HostFacts:
    """What the service knows about a host beyond its report (from the inventory)."""

    hostname: str
    hardware_class: str = "unknown"
    datacenter: str = "unknown"
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Derived:
    signals: list[SignalValue]
    memory: dict[str, Any]
    changed: bool  # False: the service can skip writing memory back


def derive(
    report: Report,
    memory: dict[str, Any],
    host: HostFacts,
    *,
    baselines: FirmwareBaselines,
    errata: Sequence[Erratum] = ERRATA,
) -> Derived:
    previous = load_memory(memory)
    now = utc(report.captured_at)
    if previous.at is not None and now <= previous.at:
        return Derived([], copy.deepcopy(memory), False)
    obs = report.observations
    boot_id = report.host.boot_id
    signals: list[SignalValue] = []

    found, klog = kernel_signals(obs.kernel_log, previous.klog, now=now, boot_id=boot_id, aer_elsewhere=counts_aer(obs))
    signals += found
    found, sel = sel_signals(obs.sel, previous.sel, now=now)
    signals += found
    found, disks = disk_signals(obs.disks, previous.disks)
    signals += found
    found, irq = irq_signals(
        obs.interrupts, obs.identity, previous.irq, now=now, boot_id=boot_id, workload=obs.isolated_workload
    )
    signals += found
    found, ras = ras_signals(obs.rasdaemon, previous.ras, now=now)
    signals += found
    found, aer, devices = aer_signals(
        obs, previous.ras.aer if previous.ras else None, klog.devices if klog else {}, now=now
    )
    signals += found
    if found:
        klog = (klog or KernelMemory()).model_copy(update={"devices": devices})
    if aer is not None:
        ras = (ras or RasMemory(at=now)).model_copy(update={"aer": aer})
    mce_run = report.collectors.get("mce")
    found, mce = mce_signals(obs, mce_run.source if mce_run else None, previous.mce, now=now)
    signals += found
    signals += edac_poll_signals(obs.edac)
    signals += errata_signals(obs.identity, errata, baselines.for_class(host.hardware_class))
    signals += firmware_signals(obs.identity, host.hardware_class, baselines)
    kernel = obs.identity.kernel if obs.identity is not None else None
    signals += tier_signals(obs.memory_tiers, kernel, baselines.for_class(host.hardware_class), host.hardware_class)
    signals += sensor_signals(obs.sensors)
    signals += cputime_signals(obs.cputime, obs.identity)
    signals += benchmark_signals(obs.benchmark)
    signals += stall_signals(obs.stalls)

    new_memory = HostMemory(at=now, boot=boot_id, klog=klog, sel=sel, disks=disks, irq=irq, ras=ras, mce=mce)
    new = new_memory.model_copy(update={"gaps": note_gaps(report, previous, new_memory)}).dump()
    return Derived(signals, new, new != memory)
