"""A virtual host's state as a version-1 report, section by section, in the shapes real collectors send.

Kernel log and SEL sections are incremental (only what was written since the last report);
counters (EDAC, interrupts, SMART) are absolute, as the kernel and the drives keep them.
"""

from __future__ import annotations

import datetime as dt
import zlib
from typing import TYPE_CHECKING

from checker.parsers.smart import decode_exit_status
from checker.schemas import (
    CollectorRun,
    CollectorStatus,
    CpuIdentity,
    DimmInventory,
    DiskHealth,
    EdacController,
    EdacDimm,
    EdacState,
    Firmware,
    HostIdentity,
    Identity,
    InterruptRow,
    Interrupts,
    IsolatedProcess,
    IsolatedWorkload,
    KernelLogState,
    MceRecord,
    MemoryTiers,
    NicFirmware,
    NumaNode,
    Observations,
    Report,
    SelState,
)
from checker.sim import capacity as sim_capacity
from checker.sim import cxl as sim_cxl
from checker.sim import gpu, heat, logs, network, os_faults, pages, pcie, smi, stalls
from checker.sim import redfish as sim_redfish
from checker.sim.benchmark import benchmark as sim_benchmark
from checker.sim.events import device_irqs
from checker.sim.hardware import SEL_CAPACITY
from checker.sim.processes import cputime_watch
from checker.sim.showcase import NO_INBAND_IPMI

if TYPE_CHECKING:
    from checker.sim.host import VirtualHost

# per-CPU rates (per second) of the IPI and timer rows: (housekeeping core, isolated nohz_full core)
IPI_RATES: dict[str, tuple[float, float, str]] = {
    "LOC": (250.0, 1.0, "Local timer interrupts"),
    "RES": (60.0, 0.0, "Rescheduling interrupts"),
    "CAL": (4.0, 0.0, "Function call interrupts"),
    "TLB": (20.0, 0.0, "TLB shootdowns"),
}
# collector -> the source a real agent's collector would name (None: it has a single source)
COLLECTORS: dict[str, str | None] = {
    "identity": None,
    "edac": None,
    "kernel_log": "kmsg",
    "mce": "mcelog",
    "sel": "ipmitool",
    "smart": None,
    "interrupts": None,
    "memory_tiers": None,
    "cputime": None,
    "error_reporting": None,
    "capacity": None,
    "filesystems": "mountinfo",
    "time_sync": "chrony",
}


def _no_inband_ipmi(host: VirtualHost) -> bool:
    """`ipmitool mc info` fails on a host without in-band IPMI: the report has no BMC version of the host's own."""
    return any(f.kind == "firmware_old_bmc" and f.variant == NO_INBAND_IPMI for f in host.faults)


def render_report(host: VirtualHost, now: dt.datetime, interval_s: int) -> Report:
    scored, scored_run = sim_benchmark(host, now)
    redfish = sim_redfish.speaks_redfish(host)
    if redfish:
        sim_redfish.observe(host, now)  # the BMC's own log of correctable errors, before the SEL is read
    bmc_log = sel(host)
    if redfish:
        bmc_log = sim_redfish.sel_state(host, bmc_log.entries)
    report = Report(
        host=HostIdentity(
            hostname=host.hostname, machine_id=host.machine_id, boot_id=host.boot_id, agent_version="sim"
        ),
        captured_at=now,
        interval_s=interval_s,
        collectors={
            **{
                name: CollectorRun(status=CollectorStatus.ok, duration_ms=1.0, source=source)
                for name, source in COLLECTORS.items()
            },
            "isolated_workload": CollectorRun(status=CollectorStatus.ok, duration_ms=0.3)
            if host.isolated
            else CollectorRun(
                status=CollectorStatus.unavailable,
                duration_ms=0.0,
                reason="no isolated CPUs (isolcpus, nohz_full): no workload to watch",
            ),
        },
        observations=Observations(
            edac=edac(host),
            kernel_log=kernel_log(host, now),
            sel=bmc_log,
            disks=[disk_health(host, i, now) for i in sim_capacity.present_disks(host)],
            mce=machine_checks(host),
            identity=identity(host),
            interrupts=interrupts(host, now),
            memory_tiers=memory_tiers(host),
            isolated_workload=isolated_workload(host),
            cputime=cputime_watch(host, now),
            smi=smi.smi_state(host),
            error_reporting=smi.error_reporting(host),
            stalls=stalls.stalls_state(host, now, interval_s),
            benchmark=scored,
            capacity=sim_capacity.capacity(host),
            rasdaemon=pages.rasdaemon_state(host),
            gpu=gpu.gpu_state(host),
            network=network.network_state(host, now),
            pcie=pcie.pcie_state(host, now),
            filesystems=os_faults.filesystems(host),
            time_sync=os_faults.time_sync(host, now),
            sensors=heat.sensors(host, now),
            thermal_throttle=heat.throttle(host, now),
            cxl=sim_cxl.cxl_state(host, now),
        ),
    )
    if (ras_run := pages.collector_run(host)) is not None:
        report.collectors["rasdaemon"] = ras_run
    report.collectors["smi"] = smi.collector_run(host)
    report.collectors["gpu"] = gpu.collector_run(host)
    report.collectors["network"] = network.collector_run(host)
    report.collectors["pcie"] = pcie.collector_run(host)
    report.collectors["stalls"] = stalls.collector_run(host)
    report.collectors.update(heat.collector_runs(host))
    report.collectors["cxl"] = sim_cxl.collector_run(host)
    if scored_run is not None:
        report.collectors["benchmark"] = scored_run
    if redfish:  # as an agent with FLEETFIX_AGENT_BMC_PROTOCOL=redfish reports (docs/agent.md, "Redfish")
        report.observations.redfish = sim_redfish.redfish_state(host, now, bmc_log)
        report.collectors.update(sim_redfish.collector_runs())
    host.reported_boot_id = host.boot_id
    return report


def mc_name(host: VirtualHost, mc: int) -> str:
    """The controller's name as its EDAC driver sets it (drivers/edac: skx_common.c, i10nm_base.c, amd64_edac.c)."""
    hw = host.hardware
    if hw.edac_driver in ("skx_edac", "i10nm_edac"):
        per_socket = len({d.mc for d in host.dimms}) // hw.sockets
        socket, imc = divmod(mc, per_socket)
        prefix = "Skylake Socket" if hw.edac_driver == "skx_edac" else "Intel_10nm Socket"
        return f"{prefix}#{socket} IMC#{imc}"
    if hw.edac_driver == "ie31200_edac":
        return "IE31200"
    return f"F{hw.cpu_family:X}h"


def edac(host: VirtualHost) -> EdacState:
    controllers: dict[int, EdacController] = {}
    for dimm in sim_capacity.present_dimms(host):  # a DIMM firmware disabled has no EDAC entry
        controller = controllers.setdefault(dimm.mc, EdacController(mc=dimm.mc, mc_name=mc_name(host, dimm.mc)))
        controller.dimms.append(
            EdacDimm(
                mc=dimm.mc,
                name=dimm.name,
                layout="csrow" if dimm.layout == "csrow" else "dimm",
                label=dimm.label,
                location=dimm.location,
                ce_count=int(dimm.ce_count),
                ue_count=dimm.ue_count,
                size_mb=dimm.size_mb,
                mem_type=dimm.mem_type,
            )
        )
        controller.ce_count += int(dimm.ce_count)
        controller.ue_count += dimm.ue_count
    return EdacState(controllers=list(controllers.values()), poll_msec=host.edac_poll_msec)


def machine_checks(host: VirtualHost) -> list[MceRecord]:
    """mcelog's records since the last report: none on a healthy host."""
    records = list(host.mce_pending)
    host.mce_pending.clear()
    return records


def kernel_log(host: VirtualHost, now: dt.datetime) -> KernelLogState:
    """What the agent read from /dev/kmsg since its last cycle, and a crashed boot's records from pstore."""
    found = []
    for boot_at, records in host.pstore:
        found.extend(logs.kernel_events(records, boot_at)[0])
    current, first_seq, last_seq = logs.kernel_events(host.kmsg_pending, host.boot_at or now)
    read = len(host.kmsg_pending) + sum(len(records) for _, records in host.pstore)
    host.pstore.clear()
    host.kmsg_pending.clear()
    return KernelLogState(
        source="kmsg",
        boot_id=host.boot_id,
        first_seq=first_seq,
        last_seq=last_seq if last_seq is not None else host.kmsg_seq - 1,  # the agent's cursor
        rebooted=host.reported_boot_id is not None and host.reported_boot_id != host.boot_id,
        lines_read=read,
        events=[*found, *current],
    )


def sel(host: VirtualHost) -> SelState:
    entries = logs.sel_entries(host.sel_pending)
    host.sel_pending.clear()
    return SelState(
        entries=entries,
        entry_count=host.sel_count,
        percent_used=float(host.sel_count * 100 // SEL_CAPACITY),
        overflow=host.sel_count >= SEL_CAPACITY,
        last_record_id=host.sel_next_id - 1 if host.sel_next_id > 1 else None,
    )


def disk_health(host: VirtualHost, index: int, now: dt.datetime) -> DiskHealth:
    disk = host.disks[index]
    spec = disk.spec
    hours = disk.power_on_hours + (int((now - host.first_at).total_seconds() // 3600) if host.first_at else 0)
    health = DiskHealth(
        device=spec.device,
        protocol=spec.protocol,
        model=spec.model,
        serial=disk.serial,
        firmware=disk.firmware or spec.firmware,
        smart_passed=disk.smart_passed,
        exit_status=disk.exit_status,
        exit_flags=decode_exit_status(disk.exit_status),
        temperature_c=disk.temperature_c,
        power_on_hours=hours,
    )
    if spec.protocol == "ATA":
        health.reallocated_sectors = disk.reallocated
        health.pending_sectors = disk.pending
        health.offline_uncorrectable = 0
        health.udma_crc_errors = 0
    elif spec.protocol == "SCSI":
        health.grown_defects = disk.grown_defects
    else:
        health.nvme_critical_warning = disk.critical_warning
        health.media_errors = disk.media_errors
        health.percentage_used = disk.percentage_used
        health.available_spare = disk.available_spare
        health.available_spare_threshold = 10
    return health


def identity(host: VirtualHost) -> Identity:
    hw = host.hardware
    cmdline = f"BOOT_IMAGE=/vmlinuz-{host.kernel} root=UUID={host.machine_id[:8]}-0000 ro quiet"
    if host.isolated:
        cpus = _cpu_list(host.isolated)
        cmdline += f" isolcpus=managed_irq,domain,{cpus} nohz_full={cpus} rcu_nocbs={cpus}"
    per_socket = hw.logical_cpus // hw.sockets
    return Identity(
        kernel=host.kernel,
        cmdline=cmdline,
        isolated_cpus=list(host.isolated),
        nohz_full_cpus=list(host.isolated),
        cpus=[
            CpuIdentity(
                socket=s,
                vendor=hw.cpu_vendor,
                family=hw.cpu_family,
                model=hw.cpu_model,
                stepping=hw.cpu_stepping,
                microcode=hw.microcode,
                model_name=hw.model_name,
                logical_cpus=per_socket,
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
            for d in sim_capacity.present_dimms(host)
        ],
        firmware=Firmware(
            bios_vendor=hw.bios_vendor,
            bios_version=host.bios_version,
            system_manufacturer=hw.system_manufacturer,
            system_product=hw.system_product,
            bmc_firmware=None if _no_inband_ipmi(host) else host.bmc_firmware,
            nics=[
                NicFirmware(
                    interface=iface,
                    driver=hw.nic_driver,
                    driver_version=host.kernel,
                    firmware=host.nic_firmware.get(iface, hw.nic_firmware),
                )
                for iface in hw.nic_interfaces
            ],
            nvme={d.spec.device: d.firmware or d.spec.firmware for d in host.disks if d.spec.protocol == "NVMe"},
        ),
    )


def interrupts(host: VirtualHost, now: dt.datetime) -> Interrupts:
    """/proc/interrupts as counts since boot: per-CPU rates times uptime, plus what faults added."""
    cpus = host.hardware.logical_cpus
    isolated = set(host.isolated)
    up = max(0.0, (now - host.boot_at).total_seconds()) if host.boot_at else 0.0
    rows: list[InterruptRow] = []
    affinity: dict[str, list[int]] = {}
    for irq, description, home, rate in device_irqs(host):
        counts = [int((rate * up if cpu == home else 0) + host.irq_extra.get((irq, cpu), 0.0)) for cpu in range(cpus)]
        rows.append(InterruptRow(name=irq, per_cpu=counts, description=description))
        affinity[irq] = list(range(cpus)) if irq in host.irq_widened else [home]
    for name, (busy, quiet, description) in IPI_RATES.items():
        counts = [
            int((quiet if cpu in isolated else busy) * up + host.irq_extra.get((name, cpu), 0.0)) for cpu in range(cpus)
        ]
        rows.append(InterruptRow(name=name, per_cpu=counts, description=description))
    return Interrupts(cpu_count=cpus, rows=rows, irq_affinity=affinity)


LATENCY_WORKLOAD = "pktcapture"  # the latency-critical process a host with isolated cores runs
WORKLOAD_HOUSEKEEPING_THREADS = 3  # its sibling threads on housekeeping cores (the ones that munmap)


def isolated_workload(host: VirtualHost) -> IsolatedWorkload | None:
    """What the agent's isolated_workload collector reports: the latency workload has one thread pinned
    on each isolated core and a few helper threads elsewhere; its pid is fixed per host."""
    if not host.isolated:
        return None
    pid = 2000 + zlib.crc32(host.hostname.encode()) % 30000
    worker = IsolatedProcess(
        pid=pid,
        comm=LATENCY_WORKLOAD,
        threads=len(host.isolated) + WORKLOAD_HOUSEKEEPING_THREADS,
        isolated_threads=len(host.isolated),
        threads_by_cpu={str(cpu): 1 for cpu in host.isolated},
    )
    return IsolatedWorkload(
        isolated_cpus=list(host.isolated),
        processes=[worker],
        processes_scanned=180,
        threads_read=worker.threads,
    )


def memory_tiers(host: VirtualHost) -> MemoryTiers:
    hw = host.hardware
    per_socket = hw.logical_cpus // hw.sockets
    nodes = [
        NumaNode(
            node=s, cpus=list(range(s * per_socket, (s + 1) * per_socket)), memory_mb=hw.channels * hw.dimm_size_mb
        )
        for s in range(hw.sockets)
    ]
    nodes += [NumaNode(node=hw.sockets + i, cpus=[], memory_mb=hw.cxl_node_mb) for i in range(hw.cxl_nodes)]
    return MemoryTiers(
        nodes=nodes,
        demotion_enabled=host.demotion_enabled if hw.cxl_nodes else False,
        numa_balancing=host.numa_balancing
        if host.numa_balancing is not None
        else ((2 if hw.cxl_nodes else 1) if len(nodes) > 1 else 0),
        interleave_weights=dict(host.interleave_weights),
    )


def _cpu_list(cpus: list[int]) -> str:
    ranges: list[list[int]] = []
    for cpu in sorted(cpus):
        if ranges and cpu == ranges[-1][1] + 1:
            ranges[-1][1] = cpu
        else:
            ranges.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)
