"""The report is one versioned contract, printed as one JSON Schema and read as a whole from here:
its building blocks live in checker/report_types.py and the sections of the later fault classes in
checker/sections/, and this module re-exports what it builds on.

The host report: the wire contract between agents and the central service.

Versioned by SCHEMA_VERSION; docs/report-schema.md describes every field and
`fleetfix report-schema` prints the JSON Schema. Counters are raw (rates are
computed centrally). Every list is bounded so one broken host cannot send an
unbounded document; collectors truncate before building the model and say so.
"""

from __future__ import annotations

import datetime as dt
import uuid
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field, model_validator

from checker.report_types import (  # noqa: F401 (re-exported: importers read the contract from here)
    EARLIEST,
    LATEST,
    MAX_EVENTS,
    MAX_EXCERPT_CHARS,
    MAX_INT64,
    MAX_LINES_PER_EVENT,
    MAX_MAP_KEYS,
    MAX_PROBLEM_CHARS,
    MAX_PROBLEMS,
    MAX_SEL_ENTRIES,
    SCHEMA_VERSION,
    Address,
    CollectorRun,
    CollectorStatus,
    FiniteFloat,
    Int64,
    Key,
    Line,
    Model,
    NonNegativeInt,
    Timestamp,
)
from checker.sections.capacity import BlockDevice, Capacity  # noqa: F401 (re-exported)
from checker.sections.cxl import CxlEvent, CxlHealth, CxlMemdev, CxlRasState  # noqa: F401 (re-exported)
from checker.sections.gpu import Gpu, GpuEcc, GpuMemoryRepair, GpuState  # noqa: F401 (re-exported)
from checker.sections.heat import ThermalThrottle, ThrottlePackage  # noqa: F401 (re-exported)
from checker.sections.network import LldpNeighbor, NetworkState, NicPort  # noqa: F401 (re-exported)
from checker.sections.os import Filesystems, Mount, TimeSync  # noqa: F401 (re-exported)
from checker.sections.pcie import MAX_PCIE_DEVICES, PcieDevice, PcieState  # noqa: F401 (re-exported)
from checker.sections.redfish import (  # noqa: F401 (re-exported)
    RedfishFirmware,
    RedfishLogService,
    RedfishMemoryModule,
    RedfishPsu,
    RedfishRedundancy,
    RedfishState,
)
from core.vocabulary import HOSTNAME_MAX_LENGTH, HOSTNAME_PATTERN


class HostIdentity(Model):
    hostname: str = Field(min_length=1, max_length=HOSTNAME_MAX_LENGTH, pattern=HOSTNAME_PATTERN)
    machine_id: str | None = Field(None, max_length=64)
    boot_id: str | None = Field(None, max_length=64)
    agent_version: str = Field("unknown", max_length=64)


# -- EDAC and rasdaemon -----------------------------------------------------------


class EdacDimm(Model):
    """One DIMM's (or rank's, or csrow channel's) counters as the kernel's EDAC core keeps them."""

    mc: NonNegativeInt
    name: str = Field(max_length=64, description="sysfs entry: dimm3, rank1, csrow2/ch0.")
    layout: Literal["dimm", "rank", "csrow"]
    label: str = Field(
        "", max_length=256, description="dimm_label / chN_dimm_label, e.g. CPU_SrcID#0_Ha#0_Chan#2_DIMM#0."
    )
    location: str | None = Field(None, max_length=256, description="dimm_location, e.g. 'channel 2 slot 0'.")
    ce_count: NonNegativeInt
    ue_count: NonNegativeInt
    size_mb: NonNegativeInt | None = None
    mem_type: str | None = Field(None, max_length=64)


class EdacController(Model):
    mc: NonNegativeInt
    mc_name: str | None = Field(
        None, max_length=128, description="Driver's controller name (sb_edac, Skylake Socket#0 IMC#1 …)."
    )
    ce_count: NonNegativeInt = 0
    ue_count: NonNegativeInt = 0
    ce_noinfo_count: NonNegativeInt = 0
    ue_noinfo_count: NonNegativeInt = 0
    seconds_since_reset: NonNegativeInt | None = None
    dimms: list[EdacDimm] = Field(default_factory=list, max_length=512)


class EdacState(Model):
    controllers: list[EdacController] = Field(default_factory=list, max_length=64)
    poll_msec: NonNegativeInt | None = Field(None, description="edac_mc_poll_msec module parameter.")


class RasMemoryEvent(Model):
    """A row of rasdaemon's mc_event table."""

    id: Int64
    timestamp: str | None = Field(None, max_length=64)
    err_count: NonNegativeInt = 1
    err_type: str = Field(max_length=64)
    err_msg: str = Field("", max_length=1000)
    label: str = Field("", max_length=256)
    mc: Int64 | None = None
    top_layer: Int64 | None = None
    middle_layer: Int64 | None = None
    lower_layer: Int64 | None = None
    address: Address | None = None
    grain: NonNegativeInt | None = Field(
        None,
        le=64,
        description="rasdaemon's `grain` column: the trace event's grain_bits, log2 of how many bytes around the "
        "address the error may be in (kernels before 5.5 overstated it by up to two bits).",
    )


class RasAerEvent(Model):
    """A row of rasdaemon's aer_event table (PCIe Advanced Error Reporting)."""

    id: Int64
    timestamp: str | None = Field(None, max_length=64)
    dev_name: str = Field("", max_length=128)
    err_type: str = Field("", max_length=64, description="Corrected, Uncorrected (Non-Fatal), Uncorrected (Fatal).")
    err_msg: str = Field("", max_length=1000)


class RasMemoryFailure(Model):
    """A row of rasdaemon's memory_failure_event table (the kernel's memory_failure() outcome)."""

    id: Int64
    timestamp: str | None = Field(None, max_length=64)
    pfn: str = Field("", max_length=64)
    page_type: str = Field("", max_length=128)
    action_result: str = Field("", max_length=64, description="Recovered, Ignored, Failed, Delayed …")


class RasDimmTotal(Model):
    """All mc_event errors of one type at one DIMM location, over the whole database (a raw counter)."""

    err_type: str = Field(max_length=64)
    label: str = Field("", max_length=256)
    mc: Int64 | None = None
    top_layer: Int64 | None = None
    middle_layer: Int64 | None = None
    lower_layer: Int64 | None = None
    err_count: NonNegativeInt


class RasdaemonState(Model):
    memory_events: list[RasMemoryEvent] = Field(default_factory=list, max_length=MAX_EVENTS)
    last_id: Int64 | None = Field(None, description="Highest mc_event id read (the incremental cursor).")
    truncated: NonNegativeInt = 0
    aer_events: list[RasAerEvent] = Field(default_factory=list, max_length=MAX_EVENTS)
    memory_failures: list[RasMemoryFailure] = Field(default_factory=list, max_length=MAX_EVENTS)
    dimm_totals: list[RasDimmTotal] = Field(
        default_factory=list,
        max_length=512,
        description="Error totals per type and DIMM location (what `ras-mc-ctl --summary` prints); "
        "written from the same EDAC path as the sysfs counters, so they under-count where EDAC does.",
    )
    last_ids: dict[Key, Int64] = Field(
        default_factory=dict,
        max_length=16,
        description="Highest id read per table (mc_event, aer_event, …): the cursors.",
    )
    mce_records: list[MceRecord] | None = Field(
        None,
        max_length=MAX_EVENTS,
        description="New rows of mce_record (the mce:mce_record trace event, raised for every machine check, "
        "also those the kernel's CE collector took and EDAC never saw); None: no mce_record table was read.",
    )


# -- kernel log -------------------------------------------------------------------


class KernelEventKind(StrEnum):
    edac_ce = "edac_ce"
    edac_ue = "edac_ue"
    mce_hardware_error = "mce_hardware_error"
    mce_logged = "mce_logged"
    cmci_storm = "cmci_storm"
    ghes_error = "ghes_error"
    memory_failure = "memory_failure"
    soft_lockup = "soft_lockup"
    hard_lockup = "hard_lockup"
    hung_task = "hung_task"
    oops = "oops"
    panic = "panic"
    block_io_error = "block_io_error"
    nvme_timeout = "nvme_timeout"
    nvme_reset = "nvme_reset"
    nic_tx_timeout = "nic_tx_timeout"
    nic_link_down = "nic_link_down"
    nic_link_up = "nic_link_up"
    pcie_aer_corrected = "pcie_aer_corrected"
    pcie_aer_uncorrected = "pcie_aer_uncorrected"
    thermal_throttle = "thermal_throttle"
    fs_error = "fs_error"
    fs_readonly = "fs_readonly"
    oom_kill = "oom_kill"
    clocksource_unstable = "clocksource_unstable"
    # NVIDIA GPUs (checker/parsers/xid.py): subject the device's PCI address, 0000:9b:00.0
    gpu_xid = "gpu_xid"
    gpu_sxid = "gpu_sxid"
    gpu_fallen_off_bus = "gpu_fallen_off_bus"
    gpu_identity = "gpu_identity"  # the GPU's uuid and board serial, printed before its first Xid: no fault
    # CXL (checker/parsers/cxl_log.py): subject the PCI address of the device, or of the CPER record's agent
    cxl_protocol_error = "cxl_protocol_error"  # firmware-first CPER "CXL Protocol Error" section
    cxl_mem_disabled = "cxl_mem_disabled"  # cxl_error_detected: CXL.mem disabled, or a disconnect requested
    cxl_device_failed = "cxl_device_failed"  # Memory Device Status fatal / firmware halt; media never active
    cxl_mem_resumed = "cxl_mem_resumed"  # cxl_pci after an error: CXL.mem restarted, error resume successful/failed


class KernelEvent(Model):
    kind: KernelEventKind
    seq: NonNegativeInt | None = Field(None, description="/dev/kmsg sequence number of the first line.")
    timestamp: Timestamp | None = None
    subject: str | None = Field(None, max_length=256, description="What it is about: DIMM label, device, CPU.")
    count: NonNegativeInt = Field(1, description="Errors the line reports (an EDAC line may say '6 CE').")
    lines: list[Line] = Field(max_length=MAX_LINES_PER_EVENT)
    lines_dropped: NonNegativeInt = Field(0, description="Lines of this block beyond the kept ones.")


class KernelLogState(Model):
    source: Literal["kmsg", "journal", "dmesg", "file"]
    boot_id: str | None = Field(None, max_length=64)
    first_seq: NonNegativeInt | None = None
    last_seq: NonNegativeInt | None = None
    lost_records: NonNegativeInt = Field(0, description="Records overwritten in the ring buffer before they were read.")
    rebooted: bool = Field(False, description="The boot id changed since the last cycle.")
    lines_read: NonNegativeInt = 0
    events: list[KernelEvent] = Field(default_factory=list, max_length=MAX_EVENTS)
    truncated: NonNegativeInt = Field(0, description="Events dropped to keep the report bounded.")


# -- IPMI -------------------------------------------------------------------------


class SelEntry(Model):
    record_id: NonNegativeInt
    timestamp: Timestamp | None = Field(None, description="None when the BMC's clock was not set (PostInit).")
    sensor_type: str = Field(max_length=128)
    sensor_name: str = Field("", max_length=128)
    event: str = Field("", max_length=256)
    direction: Literal["asserted", "deasserted"] | None = None
    component: str | None = Field(None, max_length=128, description="DIMM, PSU or fan the entry names, if any.")
    raw: Line = ""
    log_service: str | None = Field(
        None,
        max_length=512,
        description="Redfish only: the LogEntryCollection the entry came from (record_id is then the collector's own "
        "sequence number, see docs/agent.md 'Redfish'); null for IPMI.",
    )
    entry_id: str | None = Field(None, max_length=128, description="Redfish only: the entry's Id as served (a string).")


class SelState(Model):
    entries: list[SelEntry] = Field(default_factory=list, max_length=MAX_SEL_ENTRIES)
    entry_count: NonNegativeInt | None = None
    percent_used: FiniteFloat | None = Field(None, ge=0, le=100)
    overflow: bool | None = None
    last_record_id: NonNegativeInt | None = None
    truncated: NonNegativeInt = 0
    last_add_time: str | None = Field(None, max_length=64, description="The BMC's 'Last Add Time', as printed.")
    cleared: bool = Field(False, description="The SEL has fewer entries than at the last cycle: it was cleared.")
    source: Literal["ipmi", "redfish"] | None = Field(
        None,
        description="Who read it: ipmitool (`ipmi`) or the redfish collector (`redfish`). Their record ids and counts "
        "are unrelated spaces: compare a cycle only with earlier cycles of the same source. Null: not said (older "
        "agents).",
    )


class SensorReading(Model):
    name: str = Field(max_length=128)
    kind: Literal["psu", "fan", "temperature", "voltage", "power", "other"]
    status: str = Field(max_length=32, description="ok, cr, nr, ns … as the BMC reports it.")
    reading: FiniteFloat | None = None
    unit: str | None = Field(None, max_length=32)
    thresholds: dict[Literal["lnr", "lcr", "lnc", "unc", "ucr", "unr"], FiniteFloat] = Field(
        default_factory=dict,
        max_length=6,
        description="The BMC's thresholds, where the listing has them (`ipmitool sensor list`): lower/upper "
        "non-recoverable, critical, non-critical.",
    )


# -- disks ------------------------------------------------------------------------


class DiskHealth(Model):
    device: str = Field(max_length=256)
    protocol: Literal["ATA", "NVMe", "SCSI", "unknown"]
    model: str | None = Field(None, max_length=128)
    serial: str | None = Field(None, max_length=128)
    firmware: str | None = Field(None, max_length=64)
    smart_passed: bool | None = None
    exit_status: NonNegativeInt = 0
    exit_flags: list[str] = Field(default_factory=list, max_length=8)
    reallocated_sectors: NonNegativeInt | None = None
    pending_sectors: NonNegativeInt | None = None
    offline_uncorrectable: NonNegativeInt | None = None
    udma_crc_errors: NonNegativeInt | None = None
    grown_defects: NonNegativeInt | None = None
    nvme_critical_warning: NonNegativeInt | None = None
    media_errors: NonNegativeInt | None = None
    percentage_used: NonNegativeInt | None = None
    available_spare: NonNegativeInt | None = None
    available_spare_threshold: NonNegativeInt | None = None
    temperature_c: FiniteFloat | None = None
    power_on_hours: NonNegativeInt | None = None
    pci_address: str | None = Field(
        None,
        max_length=16,
        pattern=r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$",
        description="An NVMe drive's PCIe function, '0000:01:00.0' (/sys/class/nvme/<controller>/device): the same "
        "part as a pcie_device ticket on that function. None for other disks, or where sysfs does not say.",
    )


# -- machine checks ---------------------------------------------------------------


class MceRecord(Model):
    timestamp: Timestamp | None = None
    cpu: NonNegativeInt | None = None
    socket: NonNegativeInt | None = None
    bank: NonNegativeInt | None = None
    status: str | None = Field(None, max_length=32, description="MCi_STATUS as hex.")
    address: str | None = Field(None, max_length=32)
    error_class: Literal["memory", "cache", "bus", "internal", "other"]
    corrected: bool
    message: str = Field("", max_length=1000)
    id: Int64 | None = Field(None, description="rasdaemon's mce_record row id (its cursor); None from mcelog.")
    misc: str | None = Field(None, max_length=32, description="MCi_MISC as hex, where the source gives it.")
    amd: bool | None = Field(None, description="An AMD or Hygon CPU's record (None: the source does not say).")


class MceMemoryCounter(Model):
    """A memory-error trigger block of `mcelog --client`: raw counters per socket/channel/DIMM (None: 'any')."""

    socket: NonNegativeInt | None = None
    channel: NonNegativeInt | None = None
    dimm: NonNegativeInt | None = None
    corrected_total: NonNegativeInt = 0
    corrected_24h: NonNegativeInt = 0
    uncorrected_total: NonNegativeInt = 0
    uncorrected_24h: NonNegativeInt = 0


# -- identity, firmware, interrupts, memory tiers --------------------------------


class CpuIdentity(Model):
    socket: NonNegativeInt
    vendor: str = Field(max_length=32, description="GenuineIntel, AuthenticAMD …")
    family: NonNegativeInt
    model: NonNegativeInt
    stepping: NonNegativeInt | None = None
    microcode: NonNegativeInt | None = None
    model_name: str = Field("", max_length=128)
    logical_cpus: NonNegativeInt = 0


class DimmInventory(Model):
    """A populated memory device from dmidecode -t memory (type 17)."""

    locator: str = Field(max_length=128)
    bank_locator: str | None = Field(None, max_length=128)
    size_mb: NonNegativeInt | None = None
    mem_type: str | None = Field(None, max_length=32)
    speed_mts: NonNegativeInt | None = None
    manufacturer: str | None = Field(None, max_length=128)
    part_number: str | None = Field(None, max_length=128)
    serial: str | None = Field(None, max_length=128)
    non_volatile: bool | None = Field(
        None,
        description="Persistent memory (Optane PMem, NVDIMM): dmidecode's Memory Technology, Type Detail "
        "Non-Volatile or Type 'Logical non-volatile device'. None: dmidecode does not say.",
    )


class NicFirmware(Model):
    interface: str = Field(max_length=64)
    driver: str | None = Field(None, max_length=64)
    driver_version: str | None = Field(None, max_length=64)
    firmware: str | None = Field(None, max_length=128)
    bus_info: str | None = Field(None, max_length=64)


class Firmware(Model):
    bios_vendor: str | None = Field(None, max_length=128)
    bios_version: str | None = Field(None, max_length=128)
    bios_date: str | None = Field(None, max_length=32)
    system_manufacturer: str | None = Field(None, max_length=128)
    system_product: str | None = Field(None, max_length=128)
    system_serial: str | None = Field(None, max_length=128)
    bmc_firmware: str | None = Field(None, max_length=64)
    nics: list[NicFirmware] = Field(default_factory=list, max_length=64)
    nvme: dict[Key, Annotated[str, Field(max_length=128)]] = Field(
        default_factory=dict, max_length=256, description="NVMe device to firmware revision."
    )


class Identity(Model):
    kernel: str | None = Field(None, max_length=256, description="uname -r")
    cmdline: str | None = Field(None, max_length=4096)
    isolated_cpus: list[NonNegativeInt] = Field(default_factory=list, max_length=4096)
    nohz_full_cpus: list[NonNegativeInt] = Field(default_factory=list, max_length=4096)
    cpus: list[CpuIdentity] = Field(default_factory=list, max_length=16)
    dimms: list[DimmInventory] = Field(default_factory=list, max_length=512)
    firmware: Firmware = Field(default_factory=Firmware)


class InterruptRow(Model):
    name: str = Field(max_length=32, description="IRQ number or the row name (MCE, TLB, LOC …).")
    per_cpu: list[NonNegativeInt] = Field(max_length=4096)
    description: str = Field("", max_length=256)


class Interrupts(Model):
    cpu_count: NonNegativeInt = Field(description="CPUn columns of the header (online CPUs).")
    rows: list[InterruptRow] = Field(default_factory=list, max_length=2048)
    irq_affinity: dict[Key, Annotated[list[NonNegativeInt], Field(max_length=MAX_MAP_KEYS)]] = Field(
        max_length=MAX_MAP_KEYS, default_factory=dict, description="IRQ number to its smp_affinity_list."
    )
    cpus: list[NonNegativeInt] = Field(
        default_factory=list,
        max_length=4096,
        description="The header's CPU numbers in column order: per_cpu[i] counts CPU cpus[i] (offline CPUs have "
        "no column, so CPU0 CPU1 CPU3 gives [0, 1, 3]). Empty (older agents): column i is CPU i.",
    )

    @model_validator(mode="after")
    def _one_cpu_per_column(self) -> Interrupts:
        if self.cpus and (len(self.cpus) != self.cpu_count or len(set(self.cpus)) != len(self.cpus)):
            raise ValueError("cpus must name one distinct CPU per column (cpu_count of them)")
        return self


MAX_ISOLATED_PROCESSES = 16


class IsolatedProcess(Model):
    """A user process with threads whose last CPU (field 39 of /proc/PID/task/TID/stat) is isolated."""

    pid: Int64 = Field(ge=1)
    comm: str = Field(max_length=64, description="/proc/PID/comm: the process's name, as the kernel keeps it.")
    threads: NonNegativeInt = Field(description="Its threads that were read.")
    isolated_threads: NonNegativeInt = Field(description="Of those, the threads that last ran on an isolated CPU.")
    threads_by_cpu: dict[Annotated[str, Field(pattern=r"^[0-9]{1,5}$")], NonNegativeInt] = Field(
        default_factory=dict, max_length=4096, description="Isolated CPU to its threads that last ran there."
    )


class IsolatedWorkload(Model):
    """Which user processes run on the isolated cores: who a TLB-shootdown ticket goes to."""

    isolated_cpus: list[NonNegativeInt] = Field(
        default_factory=list,
        max_length=4096,
        description="isolcpus and nohz_full CPUs (/proc/cmdline, /sys/devices/system/cpu/isolated and nohz_full).",
    )
    processes: list[IsolatedProcess] = Field(
        default_factory=list,
        max_length=MAX_ISOLATED_PROCESSES,
        description="Processes with threads on isolated CPUs, most such threads first.",
    )
    dropped: NonNegativeInt = Field(0, description="Further processes with threads on isolated CPUs, not listed.")
    processes_scanned: NonNegativeInt = Field(0, description="Processes whose /proc/PID/stat was read.")
    threads_read: NonNegativeInt = Field(0, description="Thread stat files read (/proc/PID/task/TID/stat).")
    unscanned: NonNegativeInt = Field(
        0, description="Processes, or their threads, not read (past the scan caps): the list may miss one."
    )


MAX_CPUTIME_FINDINGS = 16


class CputimeExcess(Model):
    """A process whose CPU time (utime + stime of /proc/PID/stat) is more than it could have used since it
    started: one of its threads above its own run time, or the whole process above its run time on every
    CPU the host has."""

    pid: Int64 = Field(ge=1)
    tid: Int64 | None = Field(None, ge=1, description="The thread over its run time; None: the whole process is.")
    comm: str = Field(max_length=64, description="The process's name (/proc/PID/stat's comm).")
    threads: NonNegativeInt = Field(description="Its threads now (field 20, num_threads).")
    scope: Literal["thread", "process"] = Field(
        description="thread: one thread's CPU time above its own run time; process: the whole thread group's "
        "above its run time times the host's CPUs (what no number of threads can reach)."
    )
    cputime_s: FiniteFloat = Field(ge=0, description="(utime + stime) / CLK_TCK of the thread, or the process.")
    elapsed_s: FiniteFloat = Field(ge=0, description="Its run time: uptime - starttime / CLK_TCK.")
    excess_s: FiniteFloat = Field(
        ge=0, description="CPU time beyond the bound: elapsed_s for a thread, elapsed_s x cpus for a process."
    )
    stat_line: str = Field("", max_length=1024, description="The stat line as read (the evidence).")


class CputimeWatch(Model):
    """The cputime side-effect watch (seed 001): processes whose CPU time is more than their run time allows."""

    checked: NonNegativeInt = Field(
        description="User processes whose /proc/PID/stat was read and judged this cycle (its slice of the "
        "rotation, and the re-checks)."
    )
    flagged: NonNegativeInt = Field(
        0,
        description="Processes over the bound now (may exceed the list): those found this cycle and those "
        "flagged earlier that are still over (re-checked every cycle).",
    )
    processes: list[CputimeExcess] = Field(
        default_factory=list, max_length=MAX_CPUTIME_FINDINGS, description="Flagged processes, largest excess first."
    )
    threads_read: NonNegativeInt = Field(0, description="Thread stat files read (/proc/PID/task/TID/stat).")
    unscanned: NonNegativeInt = Field(
        0,
        description="User processes not judged in the last full rotation and the one in progress: a stat line "
        "that did not parse (an agent before the rotation: past the process or byte cap).",
    )
    unverified: NonNegativeInt = Field(
        0,
        description="Processes above their run time, within what the host's CPUs allow, whose threads were not "
        "all read (more threads than a cycle may read, or a thread's stat line did not parse), in the last full "
        "rotation and the one in progress: neither cleared nor flagged.",
    )
    caps_hit: list[Literal["processes", "threads", "bytes"]] = Field(
        default_factory=list,
        max_length=3,
        description="Caps this cycle reached: processes and bytes end the cycle's slice (the rotation goes on "
        "next cycle), threads leaves a process unverified.",
    )
    bytes_read: NonNegativeInt = 0
    complete: bool = Field(
        description="A full rotation through the process list has finished, and neither it nor the one in "
        "progress left a user process unscanned or unverified: zero flagged means a clean host."
    )
    tolerance_s: FiniteFloat = Field(ge=0, description="Seconds of CPU time allowed over the bound.")
    cpus: NonNegativeInt | None = Field(
        None, description="CPUs the host may ever run (/sys/devices/system/cpu/possible); None: not read."
    )
    clk_tck: NonNegativeInt = Field(description="Clock ticks per second the stat fields count in.")
    uptime_s: FiniteFloat = Field(ge=0, description="/proc/uptime when the scan began.")
    rotation_cycles: NonNegativeInt | None = Field(
        None,
        description="Cycles the last full rotation through the process list took; None: none has finished "
        "since the agent started or the host booted (or an agent before the rotation).",
    )
    rotation_checked: NonNegativeInt | None = Field(None, description="User processes that rotation judged.")
    rotation_ahead: NonNegativeInt = Field(
        0,
        description="Pids past this cycle's slice that the rotation in progress has still to reach (user "
        "processes, and kernel threads not known as such); 0: this cycle ended a rotation.",
    )
    rechecked: NonNegativeInt = Field(
        0, description="Processes flagged in an earlier cycle re-read in this one, before its slice."
    )


class NumaNode(Model):
    node: NonNegativeInt
    cpus: list[NonNegativeInt] = Field(default_factory=list, max_length=4096)
    memory_mb: NonNegativeInt = 0


class MemoryTiers(Model):
    nodes: list[NumaNode] = Field(default_factory=list, max_length=64)
    demotion_enabled: bool | None = None
    numa_balancing: Int64 | None = None
    interleave_weights: dict[Key, Int64] = Field(
        default_factory=dict, max_length=1024, description="node to weighted-interleave weight."
    )
    interleave_auto: bool | None = Field(
        None,
        description="weighted_interleave/auto (Linux 6.16 on): the kernel sets the weights from bandwidth data; "
        "None: no such file.",
    )


class SmiPackage(Model):
    """MSR_SMI_COUNT (0x34) read on one CPU of a package: SMIs are broadcast to every thread, so one
    housekeeping CPU per package tells the package's count (reading an MSR interrupts the CPU it is on)."""

    package: NonNegativeInt = Field(description="physical_package_id.")
    cpu: NonNegativeInt = Field(description="The CPU whose MSR was read.")
    count: NonNegativeInt = Field(le=2**32 - 1, description="Bits 31:0 of MSR_SMI_COUNT: SMIs since reset; wraps.")


class SmiState(Model):
    """System management interrupts taken since the last reset, per package (Intel only)."""

    source: Literal["msr"] = Field("msr", description="msr: /dev/cpu/N/msr at offset 0x34.")
    packages: list[SmiPackage] = Field(default_factory=list, max_length=64)


class ErrorReporting(Model):
    """What the host shows about how corrected memory errors reach the OS (firmware-first or CMCI);
    the centre decides the mode from these and the errors the same report carries."""

    hest: bool | None = Field(None, description="/sys/firmware/acpi/tables/HEST exists (firmware may report via GHES).")
    ghes_sources: NonNegativeInt | None = Field(
        None, description="GHES.N error sources bound to the GHES driver (/sys/bus/platform/drivers/GHES)."
    )
    ghes_disabled: bool | None = Field(None, description="ghes.disable=1: the kernel ignores firmware-first records.")
    cmci_disabled: bool | None = Field(None, description="machinecheck0/cmci_disabled: the kernel polls the banks.")
    ignore_ce: bool | None = Field(None, description="machinecheck0/ignore_ce: corrected errors are not reported.")
    dont_log_ce: bool | None = Field(None, description="machinecheck0/dont_log_ce: corrected errors are not logged.")


class BenchmarkResult(Model):
    """One run of the agent's own short CPU + memory/TLB benchmark (docs/agent.md, "Benchmark"); only the
    report of the cycle that ran it carries one."""

    name: str = Field(
        max_length=64,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._+\-]{0,63}$",
        description="The benchmark and its method version (fleetfix-cpumem-v1): scores of different names are "
        "never compared.",
    )
    score: FiniteFloat = Field(ge=0, description="Per core per GHz: work passes per second on one CPU / nominal GHz.")
    unit: str = Field("passes/s/GHz", max_length=32)
    method_version: Int64 = Field(1, ge=1, description="The work's version (also in the name).")
    duration_s: FiniteFloat = Field(ge=0, description="Wall time of the whole run, buffers included.")
    cpu: NonNegativeInt | None = Field(None, description="The housekeeping CPU it ran on (never an isolated one).")
    ghz: FiniteFloat | None = Field(None, gt=0, description="The nominal clock the score is divided by.")
    clock_source: str | None = Field(None, max_length=64, description="Where the nominal clock was read.")
    ran_at: Timestamp
    parts: dict[Key, FiniteFloat] = Field(
        default_factory=dict, max_length=8, description="The parts' own rates: hash_mib_s, walk_mpages_s."
    )
    conditions: dict[Key, FiniteFloat] = Field(
        default_factory=dict,
        max_length=16,
        description="What the host looked like: loadavg_1m and load_per_cpu, the CPU's cpu_busy_pct and steal_pct "
        "before the run, steal_pct_run and throttle_events during it (a key the host could not read is absent).",
    )


class AgentStatus(Model):
    """The agent's own state: its delivery spool and its footprint on the host."""

    spooled: NonNegativeInt = Field(0, description="Reports waiting in the local spool when this one was built.")
    spool_dropped_total: NonNegativeInt = Field(
        0, description="Reports dropped from the full spool (oldest first) since the state directory was made."
    )
    rss_kb: NonNegativeInt | None = Field(None, description="The agent process's resident memory.")
    cpu_seconds: FiniteFloat | None = Field(None, ge=0, description="CPU time the agent process has used (a counter).")
    cpus: list[NonNegativeInt] = Field(default_factory=list, max_length=4096, description="CPUs the agent may run on.")
    last_delivery: Literal["broker", "http", "spool", "dropped"] | None = Field(
        None, description="How the previous report left: the broker, the HTTP fallback, the spool, or dropped."
    )


class CpuStalls(Model):
    """One probed CPU's stalls over the interval: how late its probe thread woke from fixed sleeps."""

    cpu: NonNegativeInt
    max_ms: FiniteFloat = Field(ge=0, description="The largest overshoot of one sleep.")
    total_ms: FiniteFloat = Field(ge=0, description="The overshoots at or over threshold_ms, summed.")
    count: NonNegativeInt = Field(description="Overshoots at or over threshold_ms.")
    wakeups: NonNegativeInt = Field(0, description="Sleeps the probe thread finished (about interval/period).")


class CoincidentStall(Model):
    """A stall every probed CPU saw at the same time (the SMI signature, seed 000)."""

    at: Timestamp
    ms: FiniteFloat = Field(ge=0, description="How long all probed CPUs were stalled at once.")
    smis_around: NonNegativeInt | None = Field(
        None, description="SMIs MSR_SMI_COUNT counted over smis_span_s around it; null: no counter read."
    )
    smis_span_s: FiniteFloat | None = Field(
        None, ge=0, description="From the counter's last read before the stall to its first after (its window's)."
    )
    window_steal_ms: FiniteFloat | None = Field(
        None, ge=0, description="Steal time of the probed CPUs over that window; null: not read."
    )
    window_throttled_ms: FiniteFloat | None = Field(
        None, ge=0, description="Time the probe's cgroup was throttled (CPU quota) over that window; null: not read."
    )
    window_load_per_cpu: FiniteFloat | None = Field(
        None, ge=0, description="The 1-minute load per online CPU at that window's end; null: not read."
    )


class Stalls(Model):
    """The stall probe's results since the previous report (checker/agent/stallprobe.py)."""

    started_at: Timestamp
    ended_at: Timestamp
    interval_s: FiniteFloat = Field(ge=0, description="The time the probe covered (its windows since the last report).")
    period_ms: FiniteFloat = Field(
        gt=0, description="The probe threads' wake-up period: a stall shorter than it is seen only when it covers one."
    )
    threshold_ms: FiniteFloat = Field(gt=0, description="An overshoot at or over this is a stall.")
    cpus: list[CpuStalls] = Field(
        default_factory=list, max_length=4096, description="The probed CPUs: housekeeping ones only."
    )
    coincident: list[CoincidentStall] = Field(
        default_factory=list,
        max_length=64,
        description="Stalls seen on every probed CPU at once, oldest first; empty with fewer than two CPUs probed.",
    )
    coincident_count: NonNegativeInt = Field(0, description="All such stalls, listed or not.")
    probe_cpu_s: FiniteFloat | None = Field(None, ge=0, description="CPU time the probe itself used over the interval.")
    active_share: FiniteFloat = Field(
        1.0,
        gt=0,
        le=1,
        description="The share of the interval the probe was awake (its duty cycle); stalls outside it go unseen.",
    )
    hypervisor: bool | None = Field(
        None, description="/proc/cpuinfo has the `hypervisor` flag (a VM); null: not known (no flags line, old probe)."
    )
    steal_ms: FiniteFloat | None = Field(None, ge=0, description="Steal time of the probed CPUs over the interval.")
    throttled_ms: FiniteFloat | None = Field(
        None, ge=0, description="Time the probe's own cgroup (the agent's: CPUQuota=) was throttled over the interval."
    )
    smis: NonNegativeInt | None = Field(
        None, description="SMIs MSR_SMI_COUNT counted over the probe's windows; null: no counter (not Intel, no msr)."
    )
    one_cpu: str | None = Field(
        None, description="Why only one CPU was probed (all-core stalls then cannot be told); null with two or more."
    )


class Observations(Model):
    edac: EdacState | None = None
    rasdaemon: RasdaemonState | None = None
    kernel_log: KernelLogState | None = None
    sel: SelState | None = None
    sensors: list[SensorReading] | None = Field(None, max_length=1024)
    disks: list[DiskHealth] | None = Field(None, max_length=256)
    mce: list[MceRecord] | None = Field(None, max_length=MAX_EVENTS)
    identity: Identity | None = None
    interrupts: Interrupts | None = None
    memory_tiers: MemoryTiers | None = None
    mce_memory: list[MceMemoryCounter] | None = Field(None, max_length=512)
    agent: AgentStatus | None = None
    isolated_workload: IsolatedWorkload | None = None
    stalls: Stalls | None = None
    benchmark: BenchmarkResult | None = Field(
        None, description="The agent's benchmark, in the report of the cycle that ran it (about once a day)."
    )
    cputime: CputimeWatch | None = None
    smi: SmiState | None = None
    error_reporting: ErrorReporting | None = None
    gpu: GpuState | None = Field(None, description="nvidia-smi -q -x: the host's NVIDIA GPUs.")
    capacity: Capacity | None = Field(
        None, description="Memory, CPUs, disks and NICs the OS sees (checker/sections/capacity.py)."
    )
    network: NetworkState | None = Field(
        None, description="Per-interface error counters, link state and LLDP switch port (checker/sections/network.py)."
    )
    thermal_throttle: ThermalThrottle | None = Field(
        None, description="Thermal-throttle counters per CPU package (checker/sections/heat.py)."
    )
    cxl: CxlRasState | None = Field(
        None, description="CXL memory devices and their RAS records from rasdaemon (checker/sections/cxl.py)."
    )
    filesystems: Filesystems | None = Field(
        None, description="Block-device filesystems and whether the kernel made one read-only (checker/sections/os.py)."
    )
    time_sync: TimeSync | None = Field(
        None, description="chrony's or timesyncd's clock synchronisation (checker/sections/os.py)."
    )
    pcie: PcieState | None = Field(
        None, description="PCIe functions' links and AER counters from sysfs or lspci (checker/sections/pcie.py)."
    )
    redfish: RedfishState | None = Field(
        None,
        description="The BMC's Redfish service: DIMMs with their error counts, firmware, PSUs, log cursors "
        "(checker/sections/redfish.py).",
    )


class Report(Model):
    """One check cycle of one host."""

    schema_version: Literal[1] = SCHEMA_VERSION
    report_id: uuid.UUID = Field(default_factory=uuid.uuid4, description="Idempotency key: sent twice, stored once.")
    host: HostIdentity
    captured_at: Timestamp
    interval_s: Int64 = Field(60, ge=1, le=86400, description="The cycle interval the agent runs on.")
    collectors: dict[Key, CollectorRun] = Field(default_factory=dict, max_length=64)
    observations: Observations = Field(default_factory=Observations)


def utc(value: dt.datetime) -> dt.datetime:
    """The same instant in UTC (reports carry aware timestamps)."""
    return value.astimezone(dt.UTC)
