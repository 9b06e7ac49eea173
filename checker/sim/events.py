"""What each fault does to a virtual host: at once when injected (`start`), over time (`progress`),
and what clearing it restores (`stop`); plus the SEL history and boot entries every host has.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from checker.parsers.mce import error_class_from_status
from checker.schemas import MceRecord
from checker.sim import capacity, gpu, heat, logs, os_faults, pages, smi, stalls, xid
from checker.sim.disk_errors import read_error
from checker.sim.faults import SILENCING, Fault
from checker.sim.hardware import (
    EDAC_POLL_DEFAULT_MSEC,
    EDAC_POLL_SLOW_MSEC,
    OPTERON_STOCK_KERNEL,
    OPTERON_WITHDRAWN_KERNEL,
    SEL_CAPACITY,
    build_with,
    default_weights,
)

if TYPE_CHECKING:
    from checker.sim.host import SimDimm, SimDisk, VirtualHost

EDAC_COUNTER_MAX = 2**32 - 1
PANIC_REBOOT_S = 70  # a cold reboot after a panic (50-73 s on bare metal)
TLB_SHOOTDOWNS_PER_S = 6.0  # what a munmap-happy neighbour thread caused on an isolated core
STRAY_IRQS_PER_S = 40.0
MAX_EVENTS_PER_ADVANCE = 50
_PERIODIC = {"cmci_storm", "soft_lockups", "panic", "sel_full", "cpu_core_errors", "dimm_ce_page", "oom_kills"}
STORM_BURST = 15  # corrected errors within a second that make a pre-6.8 kernel declare a CMCI storm
FLOOD_BACKLOG = 60  # entries a flooding sensor left in the SEL before the fault is first seen


def valid_for(host: VirtualHost, kind: str) -> bool:
    """Whether a fault kind can happen on this host's hardware and role."""
    hw = host.hardware
    if kind == "cmci_storm":
        return hw.intel  # CMCI is Intel's corrected-error interrupt
    if kind in ("firmware_first_left", "smi_storm", "stalls_not_smi"):
        return hw.intel  # MSR_SMI_COUNT is Intel's: the fault would not show on AMD
    if kind == "errata_unpatched":
        return (hw.cpu_vendor, hw.cpu_family, hw.cpu_model, hw.cpu_stepping) == ("AuthenticAMD", 16, 2, 2)
    if kind == "cputime_wrap":  # a class with a build that has the side effect (hardware.KERNEL_BUILDS)
        return build_with(hw.name, "cputime_wrap") is not None
    if kind == "smart_realloc_growing":
        return any(d.spec.rotational for d in host.disks)
    if kind in ("nvme_critical_warning", "nvme_temperature"):
        return any(d.spec.protocol == "NVMe" for d in host.disks)
    if kind == "smart_failing":
        return bool(host.disks)
    if kind in ("isolated_irqs", "isolated_tlb"):
        return bool(host.isolated)
    if kind == "cpu_core_errors":
        return faulty_core(host) is not None
    if kind == "cxl_demotion_disabled":
        return hw.cxl_nodes > 0
    if kind in ("gpu_remap_pending", "gpu_xid"):
        return bool(hw.gpus)
    if kind == "cxl_interleave_default":
        return hw.cxl_nodes > 0 and hw.weighted_interleave
    if kind == "cxl_media_errors":
        return hw.cxl_nodes > 0
    if kind == "cxl_promotion_disabled":
        return hw.cxl_nodes > 0
    if kind == "slow_host":  # the errata class's slow hosts are the erratum's (errata_unpatched)
        return not valid_for(host, "errata_unpatched")
    return True


def _disk(host: VirtualHost, fault: Fault, wanted: str) -> SimDisk:
    if fault.disk_index is None:
        fits = [
            i
            for i, d in enumerate(host.disks)
            if wanted == "any"
            or (wanted == "rotational" and d.spec.rotational)
            or (wanted == "nvme" and d.spec.protocol == "NVMe")
        ]
        fault.disk_index = fits[host.rng.randrange(len(fits))]
    return host.disks[fault.disk_index]


def start(host: VirtualHost, fault: Fault) -> None:
    if not valid_for(host, fault.kind):
        raise ValueError(f"{fault.kind} cannot happen on {host.hostname} ({host.hardware.name})")
    kind = fault.kind
    if kind == "edac_poll_slow":
        host.edac_poll_msec = EDAC_POLL_SLOW_MSEC
    elif kind == "firmware_first_left":
        host.reporting_mode = "firmware_first"
    elif kind == "firmware_old_bios":
        host.bios_version = host.hardware.old_bios_version
    elif kind == "firmware_old_bmc":
        host.bmc_firmware = host.hardware.old_bmc_firmware
    elif kind == "errata_unpatched":
        # the stock kernel, or the first patched build that was withdrawn for its cputime bug
        host.kernel = OPTERON_WITHDRAWN_KERNEL if fault.variant == "withdrawn" else OPTERON_STOCK_KERNEL
    elif kind == "cputime_wrap":
        # the class's build whose cputime accounting wraps (the erratum's first patched build on the Opterons)
        host.kernel = build_with(host.hardware.name, "cputime_wrap") or host.kernel
    elif kind == "smart_failing":
        disk = _disk(host, fault, "any")
        disk.smart_passed = False
        disk.exit_status |= 0x08 | 0x10  # DISK FAILING, prefail attribute at or below threshold
        disk.reallocated = max(disk.reallocated, 4049) if disk.spec.protocol == "ATA" else disk.reallocated
    elif kind == "smart_realloc_growing":
        _disk(host, fault, "rotational")
    elif kind == "nvme_critical_warning":
        disk = _disk(host, fault, "nvme")
        if fault.variant == "spare":
            disk.critical_warning |= 0x01
            disk.available_spare = 4
        else:
            disk.critical_warning |= 0x04  # NVM subsystem reliability degraded
    elif kind == "nvme_temperature":
        disk = _disk(host, fault, "nvme")
        disk.critical_warning |= 0x02  # over its temperature threshold: a fan out, a blocked inlet
        disk.temperature_c = 78.0
    elif kind in SILENCING:
        if not fault.onset_s:
            silence(host, fault)
    elif kind == "isolated_irqs":
        host.irq_widened.add(device_irqs(host)[0][0])
    elif kind == "cxl_demotion_disabled":
        host.demotion_enabled = False
    elif kind == "cxl_interleave_default":
        host.interleave_weights = dict.fromkeys(host.interleave_weights, 1)
    elif kind == "cxl_promotion_disabled":
        # NORMAL only, as tuned before the CXL memory came: demoted pages never come back; or turned off (0)
        host.numa_balancing = 0 if fault.variant == "off" else 1
    elif kind == "gpu_remap_pending":
        gpu.start(host, fault)
    elif kind == "slow_host":
        host.benchmark_at = None  # shown at the next run (the demo's next report rather than the next night)
    elif kind == "sel_full":
        # entries logged long before the agent's cursor; a flood leaves its last hours to be read
        jump = int(SEL_CAPACITY * 0.93) - host.sel_count - (FLOOD_BACKLOG if fault.variant == "flood" else 0)
        if jump > 0:
            host.sel_count += jump
            host.sel_next_id += jump


def silence(host: VirtualHost, fault: Fault) -> None:
    """A silencing fault takes hold: the host stops reporting from now on."""
    fault.logged = True
    if fault.kind == "unreachable":
        host.down = True  # hung: the kernel answers nothing, the BMC still sees power on
    elif fault.kind == "powered_off":
        host.powered_off = True  # a tripped PSU or a person at the wrong rack
    elif fault.kind == "agent_dead":
        host.agent_dead = True


def stop(host: VirtualHost, kind: str) -> None:
    """Undo what a cleared fault set (a remediation sets anything else itself)."""
    if kind == "unreachable":
        host.down = False
    elif kind == "powered_off":
        host.powered_off = False
    elif kind == "agent_dead":
        host.agent_dead = False
    elif kind == "edac_poll_slow":
        host.edac_poll_msec = EDAC_POLL_DEFAULT_MSEC
    elif kind == "firmware_first_left":
        host.reporting_mode = "cmci"
    elif kind == "isolated_irqs":
        host.irq_widened.clear()
    elif kind == "cxl_demotion_disabled":
        host.demotion_enabled = True
    elif kind == "cxl_interleave_default":
        host.interleave_weights = default_weights(host.hardware, tuned=True)
    elif kind == "cxl_promotion_disabled":
        host.numa_balancing = None
    elif kind == "slow_host":
        host.benchmark_at = None
    elif kind == "gpu_remap_pending":
        gpu.stop(host)


def _due(host: VirtualHost, fault: Fault, since: dt.datetime, now: dt.datetime) -> list[dt.datetime]:
    """Times of the fault's events in (since, now]; the first is due as soon as the fault is seen."""
    period = 3600.0 / fault.per_hour if fault.per_hour > 0 else None
    if period is None:
        return []
    if fault.next_at is None:
        fault.next_at = since
    times: list[dt.datetime] = []
    while fault.next_at <= now:
        if len(times) >= MAX_EVENTS_PER_ADVANCE:
            fault.next_at = now + dt.timedelta(seconds=period)
            break
        times.append(fault.next_at)
        fault.next_at += dt.timedelta(seconds=period * host.rng.uniform(0.5, 1.5))
    return times


def progress(host: VirtualHost, fault: Fault, since: dt.datetime, now: dt.datetime, elapsed: float) -> None:
    """What the fault does between `since` and `now` (elapsed seconds)."""
    kind = fault.kind
    if kind in SILENCING and not fault.logged and host.first_at is not None:
        if now >= host.first_at + dt.timedelta(seconds=fault.onset_s):
            silence(host, fault)  # this report is the last one the centre gets
        return
    if kind in ("dimm_ce_storm", "dimm_ce_moderate", "cmci_storm"):
        dimm = host.dimms[fault.dimm_index]
        before = int(dimm.ce_count)
        dimm.ce_count = min(dimm.ce_count + fault.ce_per_s * elapsed, EDAC_COUNTER_MAX)
        if (errors := int(dimm.ce_count) - before) > 0:  # what the EDAC driver prints for them
            host.log(now, [logs.edac_ce(host.hardware.edac_driver, dimm, errors, host.rng.getrandbits(28) << 12)])
            host.mce_pending.append(machine_check(host, fault, now, corrected=True))
    elif kind == "dimm_ue":
        dimm = host.dimms[fault.dimm_index]
        dimm.ue_count = max(dimm.ue_count, 1)
        if not fault.logged:
            host.log(now, [logs.edac_ue(host.hardware.edac_driver, dimm, host.rng.getrandbits(28) << 12)])
            host.sel(now, "Memory #0x53", "Uncorrectable ECC", extra=dimm.locator)
            host.mce_pending.append(machine_check(host, fault, now, corrected=False))
            fault.logged = True
    elif kind in ("psu_failure", "psu_input_lost", "fan_failure") and not fault.logged:
        _one_off(host, fault, now)
        fault.logged = True
    elif kind in ("smart_realloc_growing", "nvme_critical_warning"):
        _grow(host, fault, elapsed, now)
    elif kind == "smart_failing" and not fault.logged:
        fault.logged = True  # a failing disk's reads fail: the first the agent sees
        read_error(host, host.disks[fault.disk_index or 0], now)
    elif kind == "isolated_irqs":
        irq = device_irqs(host)[0][0]
        for cpu in host.isolated:
            host.irq_extra[(irq, cpu)] = host.irq_extra.get((irq, cpu), 0.0) + STRAY_IRQS_PER_S * elapsed
    elif kind in ("firmware_first_left", "smi_storm"):
        smi.progress(host, fault, now, elapsed)
    elif kind == "smi_stalls":
        stalls.progress(host, fault, now, elapsed)
    elif kind == "gpu_remap_pending":
        gpu.progress(host, fault, now)
    elif kind == "gpu_xid":
        xid.progress(host, fault, now)
    elif kind == "isolated_tlb":
        # The workload's own threads munmap on housekeeping cores; its threads on isolated cores take the IPIs.
        for cpu in host.isolated:
            host.irq_extra[("TLB", cpu)] = host.irq_extra.get(("TLB", cpu), 0.0) + TLB_SHOOTDOWNS_PER_S * elapsed
    if kind == "sel_full" and fault.variant == "flood" and not fault.logged:
        fault.logged = True  # what the flooding sensor logged in the hours before (the agent reads it now)
        for i in range(FLOOD_BACKLOG):
            host.sel(since - dt.timedelta(minutes=(FLOOD_BACKLOG - i) * 10), "Critical Interrupt PCIe Cor Sensor", "")
    if kind == "fs_readonly":
        os_faults.progress(host, fault, now)
    if kind == "rack_hot":
        heat.progress(host, fault, now)
    if kind == "capacity_lost" and not fault.logged:
        fault.logged = True
        capacity.log(host, fault, now)
    if kind == "dimm_ce_page" and not fault.logged:
        fault.logged = True
        pages.backlog(host, fault, since)
    if kind in _PERIODIC:
        for at in _due(host, fault, since, now):
            _periodic(host, fault, at, now)


def _one_off(host: VirtualHost, fault: Fault, at: dt.datetime) -> None:
    if fault.kind == "psu_failure":
        psu = fault.variant or "PS2"
        host.sel(at, f"Power Supply {psu} Status", "Failure detected")
        host.sel(at, "Power Unit PS Redundancy", "Redundancy Lost")
    elif fault.kind == "psu_input_lost":  # its feed went: the PSU itself is fine
        psu = fault.variant or "PS2"
        host.sel(at, f"Power Supply {psu} Status", "Power Supply AC lost")
        host.sel(at, "Power Unit PS Redundancy", "Redundancy Lost")
    else:
        fan = fault.variant or "System Fan 3"
        host.sel(at, f"Fan {fan}", "Lower Non-critical going low ", extra="Reading 840 < Threshold 1200 RPM")
        host.sel(at, f"Fan {fan}", "Lower Critical going low ", extra="Reading 0 < Threshold 600 RPM")
        host.sel(at, "Fan Fan Redundancy", "Redundancy Lost")


def _grow(host: VirtualHost, fault: Fault, elapsed: float, now: dt.datetime) -> None:
    disk = host.disks[fault.disk_index or 0]
    if fault.kind == "nvme_critical_warning" and fault.variant == "spare":
        return
    fault.carry += fault.per_hour * elapsed / 3600
    steps = int(fault.carry)
    fault.carry -= steps
    if not steps:
        return
    if fault.kind == "nvme_critical_warning":
        disk.media_errors += steps
        read_error(host, disk, now)  # a read that hit one of them
    elif disk.spec.protocol == "SCSI":
        disk.grown_defects += steps
    else:
        disk.reallocated += steps
        failed = host.rng.randrange(2)  # a read that failed and waits for a rewrite
        disk.pending += failed
        if failed:
            read_error(host, disk, now)


def _periodic(host: VirtualHost, fault: Fault, at: dt.datetime, now: dt.datetime) -> None:
    hw = host.hardware
    hardware = f"{hw.system_manufacturer} {hw.system_product}, BIOS {host.bios_version}"
    cpu = host.rng.randrange(hw.logical_cpus)
    if fault.kind == "cmci_storm":
        # the burst that set the storm off: at least 15 corrected errors within a second, then the storm
        dimm = host.dimms[fault.dimm_index]
        burst = STORM_BURST + host.rng.randrange(10)
        dimm.ce_count = min(dimm.ce_count + burst, EDAC_COUNTER_MAX)
        host.log(at, [logs.edac_ce(hw.edac_driver, dimm, burst, host.rng.getrandbits(28) << 12)])
        per_socket = hw.logical_cpus // hw.sockets
        host.log(at, logs.cmci_storm(host.kernel, dimm.socket * per_socket, memory_bank(host, dimm)))
    elif fault.kind == "soft_lockups":
        pid = host.rng.randrange(300, 60000)
        host.log(at, logs.soft_lockup(cpu, host.rng.randrange(22, 60), pid, host.kernel, hardware))
    elif fault.kind == "sel_full" and fault.variant != "history":
        host.sel(at, "Critical Interrupt PCIe Cor Sensor", "", extra="")  # a device flooding the log
    elif fault.kind == "dimm_ce_page":
        pages.record(host, fault, at)
    elif fault.kind == "oom_kills":
        os_faults.oom_kill(host, fault, at)
    elif fault.kind == "cpu_core_errors":
        core = faulty_core(host)
        if core is not None and core not in host.offline_cpus:  # an offline core runs nothing, errs nothing
            host.mce_pending.append(core_check(host, core, at))
            host.log(at, [logs.mce_logged()])
    elif fault.kind == "panic":
        host.log(at, logs.oops_panic(cpu, host.kernel, hardware))
        host.sel(at, "OS Critical Stop OS Stop", "Run-time critical stop")
        # What the dying boot wrote is recovered from pstore after the reboot.
        host.pstore.append((host.boot_at or at, list(host.kmsg_pending)))
        host.reboot(at=min(at + dt.timedelta(seconds=PANIC_REBOOT_S), now))


# MCi_STATUS of a corrected L1 instruction-fetch error (MCACOD 0x0151: cache hierarchy, level 1), bank 0 (IFU).
CORE_L1_STATUS = 0x9000004000010151


def faulty_core(host: VirtualHost) -> int | None:
    """The core a cpu_core_errors fault is on: socket 0's last housekeeping CPU that is not CPU 0."""
    hw = host.hardware
    per_socket = hw.logical_cpus // hw.sockets
    housekeeping = [c for c in range(1, per_socket) if c not in set(host.isolated)]
    return housekeeping[-1] if len(housekeeping) >= 2 else None


def core_check(host: VirtualHost, cpu: int, at: dt.datetime) -> MceRecord:
    """What mcelog records for an error in the core's own L1 instruction cache."""
    return MceRecord(
        timestamp=at,
        cpu=cpu,
        socket=0,
        bank=0,
        status=f"0x{CORE_L1_STATUS:016x}",
        error_class=error_class_from_status(CORE_L1_STATUS),
        corrected=True,
        message="MCA: Instruction CACHE Level-1 Instruction-Fetch Error",
    )


# MCi_STATUS of a memory-controller read error (MCACOD 0x0090, channel 0): corrected, and uncorrected with PCC clear.
CE_STATUS = 0x8C00004000010090
UE_STATUS = 0xBE00000000800090


def memory_bank(host: VirtualHost, dimm: SimDimm) -> int:
    """The machine-check bank of the DIMM's memory channel: Intel's iMC banks start at 13 (Skylake-SP and
    later); AMD's UMC banks follow the core's (the two UMC banks of a Zen CCD's view, 15 and 16)."""
    if host.hardware.intel:
        return 13 + dimm.mc % max(1, len({d.mc for d in host.dimms}) // host.hardware.sockets) * 3 + dimm.channel
    return 15 + dimm.channel % 2


def machine_check(host: VirtualHost, fault: Fault, at: dt.datetime, *, corrected: bool) -> MceRecord:
    """What mcelog records for an error on the fault's DIMM (the memory controller's bank on its socket;
    MCACOD 0000 0000 1MMM CCCC names the channel in its low bits)."""
    dimm = host.dimms[fault.dimm_index]
    status = (CE_STATUS if corrected else UE_STATUS) | (dimm.channel & 0xF)
    per_socket = host.hardware.logical_cpus // host.hardware.sockets
    return MceRecord(
        timestamp=at,
        cpu=dimm.socket * per_socket,
        socket=dimm.socket,
        bank=memory_bank(host, dimm),
        status=f"0x{status:016x}",
        address=f"0x{host.rng.getrandbits(36) & ~0x3F:x}",
        error_class=error_class_from_status(status),
        corrected=corrected,
        message=f"MEMORY CONTROLLER RD_CHANNEL{dimm.channel}_ERR Transaction: Memory read error",
    )


def history(host: VirtualHost, now: dt.datetime) -> None:
    """The SEL a host already has at its first report: cleared at provisioning, then its boots."""
    boot_at = host.boot_at or now
    provisioned = boot_at - dt.timedelta(days=host.rng.uniform(10, 200))
    host.sel(provisioned, "Event Logging Disabled SEL Fullness", "Log area reset/cleared")
    boots = sorted(provisioned + (boot_at - provisioned) * host.rng.random() for _ in range(host.rng.randrange(3)))
    for at in [provisioned + dt.timedelta(minutes=5), *boots, boot_at]:
        boot_entries(host, at)


def boot_entries(host: VirtualHost, at: dt.datetime) -> None:
    host.sel(at, "System Event BIOS Evt Sensor", "Timestamp Clock Sync")
    host.sel(at, "System Event BIOS Evt Sensor", "Timestamp Clock Sync")
    host.sel(at + dt.timedelta(seconds=18), "System Event BIOS Evt Sensor", "OEM System boot event")


def device_irqs(host: VirtualHost) -> list[tuple[str, str, int, float]]:
    """The host's device IRQs: (number, description, the housekeeping cpu irqbalance put it on, rate/s)."""
    hw = host.hardware
    housekeeping = [c for c in range(hw.logical_cpus) if c not in set(host.isolated)] or [0]
    names = [f"{iface}-TxRx-{q}" for iface in hw.nic_interfaces for q in range(2)]
    for i, d in enumerate(host.disks[:2]):
        names.append(f"nvme{i}q1" if d.spec.protocol == "NVMe" else f"ahci[0000:00:17.0] {d.spec.device[5:]}")
    return [
        (str(24 + i * 3), f"IR-PCI-MSI-edge {name}", housekeeping[(i * 5 + 1) % len(housekeeping)], 40.0 + 35 * i)
        for i, name in enumerate(names)
    ]
