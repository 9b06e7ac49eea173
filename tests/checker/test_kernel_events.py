"""Kernel log classification: every real kernel-log sample, and every rule of the table."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pytest

from bench.samples import sample, samples_dir
from checker.parsers.kernel_events import RULES, classify, match_line, parse_kernel_log
from checker.parsers.kernel_log import LogLine, parse_log_lines
from checker.schemas import MAX_EVENTS, MAX_LINES_PER_EVENT, KernelEventKind

K = KernelEventKind
REFERENCE = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)


def events_of(name: str) -> list[tuple[KernelEventKind, str | None, int, int]]:
    state = parse_kernel_log(sample(f"kernel-log/{name}"), "file", reference=REFERENCE).value
    assert state.truncated == 0
    return [(e.kind, e.subject, e.count, len(e.lines)) for e in state.events]


def test_dmesg_H_thermal_throttle_per_cpu() -> None:
    events = events_of("dmesg-H-thermal-throttle-no-prefix-relative-ts.log")
    assert [e[0] for e in events] == [K.thermal_throttle] * 10
    assert [e[1] for e in events] == [f"CPU {n}" for n in (5, 1, 0, 4, 3, 7, 1, 5, 2, 6)]


def test_dmesg_T_ata_unc_block_and_req_error() -> None:
    events = events_of("dmesg-T-ata-unc-print-req-error-hdd.log")
    assert events == [(K.block_io_error, "ata1.00", 1, 8), (K.block_io_error, "sda", 1, 1)]
    state = parse_kernel_log(sample("kernel-log/dmesg-T-ata-unc-print-req-error-hdd.log"), "dmesg").value
    assert "error: { UNC }" in "\n".join(state.events[0].lines)
    assert state.events[1].timestamp == dt.datetime(2024, 3, 2, 18, 7, 17, tzinfo=dt.UTC)


def test_dmesg_T_sb_edac_block_is_one_ce_event() -> None:
    events = events_of("dmesg-T-sb-edac-sandybridge-ce-read.log")
    assert events == [(K.mce_logged, None, 1, 1), (K.edac_ce, "CPU_SrcID#0_Ha#0_Chan#2_DIMM#0", 1, 7)]


def test_hard_lockup_panic_keeps_call_trace() -> None:
    state = parse_kernel_log(sample("kernel-log/dmesg-hard-lockup-panic-hp-microserver-gen8-3.10.log"), "dmesg").value
    (event,) = state.events
    assert (event.kind, event.subject) == (K.hard_lockup, "CPU 3")
    assert len(event.lines) == 18
    assert "Hardware name: HP ProLiant MicroServer Gen8, BIOS J06 04/04/2019" in event.lines[2]
    assert "Call Trace:" in event.lines[6]


def test_hung_tasks_one_event_each() -> None:
    events = events_of("dmesg-hung-task-multiple-debian-4.19-tainted.log")
    assert [e[0] for e in events] == [K.hung_task] * 5
    assert [e[1] for e in events] == ["kworker/2:1:5747", "ntpd:11794", "snmpd:12767", "zebra:13083", "fpmsyncd:13094"]
    assert all(e[3] == 3 for e in events)


def test_memory_failure_pages() -> None:
    events = events_of("dmesg-memory-failure-reserved-kernel-page-failed.log")
    assert [(e[0], e[1]) for e in events] == [(K.memory_failure, "0x0")] * 3 + [(K.memory_failure, "0x1")] * 2


def test_nic_link_flap_and_new_netdev_watchdog() -> None:
    events = events_of("dmesg-nic-link-flap-and-netdev-watchdog-new-format.log")
    assert events == [
        (K.nic_link_up, "eth0", 1, 1),
        (K.nic_link_down, "eth0", 1, 1),
        (K.nic_link_up, "eth0", 1, 1),
        (K.nic_tx_timeout, "eth0", 1, 2),  # with the driver's 'TX timeout on queue 12'
        (K.nic_tx_timeout, "eth0", 1, 2),
    ]


def test_aer_old_format_two_corrected_records() -> None:
    events = events_of("dmesg-pcie-aer-corrected-receiver-error-old-format.log")
    assert events == [(K.pcie_aer_corrected, "0000:00:1d.0", 1, 4)] * 2


def test_aer_root_port_and_nvme_endpoint() -> None:
    events = events_of("dmesg-pcie-aer-nvme-endpoint-rxerr.log")
    assert events == [
        (K.pcie_aer_corrected, "0000:00:1d.0", 1, 4),
        (K.pcie_aer_corrected, "0000:00:1d.0", 1, 3),
        (K.pcie_aer_corrected, "0000:03:00.0", 1, 4),
    ]


def test_r8125_tx_timeouts_on_two_ports() -> None:
    events = events_of("dmesg-r8125-netdev-watchdog-pcie-nic.log")
    assert events == [
        (K.nic_tx_timeout, "eth4", 1, 2),
        (K.nic_tx_timeout, "eth1", 1, 2),
        (K.nic_tx_timeout, "eth4", 1, 2),
    ]


def test_soft_lockup_with_wrapped_module_list() -> None:
    events = events_of("dmesg-soft-lockup-supermicro-x10qbi-4.15.log")
    assert events == [(K.soft_lockup, "CPU 51", 1, 11)]


def test_xeon_power_limit_notifications_are_not_heat() -> None:
    """A CPU at its power limit (RAPL) is not one throttled for temperature: no airflow ticket from these."""
    events = events_of("dmesg-xeon-power-limit-notification-and-thermal-throttle-sysfs.txt")
    assert events == []


def test_ghes_memory_errors_and_ghes_edac_lines() -> None:
    events = events_of("ghes-apei-memory-ce-ghes-edac-hisilicon-arm64.log")
    assert events == [
        (K.ghes_error, "0x0000004000000300", 1, 8),
        (K.edac_ce, "MC0", 1, 1),
        (K.ghes_error, "0x0000004000000300", 1, 8),
        (K.edac_ce, "MC0", 1, 1),
        (K.ghes_error, "0x0000004000000300", 1, 7),  # last record cut off as posted
    ]


def test_i7core_ce_burst_counts() -> None:
    events = events_of("kern-log-i7core-edac-ce-burst-cpu0-channel2.log")
    assert events[0][0] == K.mce_logged
    assert [(e[0], e[1]) for e in events[1:]] == [(K.edac_ce, "CPU#0Channel#2_DIMM#0")] * 7
    assert [e[2] for e in events[1:]] == [4, 2, 6, 1, 1, 1, 1]
    assert sum(e[2] for e in events[1:]) == 16


def test_ghes_edac_ce_storm_then_reboot() -> None:
    events = events_of("syslog-ghes-edac-ce-unknown-label-hisilicon.log")
    assert events == [(K.edac_ce, "MC0", 1, 1)] * 6


def test_ghes_recoverable_with_dimm_location_then_poisoned_page() -> None:
    events = events_of("syslog-ghes-recoverable-memory-fru-text-already-poisoned.log")
    assert events == [(K.ghes_error, "CPU 1 DIMM 5", 1, 9), (K.memory_failure, "0xe16677", 1, 1)]


def test_raw_mce_block_and_mcelog_lines_ignored() -> None:
    events = events_of("syslog-mce-hardware-error-raw-bank4-goldmont-plus.log")
    assert events == [(K.mce_logged, None, 1, 1), (K.mce_hardware_error, "CPU 0 Bank 4", 1, 3)]


def test_nvme_controller_down_resets_and_io_errors() -> None:
    events = events_of("syslog-nvme-controller-down-csts-ffffffff-io-error.log")
    assert events == [
        (K.nvme_reset, "nvme0", 1, 3),
        (K.nvme_reset, "nvme0", 1, 3),
        (K.block_io_error, "nvme0n1", 1, 1),
        (K.block_io_error, "nvme0n1", 1, 1),
    ]


def test_sb_edac_scrubbing_ce_on_socket1() -> None:
    events = events_of("syslog-sb-edac-ivybridge-ce-scrubbing.log")
    assert events == [(K.mce_logged, None, 1, 1), (K.edac_ce, "CPU_SrcID#1_Ha#0_Chan#0_DIMM#0", 1, 7)]


def test_every_kernel_log_sample_has_a_test() -> None:
    source = Path(__file__).read_text(encoding="utf-8")
    tested = {name.rsplit("/", 1)[-1] for name in re.findall(r'"([\w.\-/]+\.(?:log|txt))"', source)}
    present = {p.name for p in (samples_dir() / "kernel-log").iterdir()}
    assert present - tested == set()


# -- every rule of the table ----------------------------------------------------------------------

RULE_EXAMPLES: list[tuple[str, KernelEventKind, str | None, int]] = [
    ("EDAC sbridge MC1: HANDLING MCE MEMORY ERROR", K.mce_hardware_error, "MC1", 1),
    (
        "EDAC MC1: 1 CE memory scrubbing error on CPU_SrcID#1_Ha#0_Chan#0_DIMM#0 (channel:0 slot:0 page:0xee30a0 "
        "offset:0x0 grain:32 syndrome:0x0 -  area:DRAM err_code:0008:00c2 socket:1 ha:0 channel_mask:1 rank:0)",
        K.edac_ce,
        "CPU_SrcID#1_Ha#0_Chan#0_DIMM#0",
        1,
    ),
    ("EDAC MC0: 4 CE error on CPU#0Channel#2_DIMM#0 (channel:2 slot:0 page:0x0 offset:0x0 grain:8 syndrome:0x0)",
     K.edac_ce, "CPU#0Channel#2_DIMM#0", 4),
    ("EDAC skx MC2: 3 CE memory read error on CPU_SrcID#0_MC#1_Chan#0_DIMM#0 (channel:0 slot:0 page:0x39ab58)",
     K.edac_ce, "CPU_SrcID#0_MC#1_Chan#0_DIMM#0", 3),
    ("EDAC MC0: 1 CE on mc#0csrow#3channel#0 (csrow:3 channel:0 page:0x10c3c offset:0xec0 grain:64 syndrome:0x1018)",
     K.edac_ce, "mc#0csrow#3channel#0", 1),
    ("EDAC MC0: 1 CE reserved error (16) on unknown label (node:0 rank:0 bank:0 row:0 col:0 page:0x400000 "
     "offset:0x300 grain:0 syndrome:0x0)", K.edac_ce, "MC0", 1),
    ("EDAC MC0: 1 UE memory read error on CPU_SrcID#0_Ha#0_Chan#1_DIMM#0 (channel:1 slot:0 page:0x1234 offset:0x0 "
     "grain:32 syndrome:0x0 - area:DRAM err_code:0001:0091 socket:0 ha:0 channel_mask:2 rank:0)",
     K.edac_ue, "CPU_SrcID#0_Ha#0_Chan#1_DIMM#0", 1),
    ('EDAC MC0: CE page 0x283, offset 0xce0, grain 8, syndrome 0x6ec3, row 0, channel 1 "DIMM_B1": amd76x_edac',
     K.edac_ce, "DIMM_B1", 1),
    ('EDAC MC0: UE row 0, channel-a= 0 channel-b= 0 labels "-": NON_FATAL (addr = 0x0075b980, socket=0, Dimm=0, '
     "Channel=2, syndrome=0x00000040, count=1, Err=8c0000400001009f:4000080482 (read error: read ECC error))",
     K.edac_ue, "MC0", 1),
    ("mce: [Hardware Error]: Machine check events logged", K.mce_logged, None, 1),
    ("{3}[Hardware Error]: Hardware error from APEI Generic Hardware Error Source: 5", K.ghes_error, None, 1),
    ("mce: [Hardware Error]: CPU 0: Machine Check: 0 Bank 4: a600000000020408", K.mce_hardware_error,
     "CPU 0 Bank 4", 1),
    ("[Hardware Error]: CPU 2: Machine Check Exception: 5 Bank 6: b200000000070f0f", K.mce_hardware_error,
     "CPU 2 Bank 6", 1),
    ("mce: CPU11 CMCI storm detected: switching to poll mode", K.cmci_storm, "CPU 11", 1),
    ("Memory failure: 0xe16677: already hardware poisoned", K.memory_failure, "0xe16677", 1),
    ("MCE: Killing qemu-kvm:5678 due to hardware memory corruption fault at 7f3a2c000000", K.memory_failure,
     "7f3a2c000000", 1),
    ("watchdog: BUG: soft lockup - CPU#51 stuck for 22s! [pacd:140354]", K.soft_lockup, "CPU 51", 1),
    ("NMI watchdog: Watchdog detected hard LOCKUP on cpu 7", K.hard_lockup, "CPU 7", 1),
    ("INFO: task kworker/2:1:5747 blocked for more than 120 seconds.", K.hung_task, "kworker/2:1:5747", 1),
    ("BUG: unable to handle kernel NULL pointer dereference at 0000000000000008", K.oops, None, 1),
    ("Unable to handle kernel NULL pointer dereference at virtual address 0000000000000000", K.oops, None, 1),
    ("kernel BUG at mm/slub.c:3901!", K.oops, "mm/slub.c:3901", 1),
    ("general protection fault: 0000 [#1] SMP PTI", K.oops, None, 1),
    ("Internal error: Oops: 96000005 [#1] PREEMPT SMP", K.oops, None, 1),
    ("Kernel panic - not syncing: Fatal machine check", K.panic, "Fatal machine check", 1),
    ("ata1.00: exception Emask 0x0 SAct 0x2000000 SErr 0x0 action 0x0", K.block_io_error, "ata1.00", 1),
    ("print_req_error: I/O error, dev sda, sector 582845656", K.block_io_error, "sda", 1),
    ("blk_update_request: I/O error, dev sdb, sector 1234 op 0x0:(READ) flags 0x0 phys_seg 1 prio class 0",
     K.block_io_error, "sdb", 1),
    ("critical medium error, dev sdc, sector 2048 op 0x0:(READ) flags 0x0 phys_seg 1 prio class 0",
     K.block_io_error, "sdc", 1),
    ("Buffer I/O error on dev sda1, logical block 12345, async page read", K.block_io_error, "sda1", 1),
    ("nvme0n1: I/O Cmd(0x2) @ LBA 32545872, 8 blocks, I/O Error (sct 0x3 / sc 0x71) ", K.block_io_error,
     "nvme0n1", 1),
    ("nvme nvme0: I/O 123 QID 4 timeout, aborting", K.nvme_timeout, "nvme0", 1),
    ("nvme nvme0: controller is down; will reset: CSTS=0xffffffff, PCI_STATUS=0x10", K.nvme_reset, "nvme0", 1),
    ("r8125 0000:22:04.0 eth4: NETDEV WATCHDOG: CPU: 3: transmit queue 0 timed out 5010 ms", K.nic_tx_timeout,
     "eth4", 1),
    ("NETDEV WATCHDOG: eth0 (ixgbe): transmit queue 0 timed out", K.nic_tx_timeout, "eth0", 1),
    ("ixgbe 0000:01:00.0 eth2: NIC Link is Down", K.nic_link_down, "eth2", 1),
    ("e1000e: eth0 NIC Link is Down", K.nic_link_down, "eth0", 1),
    ("ixgbe 0000:01:00.0 eth2: NIC Link is Up 10 Gbps, Flow Control: RX/TX", K.nic_link_up, "eth2", 1),
    ("pcieport 0000:00:1d.0: AER: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)",
     K.pcie_aer_corrected, "0000:00:1d.0", 1),
    ("pcieport 0000:00:03.0: AER: PCIe Bus Error: severity=Uncorrected (Non-Fatal), type=Transaction Layer, "
     "(Requester ID)", K.pcie_aer_uncorrected, "0000:00:03.0", 1),
    ("CPU5: Core temperature above threshold, cpu clock throttled (total events = 2081)", K.thermal_throttle,
     "CPU 5", 1),
    # OS and filesystems (checker/parsers/os_events.py; the samples are in tests/checker/test_os_events.py)
    ("EXT4-fs (sdd1): Remounting filesystem read-only", K.fs_readonly, "sdd1", 1),
    ("XFS (dm-4): I/O Error Detected. Shutting down filesystem", K.fs_readonly, "dm-4", 1),
    ("XFS (dm-0): Filesystem has been shut down due to log error (0x2).", K.fs_readonly, "dm-0", 1),
    ("BTRFS info (device sda1 state EA): forced readonly", K.fs_readonly, "sda1", 1),
    ("FAT-fs (sdb1): Filesystem has been set read-only", K.fs_readonly, "sdb1", 1),
    ("EXT4-fs error (device sdd1): ext4_journal_check_start:83: comm rsync: Detected aborted journal", K.fs_error,
     "sdd1", 1),
    ("EXT4-fs error: 1267 callbacks suppressed", K.fs_error, None, 1267),
    ("XFS (sda1): Metadata corruption detected at xfs_buf_ioend+0x58/0x1e0 [xfs], xfs_inode block 0x1b5c1c0",
     K.fs_error, "sda1", 1),
    ("BTRFS error (device nvme0n1p2): bdev /dev/nvme0n1p2 errs: wr 0, rd 0, flush 0, corrupt 1, gen 0", K.fs_error,
     "nvme0n1p2", 1),
    ("Out of memory: Killed process 4321 (postgres) total-vm:8123456kB, anon-rss:7000000kB, file-rss:0kB, "
     "shmem-rss:0kB, UID:26 pgtables:14000kB oom_score_adj:0", K.oom_kill, "host", 1),  # host-wide
    ("Killed process 2603, UID 0, (java) total-vm:3458092kB, anon-rss:1022232kB, file-rss:232kB", K.oom_kill,
     "unknown", 1),  # its report's head lost: no cgroup known
    ("oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/kubepods/pod1,"
     "task_memcg=/kubepods/pod1,task=java,pid=4321,uid=1000", K.oom_kill, "/kubepods/pod1", 1),
    ("Task in /kubepods/pod1/ctr1 killed as a result of limit of /kubepods/pod1", K.oom_kill, "/kubepods/pod1", 1),
    ("Memory cgroup stats for /kubepods/pod1: cache:32KB rss:524188KB", K.oom_kill, "/kubepods/pod1", 1),
    ("Memory cgroup out of memory: Kill process 24572 (java) score 0 or sacrifice child", K.oom_kill, "unknown", 1),
    ("clocksource: timekeeping watchdog on CPU5: Marking clocksource 'tsc' as unstable because the skew is too "
     "large:", K.clocksource_unstable, "tsc", 1),
    ("Clocksource tsc unstable (delta = -95493823 ns)", K.clocksource_unstable, "tsc", 1),
    # NVIDIA (tests/checker/test_xid.py reads the corpus's GPU logs; these lines are in the driver's wording)
    ("nvidia-nvswitch2: SXid (PCI:0000:88:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error (First)",
     K.gpu_sxid, "0000:88:00.0", 1),
    ("NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.", K.gpu_xid,
     "0000:3b:00.0", 1),
    ("NVRM: GPU at PCI:0000:3b:00: GPU-509665ad-b600-ac93-3616-d754b23d636d", K.gpu_identity, "0000:3b:00.0", 1),
    (r"NVRM: The NVIDIA GPU 0000:b3:00.0\x0aNVRM: (PCI ID: 10de:26b5) installed in this system has\x0aNVRM: "
     "fallen off the bus and is not responding to commands.", K.gpu_fallen_off_bus, "0000:b3:00.0", 1),
    ("NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.", K.gpu_fallen_off_bus, "0000:3b:00.0", 1),
    # CXL (checker/parsers/cxl_log.py; tests/checker/test_cxl_log.py reads the project's own CXL lines)
    ("cxl_pci 0000:36:00.0: mem1: frozen state error detected, disable CXL.mem", K.cxl_mem_disabled,
     "0000:36:00.0", 1),
    ("cxl_pci 0000:37:00.0: failure state error detected, request disconnect", K.cxl_mem_disabled, "0000:37:00.0", 1),
    ("cxl_pci 0000:36:00.0: mem1: memdev disabled, abort error handling", K.cxl_mem_disabled, "0000:36:00.0", 1),
    ("cxl_pci 0000:35:00.0: mailbox timeout (opcode: 0x4300), device state  fatal", K.cxl_device_failed,
     "0000:35:00.0", 1),
    ("cxl_pci 0000:38:00.0: timeout awaiting memory active after 60 seconds", K.cxl_device_failed, "0000:38:00.0", 1),
    ("cxl_pci 0000:36:00.0: mem1: restart CXL.mem after slot reset", K.cxl_mem_resumed, "0000:36:00.0", 1),
    ("cxl_pci 0000:36:00.0: mem1: error resume failed", K.cxl_mem_resumed, "0000:36:00.0", 1),
]  # fmt: skip

NOT_EVENTS = [
    "CPU1: Core temperature/speed normal",
    "CPU0: Package power limit normal",
    "CPU0: Package power limit notification (total events = 1)",
    "CPU0: Core power limit notification (total events = 2)",
    "mce: CPU supports 7 MCE banks",
    "nvme nvme0: 4/0/0 default/read/poll queues",
    "EDAC sbridge MC0: TSC 0",
    "EDAC MC0: Giving out device to module sb_edac controller Haswell SrcID#0_Ha#0: DEV 0000:7f:12.0 (INTERRUPT)",
    "usb 1-1: new high-speed USB device number 2 using xhci_hcd",
    "ipqess-edma c080000.ethernet eth0: entered promiscuous mode",
    "clocksource: Switched to clocksource tsc",
    "tsc: Marking TSC unstable due to check_tsc_sync_source failed",  # boot-time, no watchdog verdict
    "tsc: Marking TSC unstable due to running on Hyper-V",
    "XFS (sda1): Mounting V5 Filesystem",
    "java invoked oom-killer: gfp_mask=0xd0, order=0, oom_score_adj=-998",
    "EXT4-fs (sda1): mounted filesystem with ordered data mode. Opts: (null)",
    "cxl_pci 0000:35:00.0: mailbox timeout (opcode: 0x4300), device state ",  # neither fatal nor halted
    "cxl_pci 0000:36:00.0: poison inject dpa:0x3000 region: region1",  # a test
]


@pytest.mark.parametrize(("message", "kind", "subject", "count"), RULE_EXAMPLES)
def test_rule_example(message: str, kind: KernelEventKind, subject: str | None, count: int) -> None:
    (event,) = classify([LogLine(message=message, raw=message)])
    assert (event.kind, event.subject, event.count) == (kind, subject, count)
    assert event.lines == [message]


def test_every_rule_has_an_example() -> None:
    hits = {id(hit[0]) for message, *_ in RULE_EXAMPLES if (hit := match_line(message)) is not None}
    missing = [rule.pattern.pattern for rule in RULES if id(rule) not in hits]
    assert missing == []


@pytest.mark.parametrize("message", NOT_EVENTS)
def test_ordinary_lines_are_not_events(message: str) -> None:
    assert match_line(message) is None
    assert classify([LogLine(message=message)]) == []


def test_oops_lines_join_one_event_and_panic_follows() -> None:
    text = "\n".join(
        [
            "[  10.000001] BUG: unable to handle kernel NULL pointer dereference at 0000000000000008",
            "[  10.000002] IP: [<ffffffff8118b0a5>] kmem_cache_alloc+0x75/0x1e0",
            "[  10.000003] Oops: 0000 [#1] SMP",
            "[  10.000004] Modules linked in: xfs",
            "[  10.000005] CPU: 2 PID: 1 Comm: init Not tainted 4.4.0 #1",
            "[  10.000006] Call Trace:",
            "[  10.000007]  [<ffffffff8118b0a5>] ? kmem_cache_alloc+0x75/0x1e0",
            "[  10.000008] Kernel panic - not syncing: Fatal exception",
        ]
    )
    events = parse_kernel_log(text, "dmesg").value.events
    assert [(e.kind, len(e.lines)) for e in events] == [(K.oops, 7), (K.panic, 1)]
    assert events[1].subject == "Fatal exception"


def test_trace_is_bounded_to_max_lines_per_event() -> None:
    lines = ["[ 1.0] watchdog: BUG: soft lockup - CPU#1 stuck for 23s! [x:1]", "[ 1.0] Call Trace:"]
    lines += [f"[ 1.0]  func_{n}+0x1/0x2" for n in range(100)]
    events = parse_kernel_log("\n".join(lines), "dmesg").value.events
    assert len(events) == 1
    assert len(events[0].lines) == MAX_LINES_PER_EVENT
    assert events[0].lines_dropped == len(lines) - MAX_LINES_PER_EVENT  # counted, not silently lost


def test_overlong_lines_end_in_a_marker_with_the_count() -> None:
    long_line = "[ 1.0] EDAC MC0: 1 CE memory read error on DIMM_A1 " + "x" * 6000
    (event,) = parse_kernel_log(long_line, "dmesg").value.events
    (kept,) = event.lines
    assert len(kept) <= 4096
    assert kept.endswith(f"…[{len(long_line) - 4056} more chars]")


def test_trace_does_not_swallow_lines_printed_much_later() -> None:
    text = "[ 5.0] INFO: task a:1 blocked for more than 120 seconds.\n[ 9.0]  unrelated indented line\n"
    (event,) = parse_kernel_log(text, "dmesg").value.events
    assert len(event.lines) == 1


def test_events_are_bounded_and_newest_kept() -> None:
    text = "\n".join(f"[ {n}.0] EDAC MC0: {n} CE error on DIMM_A1 (channel:0)" for n in range(1, MAX_EVENTS + 101))
    state = parse_kernel_log(text, "dmesg").value
    assert len(state.events) == MAX_EVENTS
    assert state.truncated == 100
    assert state.events[-1].count == MAX_EVENTS + 100
    assert state.lines_read == MAX_EVENTS + 100


def test_kmsg_source_carries_sequence_numbers() -> None:
    text = (
        "3,77,1000,-;mce: [Hardware Error]: Machine check events logged\n"
        "3,78,1001,-;EDAC MC0: 2 CE memory read error on CPU_SrcID#0_Ha#0_Chan#2_DIMM#0 (channel:2)\n"
    )
    boot = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    state = parse_kernel_log(text, "kmsg", boot_time=boot).value
    assert (state.first_seq, state.last_seq, state.lines_read) == (77, 78, 2)
    assert [(e.kind, e.seq, e.count) for e in state.events] == [(K.mce_logged, 77, 1), (K.edac_ce, 78, 2)]
    assert state.events[1].timestamp == boot + dt.timedelta(microseconds=1001)


def test_other_programs_lines_are_ignored() -> None:
    lines = parse_log_lines("Jan  1 00:00:00 host sshd[1]: Link is Down (not the kernel)\n").value
    assert classify(lines) == []


def test_kernel_doc_legacy_edac_lines() -> None:
    state = parse_kernel_log(sample("edac-sysfs/kernel-doc-ras-rst-excerpts.txt"), "file").value
    assert [(e.kind, e.subject, e.count) for e in state.events] == [
        (K.edac_ce, "DIMM_B1", 1),  # amd76x_edac
        (K.edac_ce, "DIMM_B1", 1),
        (K.edac_ue, "MC0", 1),  # i7core_edac UE with labels "-"
    ]


def test_long_log_keeps_every_hit() -> None:
    """One hit in fifty lines of noise: every hit is found and nothing else (speed is measured in bench/)."""
    noise = "[ 12.345678] usb 1-1: new high-speed USB device number 2 using xhci_hcd"
    hit = "[ 12.345679] EDAC MC0: 1 CE memory read error on CPU_SrcID#0_Ha#0_Chan#2_DIMM#0 (channel:2)"
    text = "\n".join(hit if n % 50 == 0 else noise for n in range(20_000))
    state = parse_kernel_log(text, "dmesg").value
    assert len(state.events) == 400
    assert {e.subject for e in state.events} == {"CPU_SrcID#0_Ha#0_Chan#2_DIMM#0"}
