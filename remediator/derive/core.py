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
from remediator.derive.capacity import capacity_signals
from remediator.derive.capacity_sel import fold_sel
from remediator.derive.configuration import edac_poll_signals, errata_signals, firmware_signals
from remediator.derive.cputime import cputime_signals
from remediator.derive.cxl import cxl_signals
from remediator.derive.cxl_kernel import cxl_kernel_signals, fold_memdev_aer
from remediator.derive.disks import disk_signals
from remediator.derive.edac_counted import sample
from remediator.derive.gaps import note_gaps
from remediator.derive.gpu import gpu_signals
from remediator.derive.heat import name_psus, throttle_signals
from remediator.derive.interrupts import irq_signals
from remediator.derive.kernel import kernel_signals
from remediator.derive.mce import mce_signals
from remediator.derive.memory import HostMemory, KernelMemory, RasMemory, load_memory
from remediator.derive.network import network_signals
from remediator.derive.network_ports import flapping_ports, note_link_redundancy
from remediator.derive.os_faults import filesystem_signals, note_guest_and_capacity, oom_signals, time_signals
from remediator.derive.pages import page_signals
from remediator.derive.pcie import adopted_buckets, counted_bdfs, link_keys, pcie_signals, virtual_machine
from remediator.derive.performance import benchmark_signals
from remediator.derive.rasdaemon import ras_signals
from remediator.derive.redfish import (
    edac_collector_failed,
    firmware_for_baseline,
    name_dimms,
    note_edac_silence,
    redfish_signals,
)
from remediator.derive.sel import POWER_EXPLAINS_S, sel_signals
from remediator.derive.sel_interrupts import with_link_partners
from remediator.derive.sensors import sensor_signals
from remediator.derive.stalls import stall_signals
from remediator.derive.tiers import tier_signals
from remediator.derive.xid import xid_signals
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


def _uncorrected_aer(signal: SignalValue) -> bool:
    return signal.kind == "device_event_count" and signal.detail.get("kind") == "pcie_aer_uncorrected"


def _aer_functions(signal: SignalValue) -> list[str]:
    return [signal.subject, *signal.detail.get("reported_by", [])]


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

    # AER is counted per function and keyed on its link: a function's corrected errors from its sysfs
    # counters once they have a baseline, else rasdaemon's aer_event rows where the agent reads them, else
    # the kernel log; uncorrected errors from every source (derive/pcie.py, aer.py, kernel.py).
    counted = counted_bdfs(obs, previous.pcie)
    links = link_keys(obs.pcie)
    found, klog = kernel_signals(
        obs.kernel_log,
        previous.klog,
        now=now,
        boot_id=boot_id,
        aer_elsewhere=counts_aer(obs),
        aer_counted=counted,
        aer_links=links,
    )
    signals += found
    signals += filesystem_signals(found, obs.filesystems) + time_signals(obs.time_sync, now) + oom_signals(found)
    found, xid = xid_signals(obs.kernel_log, previous.klog, previous.xid, now=now, boot_id=boot_id, gpus=obs.gpu)
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
        obs,
        previous.ras.aer if previous.ras else None,
        klog.devices if klog else {},
        now=now,
        counted=counted,
        links=links,
    )
    signals += found
    if found:
        klog = (klog or KernelMemory()).model_copy(update={"devices": devices})
    if aer is not None:
        ras = (ras or RasMemory(at=now)).model_copy(update={"aer": aer})
    adopt, kept_devices = adopted_buckets(klog.devices if klog else {}, counted, links)
    if adopt and klog is not None:
        klog = klog.model_copy(update={"devices": kept_devices})
    found, pcie = pcie_signals(obs, previous.pcie, now=now, boot=boot_id, adopt=adopt)
    signals += found
    # the uncorrected AERs of the kernel log, rasdaemon and the sysfs counters (derive/kernel.py, aer.py, pcie.py,
    # so the SEL comes after them: third review, finding 4): the device's own ticket, not the SEL's; each
    # explains only entries near it naming its device or the other end of its link (derive/sel_interrupts.py)
    uncorrected = [d for t in signals if _uncorrected_aer(t) for d in _aer_functions(t)]  # klog, rasdaemon, sysfs
    aer_devices = [
        with_link_partners([*s.detail.get("subjects", []), *uncorrected], obs.pcie)
        for s in signals
        if s.kind == "kernel_event_count" and s.subject == "pcie_aer_uncorrected"
    ] or ([with_link_partners(uncorrected, obs.pcie)] if uncorrected else [])
    # one per report: the functions its new AER lines or counts name with their link partners (none: unknown)
    found, sel = sel_signals(obs.sel, previous.sel, now=now, aer_devices=aer_devices)
    edac_now = sample(obs.edac, now=now, boot=boot_id, previous=previous.edac)  # with when its counts last rose
    rises = edac_now  # none without this report's EDAC section: a kept sample's rises are stale (fourth review, 7)
    note_edac_silence(found, obs.edac, previous.edac, boot=boot_id, rises=rises)  # EDAC over the entries' interval
    signals += name_dimms(name_psus(found, obs.sensors), obs.redfish, previous.redfish)
    power_at = sel.power_at if sel is not None else None
    found, redfish = redfish_signals(  # the BMC's own DIMM counts, PSUs and firmware (derive/redfish.py)
        obs.redfish,
        obs.edac,
        previous.redfish,
        signals,
        now=now,
        boot=boot_id,
        power_explained=power_at is not None and (now - power_at).total_seconds() <= POWER_EXPLAINS_S,
        edac_failed=obs.edac is None and edac_collector_failed(report),
        sensors=obs.sensors,
        edac_rises=rises,
    )
    signals += found
    mce_run = report.collectors.get("mce")
    found, mce = mce_signals(obs, mce_run.source if mce_run else None, previous.mce, now=now)
    signals += found
    found, pages = page_signals(obs, previous.pages, now=now)
    signals += found
    signals += edac_poll_signals(obs.edac)
    signals += errata_signals(obs.identity, errata, baselines.for_class(host.hardware_class))
    served, redfish = firmware_for_baseline(obs.identity, redfish, now=now)  # the host's usual source stays
    signals += firmware_signals(obs.identity, host.hardware_class, baselines, served=served)
    kernel = obs.identity.kernel if obs.identity is not None else None
    signals += tier_signals(obs.memory_tiers, kernel, baselines.for_class(host.hardware_class), host.hardware_class)
    signals += sensor_signals(obs.sensors)
    signals += cputime_signals(obs.cputime, obs.identity)
    signals += benchmark_signals(obs.benchmark)
    signals += stall_signals(obs.stalls)
    found, cxl = cxl_signals(obs.cxl, previous.cxl, boot_id=boot_id)
    functions = cxl.functions if cxl is not None else {}  # PCI function -> serial, for a device gone from sysfs
    signals += found + cxl_kernel_signals(
        obs.kernel_log, obs.cxl, found, klog=previous.klog, boot_id=boot_id, remembered=functions
    )
    fold_memdev_aer(signals)  # a memdev's PCIe uncorrected error goes on its CXL ticket, not a second one
    found, heat = throttle_signals(obs.thermal_throttle, previous.heat, now=now, boot=boot_id)
    signals += found
    timeouts = {e.subject for e in (obs.kernel_log.events if obs.kernel_log else ()) if e.kind == "nic_tx_timeout"}
    found, net = network_signals(
        obs.network, obs.identity, previous.net, now=now, boot_id=boot_id, tx_timeouts={t for t in timeouts if t}
    )
    signals += found
    # the kernel log's link downs: whether the host has another link, partners judged by the counters' day too
    note_link_redundancy(signals, obs.network, flapping_ports(net.downs) if net is not None else ())
    found, gpus = gpu_signals(obs.gpu, previous.gpus)
    signals += found
    expected = baselines.for_class(host.hardware_class)
    found, capacity = capacity_signals(
        report,
        previous.capacity,
        labels=host.labels,
        baseline=expected.capacity if expected is not None else None,
        hardware_class=host.hardware_class,
        now=now,
    )
    signals += found
    signals, capacity = fold_sel(signals, previous.capacity, capacity, report, now=now)  # SEL + inventory: one
    note_guest_and_capacity(signals, guest=virtual_machine(obs))  # derive/os_faults.py

    new_memory = HostMemory(
        at=now, boot=boot_id, klog=klog, sel=sel, disks=disks, irq=irq, ras=ras, mce=mce, pages=pages, gpus=gpus
    )
    new_memory.capacity = capacity
    new_memory.net = net
    new_memory.heat = heat
    new_memory.cxl = cxl
    new_memory.pcie = pcie
    new_memory.xid = xid
    new_memory.redfish = redfish
    new_memory.edac = edac_now or previous.edac
    new = new_memory.model_copy(update={"gaps": note_gaps(report, previous, new_memory)}).dump()
    return Derived(signals, new, new != memory)
