"""The text a virtual host's kernel and BMC write, in the formats the real collectors read.

Kernel messages are /dev/kmsg records and SEL entries are `ipmitool sel elist` lines; the
host turns them into report sections with the real parsers, so the simulated fleet exercises
the same wording the parser tests prove on real samples.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from checker.parsers.ipmi_sel import parse_ipmitool_sel
from checker.parsers.kernel_events import parse_kernel_log
from checker.schemas import KernelEvent, SelEntry

if TYPE_CHECKING:
    from checker.sim.host import SimDimm

KERN_EMERG, KERN_ERR, KERN_WARNING, KERN_NOTICE, KERN_INFO = 0, 3, 4, 5, 6

MODULES = (
    "Modules linked in: xt_conntrack nf_nat nf_conntrack bridge stp llc overlay intel_rapl_msr "
    "ipmi_ssif ipmi_si ipmi_devintf ipmi_msghandler mlx5_ib ib_uverbs mlx5_core nvme nvme_core"
)


def kmsg(level: int, seq: int, usec: int, message: str) -> str:
    """One /dev/kmsg record: 'prio,seq,usec,flags;message' (the kernel facility is 0)."""
    return f"{level},{seq},{usec},-;{message}"


def soft_lockup(cpu: int, stuck_s: int, pid: int, kernel: str, hardware: str) -> list[tuple[int, str]]:
    comm = f"kworker/{cpu}:1"
    return [
        (KERN_EMERG, f"watchdog: BUG: soft lockup - CPU#{cpu} stuck for {stuck_s}s! [{comm}:{pid}]"),
        (KERN_WARNING, MODULES),
        (KERN_WARNING, f"CPU: {cpu} PID: {pid} Comm: {comm} Tainted: G             L     {kernel} #1"),
        (KERN_WARNING, f"Hardware name: {hardware}"),
        (KERN_WARNING, "RIP: 0010:native_queued_spin_lock_slowpath+0x6c/0x2a0"),
        (KERN_WARNING, "Call Trace:"),
        (KERN_WARNING, " <TASK>"),
        (KERN_WARNING, " _raw_spin_lock+0x29/0x30"),
        (KERN_WARNING, " process_one_work+0x1c7/0x380"),
        (KERN_WARNING, " </TASK>"),
    ]


def oops_panic(cpu: int, kernel: str, hardware: str) -> list[tuple[int, str]]:
    return [
        (KERN_EMERG, "BUG: kernel NULL pointer dereference, address: 0000000000000008"),
        (KERN_EMERG, "#PF: supervisor read access in kernel mode"),
        (KERN_EMERG, "#PF: error_code(0x0000) - not-present page"),
        (KERN_EMERG, "PGD 0 P4D 0 "),
        (KERN_EMERG, "Oops: 0000 [#1] PREEMPT SMP NOPTI"),
        (KERN_EMERG, f"CPU: {cpu} PID: 0 Comm: swapper/{cpu} Not tainted {kernel} #1"),
        (KERN_EMERG, f"Hardware name: {hardware}"),
        (KERN_EMERG, "RIP: 0010:tcp_rearm_rto+0x2f/0xe0"),
        (KERN_EMERG, "Call Trace:"),
        (KERN_EMERG, " <IRQ>"),
        (KERN_EMERG, " tcp_ack+0x8a3/0x1390"),
        (KERN_EMERG, " </IRQ>"),
        (KERN_EMERG, "Kernel panic - not syncing: Fatal exception in interrupt"),
        (KERN_EMERG, "Kernel Offset: 0x2a000000 from 0xffffffff81000000"),
    ]


def mce_logged() -> tuple[int, str]:
    """What mce_notify_irq prints (pr_info, rate-limited) when corrected machine checks were logged for mcelog
    or rasdaemon to read (arch/x86/kernel/cpu/mce/core.c; the corpus's Sandy Bridge, Nehalem and Goldmont logs)."""
    return (KERN_INFO, "mce: [Hardware Error]: Machine check events logged")


def _modern(kernel: str) -> bool:
    major, minor = (int(x) for x in kernel.split(".")[:2])
    return (major, minor) >= (6, 0)


def block_io_error(kernel: str, dev: str, sector: int) -> tuple[int, str]:
    """The block layer's line for a failed read: `I/O error, dev sda, sector N op 0x0:(READ) flags 0x80700 phys_seg 1
    prio class 2` on 6.x (the corpus's 6.x Raspberry Pi 5 NVMe log), `print_req_error: I/O error, dev sda, sector N`
    on older kernels (the corpus's HDD log, a 4.17-5.x wording; the corpus has no 2.6 sample, so the Opteron class's
    kernel prints it too)."""
    if _modern(kernel):
        return (KERN_ERR, f"I/O error, dev {dev}, sector {sector} op 0x0:(READ) flags 0x80700 phys_seg 1 prio class 2")
    return (KERN_ERR, f"print_req_error: I/O error, dev {dev}, sector {sector}")


def ata_read_error(kernel: str, port: int, dev: str, sector: int, tag: int) -> list[tuple[int, str]]:
    """libata's error handler on an unrecoverable read (UNC) of a SATA disk, as the corpus's HDD log prints it
    (dmesg-T-ata-unc-print-req-error-hdd.log), without the `cmd … res …` line (one printk with a line break)."""
    ata, scsi = f"ata{port + 1}", f"sd {port}:0:0:0: [{dev}] tag#{tag}"
    lba = " ".join(f"{b:02x}" for b in sector.to_bytes(8, "big"))
    return [
        (KERN_ERR, f"{ata}.00: exception Emask 0x0 SAct 0x{1 << tag:x} SErr 0x0 action 0x0"),
        (KERN_ERR, f"{ata}.00: irq_stat 0x40000008"),
        (KERN_ERR, f"{ata}.00: failed command: READ FPDMA QUEUED"),
        (KERN_ERR, f"{ata}.00: status: {{ DRDY SENSE ERR }}"),
        (KERN_ERR, f"{ata}.00: error: {{ UNC }}"),
        (KERN_INFO, f"{ata}.00: configured for UDMA/133"),
        (KERN_INFO, f"{scsi} FAILED Result: hostbyte=DID_OK driverbyte=DRIVER_SENSE"),
        (KERN_INFO, f"{scsi} Sense Key : Medium Error [current]"),
        (KERN_INFO, f"{scsi} Add. Sense: Unrecovered read error"),
        (KERN_INFO, f"{scsi} CDB: Read(16) 88 00 {lba} 00 00 00 08 00 00"),
        block_io_error(kernel, dev, sector),
        (KERN_ERR, f"{ata}: EH complete"),
    ]


def nvme_read_error(kernel: str, dev: str, lba: int) -> list[tuple[int, str]]:
    """The NVMe driver's line for a read that failed on the media (status code type 2h, Unrecovered Read Error
    81h: NVM Express Base Specification, Media and Data Integrity Errors), in the corpus's wording (its sample
    has a path error, 3h/71h, and the same trailing space), then the block layer's."""
    return [
        (KERN_ERR, f"{dev}: I/O Cmd(0x2) @ LBA {lba}, 8 blocks, I/O Error (sct 0x2 / sc 0x81) "),
        block_io_error(kernel, dev, lba),
    ]


def cmci_storm(kernel: str, cpu: int, bank: int) -> list[tuple[int, str]]:
    """Before Linux 6.8 the storm is per CPU at 15 CMCIs/s (mce/intel.c); from 6.8 per bank (mce/threshold.c)."""
    major, minor = (int(x) for x in kernel.split(".")[:2])
    if (major, minor) >= (6, 8):
        return [(KERN_NOTICE, f"mce: CPU{cpu} BANK{bank} CMCI storm detected")]
    return [(KERN_NOTICE, "mce: CMCI storm detected: switching to poll mode")]


def edac_ue(driver: str, dimm: SimDimm, address: int) -> tuple[int, str]:
    """The EDAC core's line for an uncorrected error (KERN_EMERG in edac_mc_handle_error)."""
    _level, text = edac_ce(driver, dimm, 1, address)
    return (KERN_EMERG, text.replace(" 1 CE ", " 1 UE ", 1))


def edac_ce(driver: str, dimm: SimDimm, errors: int, address: int) -> tuple[int, str]:
    """The EDAC core's line for corrected errors on a DIMM, as edac_mc_handle_error prints it (the driver's
    detail in parentheses, in skx_common's / amd64's wording)."""
    page, offset = address >> 12, address & 0xFFF
    if driver in ("skx_edac", "i10nm_edac"):
        detail = (
            f"channel:{dimm.channel} slot:0 page:0x{page:x} offset:0x{offset:x} grain:32 syndrome:0x0 - "
            f"err_code:0x0000:0x009{dimm.channel:x} socket:{dimm.socket} imc:{dimm.imc} "
            f"rank:0 bg:1 ba:2 row:0x{(address >> 16) & 0x3FFFF:x} col:0x{(address >> 3) & 0x3FF:x}"
        )
        text = f"EDAC MC{dimm.mc}: {errors} CE memory read error on {dimm.label} ({detail})"
    else:
        text = (
            f"EDAC MC{dimm.mc}: {errors} CE on {dimm.label} (csrow:{dimm.row} channel:{dimm.channel} "
            f"page:0x{page:x} offset:0x{offset:x} grain:64 syndrome:0x{address & 0xFFFF:x})"
        )
    return (KERN_WARNING, text)


def kernel_events(records: list[str], boot_at: dt.datetime) -> tuple[list[KernelEvent], int | None, int | None]:
    """Classified events of some kmsg records, with the first and last sequence numbers read."""
    if not records:
        return [], None, None
    state = parse_kernel_log("\n".join(records), "kmsg", boot_time=boot_at).value
    return state.events, state.first_seq, state.last_seq


def sel_line(record_id: int, at: dt.datetime, sensor: str, event: str, direction: str, extra: str = "") -> str:
    """An `ipmitool sel elist` line; the BMC's clock is UTC here."""
    stamp = at.astimezone(dt.UTC)
    line = f"{record_id:4x} | {stamp:%m/%d/%Y} | {stamp:%H:%M:%S} | {sensor} | {event} | {direction}"
    return f"{line} | {extra}" if extra else line


def sel_entries(lines: list[str]) -> list[SelEntry]:
    return parse_ipmitool_sel("\n".join(lines)).value if lines else []
