"""The simulated fleet: hosts spread over datacenters and racks, a seeded fraction of them faulty.

A VirtualHost keeps hardware state (DIMM counters, disks, SEL, kernel log, boot id, firmware)
and turns it into a report for a given instant; time comes from the caller, so tests can run
a day of a fleet in a second. Faults change that state at realistic rates (checker/sim/faults.py).
"""

from __future__ import annotations

import datetime as dt
import random

from checker.schemas import Report
from checker.sim import capacity, heat, os_faults
from checker.sim import pcie as sim_pcie
from checker.sim import xid as sim_xid
from checker.sim.events import valid_for
from checker.sim.faults import FAULT_KINDS, FAULT_RATES, Fault, FaultKind
from checker.sim.hardware import DATACENTERS, HARDWARE_CLASSES, DiskSpec, HardwareClass
from checker.sim.host import SimDimm, SimDisk, VirtualHost, host_uuid
from checker.sim.pages import page_address
from checker.sim.showcase import FAILS_FIRST as SHOWCASE_FAILS_FIRST
from checker.sim.showcase import adjust as showcase_fault
from checker.sim.showcase import fits as showcase_fits

__all__ = ["FAULT_KINDS", "HARDWARE_CLASSES", "Fault", "SimulatedFleet", "VirtualHost"]

# The demo's fleet was running before fleetfix came up: each agent delivers what it spooled over the last
# WARM_UP (one report a minute, the agent's default interval) before the live reports. So the rules that want a
# condition held for 30 minutes (dimm-ce-ppr, pcie-link-downtrained, smi-storm-no-errors) or a count over an hour
# or a day (nic-crc-errors, page-ce-soft-offline) decide within the demo's first minutes (docs/simulated-fleet.md).
WARM_UP = dt.timedelta(minutes=35)
WARM_UP_INTERVAL_S = 60
LATENCY_CLASS = "compute-icx-2s"  # every third host of this class serves the latency-critical tier
HOUSEKEEPING_PER_SOCKET = 4  # cores per socket left for the kernel, IRQs and the agent


def _dimms(hw: HardwareClass, rng: random.Random) -> list[SimDimm]:
    """One DIMM per channel, numbered as each class's EDAC driver numbers them and named as its board's
    silkscreen names them (the class label maps in remediator/dimm_labels.yaml say how one maps to the other)."""
    part = {"DDR4": "M393A4K40CB2-CVF", "DDR5": "M321R8GA0BB0-CQKZJ"}.get(hw.mem_type, "M395T5160QZ4-CE66")
    dimms = []
    for socket in range(hw.sockets):
        for index in range(hw.channels):
            if hw.edac_driver in ("skx_edac", "i10nm_edac"):
                # skx: 2 iMCs x 3 channels per socket; i10nm: 4 iMCs x 2 channels; one mcN per iMC.
                per_imc = 3 if hw.edac_driver == "skx_edac" else 2
                imc, channel = divmod(index, per_imc)
                mc, row = socket * (hw.channels // per_imc) + imc, 0
                name, label = f"dimm{channel * 2}", f"CPU_SrcID#{socket}_MC#{imc}_Chan#{channel}_DIMM#0"
                locator, bank, layout = f"{'AB'[socket]}{index + 1}", "Not Specified", "dimm"
                location = f"channel {channel} slot 0"
            elif hw.edac_driver == "ie31200_edac":
                # ie31200_edac: mc0, chip-select rows x 2 channels; single-rank DIMMs on rows 0 and 2.
                dimm_no, channel = divmod(index, 2)
                imc, mc, row = 0, 0, dimm_no * 2
                name, label = f"csrow{row}/ch{channel}", f"mc#0csrow#{row}channel#{channel}"
                locator, bank, layout = (
                    f"DIMM{'AB'[channel]}{dimm_no + 1}",
                    f"P0_Node0_Channel{channel}_Dimm{dimm_no}",
                    "csrow",
                )
                location = f"csrow {row} channel {channel}"
            elif hw.sockets == 1:
                # amd64_edac on one EPYC socket: mc0, a csrow layer over its 8 UMC channels.
                imc, mc, row, channel = 0, 0, 0, index
                name, label = f"csrow0/ch{index}", f"mc#0csrow#0channel#{index}"
                locator, bank, layout = f"P1-DIMM{'ABCDEFGH'[index]}1", f"P0_Node0_Channel{index}_Dimm0", "csrow"
                location = f"csrow 0 channel {index}"
            else:
                # amd64_edac on a family 10h board: an mc per node, 2 channels x 2 chip-select rows.
                row, channel = divmod(index, 2)
                imc, mc = 0, socket
                name, label = f"csrow{row}/ch{channel}", f"mc#{socket}csrow#{row}channel#{channel}"
                locator, bank, layout = f"P{socket + 1}-DIMM{row + 1}{'AB'[channel]}", f"BANK{row}", "csrow"
                location = f"csrow {row} channel {channel}"
            dimms.append(
                SimDimm(
                    mc=mc,
                    name=name,
                    label=label,
                    locator=locator,
                    bank=bank,
                    serial=f"{rng.getrandbits(32):08X}",
                    part_number=part,
                    size_mb=hw.dimm_size_mb,
                    mem_type=hw.mem_type,
                    socket=socket,
                    imc=imc,
                    channel=channel,
                    row=row,
                    layout=layout,
                    location=location,
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


def _can_have(host: VirtualHost, kind: FaultKind, showcase: bool) -> bool:
    """Whether the fleet may give `kind` to `host`: the showcase only where it shows what the demo wants of it."""
    return valid_for(host, kind) and (not showcase or showcase_fits(host, kind))


class SimulatedFleet:
    """N virtual hosts; `fault_fraction` of them, drawn at random, get one fault each.

    Kinds are shared out in proportion to FAULT_RATES (each faulty host gets, among the kinds its
    hardware can have, the one furthest below its share so far), so even a small fleet shows the
    common faults and a large one shows them in realistic proportions. With `showcase` (the demo),
    every kind a faulty host can have comes once before any comes twice, and at least as many hosts
    as there are kinds are faulty (when the fleet has that many), so the demo shows every kind; and its
    faults are the demo's versions (checker/sim/showcase.py), so each shows within five minutes.
    """

    def __init__(self, size: int, *, seed: int = 1, fault_fraction: float = 0.1, showcase: bool = False) -> None:
        self.rng = random.Random(seed)
        self.hosts = [_make_host(i, self.rng) for i in range(size)]
        # Any fraction above zero means at least one faulty host (the demo always shows one); zero means none.
        count = max(1, round(size * fault_fraction)) if size and fault_fraction > 0 else 0
        if showcase and count:  # enough faulty hosts for every kind, as far as the fleet's size allows
            count = max(count, min(size, len(FAULT_KINDS)))
        faulty = self.rng.sample(range(size), k=count)
        given: dict[FaultKind, int] = dict.fromkeys(FAULT_KINDS, 0)
        # Hosts that can have each kind: in the showcase a kind only a few hosts can have (a GPU's, CXL's)
        # goes first, so the common kinds do not take those hosts before it (the draws stay the same).
        eligible = {k: sum(_can_have(h, k, showcase) for h in self.hosts) for k in FAULT_KINDS} if showcase else {}
        for index in faulty:
            host = self.hosts[index]
            kinds = [kind for kind in FAULT_KINDS if _can_have(host, kind, showcase)]
            if showcase:  # every kind the host can have, once, the scarce and the common first; then in proportion
                kind = min(kinds, key=lambda k: (given[k], eligible[k], -FAULT_RATES[k], self.rng.random()))
            else:
                kind = min(kinds, key=lambda k: ((given[k] + 1) / FAULT_RATES[k], self.rng.random()))
            given[kind] += 1
            fault = self.fault(kind, self.rng.randrange(len(host.dimms)))
            host.inject(showcase_fault(fault) if showcase else fault)
            if showcase and kind in SHOWCASE_FAILS_FIRST:
                host.fail_next_action = "fail"
        heat.share_rack_heat(self.hosts)  # a rack position that runs hot heats its neighbours too

    def fault(self, kind: FaultKind, dimm_index: int = 0) -> Fault:
        """A fault of `kind` with rates drawn from the fleet's generator (DIMM faults on `dimm_index`)."""
        rng = self.rng
        if kind == "dimm_ce_storm":
            return Fault(kind, dimm_index, ce_per_s=rng.uniform(20, 80))
        if kind == "dimm_ce_moderate":
            # below 1/s: the PPR flow's ceiling (dimm-ce-ppr; faster is dimm-ce-too-fast-for-ppr's)
            return Fault(kind, dimm_index, ce_per_s=rng.uniform(0.05, 0.9))
        if kind == "dimm_ce_page":  # one weak cell: a few corrected errors an hour on one page
            return Fault(kind, dimm_index, per_hour=rng.uniform(3, 6), variant=page_address(rng.getrandbits(32)))
        if kind == "cmci_storm":
            # the kernel declares a storm at 15 CMCIs/s (before 6.8): the DIMM throws at least that many
            return Fault(kind, dimm_index, ce_per_s=rng.uniform(15, 40), per_hour=rng.uniform(12, 20))
        if kind == "soft_lockups":
            return Fault(kind, dimm_index, per_hour=rng.uniform(3, 6))
        if kind == "panic":
            return Fault(kind, dimm_index, per_hour=rng.uniform(0.2, 0.5))
        if kind == "smart_realloc_growing":
            return Fault(kind, dimm_index, per_hour=rng.uniform(20, 60))
        if kind == "nvme_critical_warning":
            return Fault(kind, dimm_index, variant=rng.choice(("spare", "reliability")), per_hour=rng.uniform(5, 20))
        if kind in ("psu_failure", "psu_input_lost"):
            return Fault(kind, dimm_index, variant=rng.choice(("PS1", "PS2")))
        if kind == "errata_unpatched":
            return Fault(kind, dimm_index, variant=rng.choice(("stock", "withdrawn")))
        if kind == "fan_failure":
            return Fault(kind, dimm_index, variant=f"System Fan {rng.randrange(1, 7)}")
        if kind == "cxl_promotion_disabled":  # a third turned off by their owners (no draw: the stream stays)
            return Fault(kind, dimm_index, variant="off" if dimm_index % 3 == 2 else "normal")
        if kind == "capacity_lost":  # which part goes from the DIMM drawn above (no draw: the stream stays)
            return Fault(kind, dimm_index, variant=capacity.variant_of(dimm_index))
        if kind == "fs_readonly":  # XFS shutdown or ext4 remount-ro, from the index (no draw: the stream stays)
            return Fault(kind, dimm_index, variant=os_faults.variant_of(dimm_index))
        if kind == "oom_kills":  # a few kills an hour: five within the day's window soon
            return Fault(kind, dimm_index, per_hour=4.0 + dimm_index % 3)
        if kind == "nic_crc_errors":  # a dirty optic (CRC), a flapping link, or every port of a failing NIC
            variant = rng.choice(("crc", "crc", "flapping", "every_port"))
            per_hour = rng.uniform(3, 5) if variant == "flapping" else rng.uniform(300, 800)  # 25G: over 3 x 90/h
            return Fault(kind, dimm_index, variant=variant, per_hour=per_hour)
        if kind == "pcie_fault":  # narrower, slower or storming, from the DIMM drawn (no draw)
            per_hour = 240.0 + 60 * (dimm_index % 4)
            return Fault(kind, dimm_index, variant=sim_pcie.variant_of(dimm_index), per_hour=per_hour)
        if kind == "gpu_remap_pending":  # one in three: the bank had no spare row left (no draw: the stream stays)
            return Fault(kind, dimm_index, variant="failure" if dimm_index % 3 == 2 else "pending")
        if kind == "gpu_xid":  # which Xid story, from the DIMM drawn (no draw: the stream stays)
            return Fault(kind, dimm_index, variant=sim_xid.VARIANTS[dimm_index % len(sim_xid.VARIANTS)])
        if kind == "cxl_media_errors":  # uncorrectable, a threshold or (kernel log only) frozen: the DIMM drawn
            variant = "frozen" if dimm_index % 4 == 3 else "threshold" if dimm_index % 2 else "uncorrectable"
            return Fault(kind, dimm_index, variant=variant)
        if kind == "cpu_core_errors":  # one core's L1 correcting an error every few minutes
            return Fault(kind, dimm_index, per_hour=rng.uniform(10, 16))
        if kind == "sel_full":  # filled by a flooding sensor, or by years of ordinary history
            return Fault(kind, dimm_index, variant=rng.choice(("flood", "history")), per_hour=rng.uniform(60, 120))
        return Fault(kind, dimm_index)

    def by_name(self, hostname: str) -> VirtualHost:
        for host in self.hosts:
            if host.hostname == hostname:
                return host
        raise KeyError(hostname)

    def reports(self, now: dt.datetime, *, interval_s: int = 60) -> list[Report]:
        return [h.report(now, interval_s=interval_s) for h in self.hosts if h.reporting]

    def spooled(self, now: dt.datetime, *, span: dt.timedelta = WARM_UP) -> list[list[Report]]:
        """Each host's reports over the `span` before `now`, one every WARM_UP_INTERVAL_S, oldest first: what its
        agent spooled while no centre listened, one catch-up batch per host (a host silent all along sends none).
        Call it before any `reports`: the hosts' time only moves forward."""
        times = [now - span + dt.timedelta(seconds=s) for s in range(0, int(span.total_seconds()), WARM_UP_INTERVAL_S)]
        batches = []
        for host in self.hosts:
            batch = []
            for at in times:
                if host.reporting:
                    batch.append(host.report(at, interval_s=WARM_UP_INTERVAL_S))
            if batch:
                batches.append(batch)
        return batches

    def inventory(self) -> list[dict[str, str]]:
        """Rows in the `fleetfix hosts import` CSV shape; a host of a Redfish class carries the `bmc_protocol`
        label that chooses its BMC driver centrally (cyborg/central/bmcs.py), so its page and tickets say so."""
        return [
            {
                "hostname": h.hostname,
                "hardware_class": h.hardware.name,
                "datacenter": h.datacenter,
                "row": h.row,
                "rack": h.rack,
                "slot": h.slot,
                "cluster": h.cluster,
                **({"labels": "bmc_protocol=redfish"} if h.hardware.bmc_protocol == "redfish" else {}),
            }
            for h in self.hosts
        ]
