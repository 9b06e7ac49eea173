"""The OS and filesystem scenarios (rules fs-readonly, fs-readonly-removable, fs-errors,
oom-kills-repeated, clocksource-unstable, time-unsynchronised, clock-offset-large), registered into
tests/decisions/cases.py's CASES.

The kernel lines are the corpus's os-faults samples. The mountinfo, sysfs and chronyc texts are
ours, in the real formats (tests/checker/test_os_state.py says where each format is defined).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from bench.samples import sample
from checker.collectors.filesystems import MOUNTINFO
from checker.collectors.time_sync import CHRONYC
from checker.schemas import Report
from remediator.models import Remediation, Signal
from tests.decisions.cases import case
from tests.decisions.harness import Expect, SnapHost
from ticketing.models import Ticket

EXT4_BACKUP = "os-faults/dmesg-ext4-aborted-journal-remount-ro-callbacks-suppressed.log"
XFS_SHUTDOWN = "os-faults/kernel-xfs-internal-error-corruption-force-shutdown-no-timestamps.log"
MEMCG_OOM = "os-faults/dmesg-T-memcg-oom-kill-sacrifice-child-rhel7-3.10-tail.log"
TSC_UNSTABLE = "os-faults/dmesg-clocksource-tsc-unstable-hpet-watchdog-switch.log"
FS_RULES = frozenset({"fs-readonly", "fs-readonly-removable", "fs-errors"})

ROOT = "22 1 253:0 / / rw,relatime shared:1 - xfs /dev/mapper/rhel-root {opts},attr2,inode64,noquota\n"
DATA = "63 22 253:4 / /data rw,relatime shared:31 - xfs /dev/mapper/vg-data rw,attr2,inode64,noquota\n"
BACKUP = "310 22 8:49 / /media/backup rw,nosuid,nodev,relatime shared:160 - ext4 /dev/sdd1 {opts},errors=remount-ro\n"
HOME = "64 22 8:3 / /home rw,relatime shared:32 - ext4 /dev/sda3 rw,errors=continue\n"
DEVICES = {
    "253:0": ("dm-0", "disk"),
    "253:4": ("dm-4", "disk"),
    "8:49": ("sdd1", "partition"),
    "8:3": ("sda3", "partition"),
}


def mounted(host: SnapHost, *, root: str = "rw", backup: str | None = None, home: bool = False) -> SnapHost:
    """The host's mountinfo, and each device's sysfs uevent (the name its log lines use)."""
    text = ROOT.format(opts=root) + DATA
    text += BACKUP.format(opts=backup) if backup else ""
    text += HOME if home else ""
    host.file(MOUNTINFO, text)
    for number, (name, kind) in DEVICES.items():
        host.file(f"/sys/dev/block/{number}/uevent", f"MAJOR={number.split(':')[0]}\nDEVNAME={name}\nDEVTYPE={kind}\n")
    host.file("/sys/dev/block/253:0/removable", "0\n").file("/sys/dev/block/253:4/removable", "0\n")
    return host


def holds(expected: bool, **part: object) -> Callable[[Session, Remediation | None, Ticket | None], None]:
    """The ticket holds the host or leaves it in service; its evidence names the part as given."""

    def check(_session: Session, _remediation: Remediation | None, ticket: Ticket | None) -> None:
        assert ticket is not None
        assert ticket.holds_host is expected
        named = (ticket.evidence or {}).get("part") or {}
        assert {key: named.get(key) for key in part} == part, named

    return check


@case("XFS on the data disk shuts down after a corruption: drain, then a filesystem ticket", "fs-readonly")
def xfs_data_shutdown(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = mounted(SnapHost(tmp))
    reports = [host.cycle(0)]
    host.kernel_log(sample(XFS_SHUTDOWN))
    reports.append(host.cycle(1))
    expect = Expect(
        "fs-readonly",
        "drain",
        title=r"dm-4 \(/data\)",
        part_type="filesystem",
        part="dm-4",
        also=holds(True, mountpoint="/data", fstype="xfs", source="/dev/mapper/vg-data", disk=None),
        never=frozenset({"fs-errors", "fs-readonly-removable"}),
        never_actions=frozenset({"reboot", "reimage"}),
    )
    return host, reports, expect


@case("the root filesystem shows ro under an rw mount, its log lines long gone: drain and ticket", "fs-readonly")
def root_forced_readonly(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = mounted(SnapHost(tmp), root="ro")
    return host, [host.cycle(0)], Expect("fs-readonly", "drain", title=r"dm-0 \(/\)", part_type="filesystem")


@case(
    "a USB backup disk's ext4 journal aborts and it goes read-only: a ticket, the host stays in service",
    "fs-readonly-removable",
)
def ext4_backup_disk(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = mounted(SnapHost(tmp), backup="ro")
    reports = [host.cycle(0)]
    host.kernel_log(sample(EXT4_BACKUP))
    reports.append(host.cycle(1))
    expect = Expect(
        "fs-readonly-removable",
        "ticket",
        title=r"sdd1 \(/media/backup\)",
        part_type="filesystem",
        part="sdd1",
        also=holds(False, mountpoint="/media/backup", fstype="ext4", read_only=True, disk="sdd"),
        never=frozenset({"fs-readonly", "fs-errors"}),
        never_actions=frozenset({"drain"}),
    )
    return host, reports, expect


@case("ext4 errors on /home with errors=continue, still writable: a ticket, no drain", "fs-errors")
def ext4_errors_continue(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = mounted(SnapHost(tmp), home=True)
    reports = [host.cycle(0)]
    line = "EXT4-fs error (device sda3): ext4_lookup:1601: inode #131: comm find: deleted inode referenced: 7"
    host.kernel_log(f"[  700.100000] {line}\n[  700.200000] {line}\n")
    reports.append(host.cycle(1))
    expect = Expect(
        "fs-errors",
        "ticket",
        title=r"sda3 \(/home\)",
        part_type="filesystem",
        also=holds(False),
        never=frozenset({"fs-readonly", "fs-readonly-removable"}),
        never_actions=frozenset({"drain"}),
    )
    return host, reports, expect


@case(
    "memory-cgroup OOM kills, five in a day: a ticket to the workload's owners, host in service", "oom-kills-repeated"
)
def oom_kills(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    reports = [host.cycle(0)]
    for minute in range(1, 6):
        host.kernel_log(sample(MEMCG_OOM))
        reports.append(host.cycle(minute * 10))
    title = r"memory cgroup /kubepods/pod95387fa4-\S+ hit its limit 5 times in a day \(last killed: java\)"
    expect = Expect(
        "oom-kills-repeated",
        "ticket",
        title=title,
        part_type="workload",
        also=holds(False, scope="cgroup", constraint="CONSTRAINT_MEMCG", victims=["java"]),
        never=frozenset({"oom-host-wide"}),
    )
    return host, reports, expect


@case("two OOM kills in a day: counted, no ticket", None)
def oom_kills_few(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    reports = [host.cycle(0)]
    for minute in (1, 2):
        host.kernel_log(sample(MEMCG_OOM))
        reports.append(host.cycle(minute * 10))
    return host, reports, Expect(None)


@case("the watchdog marks the TSC unstable and switches to hpet: a ticket, host in service", "clocksource-unstable")
def tsc_unstable(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    reports = [host.cycle(0)]
    host.kernel_log(sample(TSC_UNSTABLE))
    reports.append(host.cycle(1))
    expect = Expect("clocksource-unstable", "ticket", title="marked its tsc clocksource unstable", also=holds(False))
    return host, reports, expect


CHRONY_UNSYNCED = (
    "00000000,,0,0.000000000,0.000000000,0.000000000,0.000000000,-12.345,0.000,0.000,1.000000000,1.000000000,"
    "0.0,Not synchronised\n"
)
CHRONY_SYNCED = (
    "A9FEA97B,169.254.169.123,4,1788249600.0,-0.000012345,0.000003210,0.000021987,-12.345,-0.001,0.012,"
    "0.000512345,0.000234567,64.4,Normal\n"
)
CHRONY_BEHIND = CHRONY_SYNCED.replace("-0.000012345", "2.500000000")


@case("chrony has had no source for over an hour: a ticket", "time-unsynchronised")
def chrony_unsynchronised(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    host.snap.command(CHRONYC, CHRONY_UNSYNCED)
    reports = [host.cycle(minute) for minute in (0, 30, 61, 70)]
    return host, reports, Expect("time-unsynchronised", "ticket", title=r"not synchronised for an hour \(chrony\)")


@case("chrony without a source for 20 minutes, then synchronised: nothing", None)
def chrony_recovers(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    host.snap.command(CHRONYC, CHRONY_UNSYNCED)
    reports = [host.cycle(0), host.cycle(10), host.cycle(20)]
    host.snap.command(CHRONYC, CHRONY_SYNCED)
    reports += [host.cycle(minute) for minute in (30, 61, 90)]
    return host, reports, Expect(None)


@case("chrony synchronised but 2.5 s behind for 40 minutes: a ticket", "clock-offset-large")
def clock_behind(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    host.snap.command(CHRONYC, CHRONY_BEHIND)
    reports = [host.cycle(minute) for minute in (0, 15, 31, 40)]
    expect = Expect(
        "clock-offset-large", "ticket", title=r"clock 2\.5 s off NTP time", never=frozenset({"time-unsynchronised"})
    )
    return host, reports, expect


# -- after the review (M1-M5, S3-S9): what must not drain, count or ticket ------------------------------------------

USB_SDD = "/sys/devices/pci0000:00/0000:00:14.0/usb2/2-1/2-1:1.0/host6/target6:0:0/6:0:0:0/block/sdd"


def realpaths(host: SnapHost, paths: dict[str, str]) -> SnapHost:
    """Where the host's symlinks resolve, as `fleetfix snapshot` records them (checker/snapshot.py)."""
    (host.snap.directory / "realpaths.json").write_text(json.dumps(paths), encoding="utf-8")
    return host


@case(
    "a USB backup disk at /mnt/backup whose enclosure says removable=0 goes read-only: a ticket, no drain (M2)",
    "fs-readonly-removable",
)
def usb_backup_not_under_media(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    mount = "310 22 8:49 / /mnt/backup rw,nosuid,nodev,relatime shared:160 - ext4 /dev/sdd1 ro,errors=remount-ro\n"
    host.snap.file(MOUNTINFO, ROOT.format(opts="rw") + mount)
    host.snap.file("/sys/dev/block/8:49/uevent", "MAJOR=8\nDEVNAME=sdd1\nDEVTYPE=partition\n")
    host.snap.file("/sys/dev/block/253:0/uevent", "MAJOR=253\nDEVNAME=dm-0\nDEVTYPE=disk\n")
    host.snap.file("/sys/block/sdd/removable", "0\n")  # the SCSI RMB bit most USB enclosures leave clear
    realpaths(host, {"/sys/dev/block/8:49": f"{USB_SDD}/sdd1"})
    reports = [host.cycle(0)]
    host.kernel_log(sample(EXT4_BACKUP))
    reports.append(host.cycle(1))
    expect = Expect(
        "fs-readonly-removable",
        "ticket",
        title=r"sdd1 \(/mnt/backup\)",
        part_type="filesystem",
        also=holds(False, mountpoint="/mnt/backup", removable=True, disk="sdd"),
        never=frozenset({"fs-readonly", "fs-errors"}),
        never_actions=frozenset({"drain"}),
    )
    return host, reports, expect


@case("a btrfs root subvolume on LUKS forced read-only: drain and a ticket, never 'removable' (M1)", "fs-readonly")
def btrfs_subvolume_root(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    luks = "/dev/mapper/luks-0f1e2d3c"
    host.snap.file(
        MOUNTINFO,
        f"62 1 0:26 /root / rw,relatime shared:1 - btrfs {luks} ro,seclabel,compress=zstd:1,ssd,subvol=/root\n"
        f"63 62 0:26 /home /home rw,relatime shared:2 - btrfs {luks} ro,seclabel,compress=zstd:1,ssd,subvol=/home\n",
    )
    host.snap.file("/sys/fs/btrfs/0f1e2d3c-5b6a-4d3e-8f90-0a1b2c3d4e5f/devices/.fleetfix-entries", "dm-0\n")
    realpaths(host, {luks: "/dev/dm-0", "/sys/class/block/dm-0": "/sys/devices/virtual/block/dm-0"})
    reports = [host.cycle(0)]
    host.kernel_log(
        "[  900.100000] BTRFS: error (device dm-0 state A) in btrfs_run_delayed_refs:2124: errno=-5 IO failure\n"
        "[  900.100100] BTRFS info (device dm-0 state EA): forced readonly\n"
    )
    reports.append(host.cycle(1))
    expect = Expect(
        "fs-readonly",
        "drain",
        title=r"dm-0 \(/\)",
        part_type="filesystem",
        also=holds(True, mountpoint="/", fstype="btrfs", source=luks),
        never=frozenset({"fs-readonly-removable"}),
        never_actions=frozenset({"reboot", "reimage"}),
    )
    return host, reports, expect


@case(
    "a Ceph RBD volume under /var/lib/kubelet goes read-only: a storage ticket, no drain, no technician (M3)",
    "fs-readonly-remote",
)
def rbd_volume_readonly(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    volume = "/var/lib/kubelet/pods/7c1f/volumes/kubernetes.io~csi/pvc-9a2b/mount"
    host.snap.file(
        MOUNTINFO, ROOT.format(opts="rw") + f"501 22 252:0 / {volume} rw,relatime shared:201 - ext4 /dev/rbd0 rw\n"
    )
    host.snap.file("/sys/dev/block/252:0/uevent", "MAJOR=252\nDEVNAME=rbd0\nDEVTYPE=disk\n")
    reports = [host.cycle(0)]
    host.kernel_log(
        "[  900.100000] EXT4-fs error (device rbd0): ext4_journal_check_start:83: comm postgres: "
        "Detected aborted journal\n"
        "[  900.100100] EXT4-fs (rbd0): Remounting filesystem read-only\n"
    )
    reports.append(host.cycle(1))
    expect = Expect(
        "fs-readonly-remote",
        "ticket",
        title=r"network volume rbd0",
        part_type="filesystem",
        also=holds(False, mountpoint=volume, disk=None),
        never=frozenset({"fs-readonly", "fs-readonly-removable"}),
        never_actions=frozenset({"drain"}),
    )
    return host, reports, expect


@case("boot-time 'Marking TSC unstable due to running on Hyper-V': nothing (M4)", None)
def tsc_hyperv_boot(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    reports = [host.cycle(0)]
    host.kernel_log(
        "[    0.000000] tsc: Marking TSC unstable due to running on Hyper-V\n"
        "[    0.400000] tsc: Marking TSC unstable due to check_tsc_sync_source failed\n"
        "[    0.800000] clocksource: Switched to clocksource hyperv_clocksource_tsc_page\n"
    )
    reports.append(host.cycle(1))
    return host, reports, Expect(None)


@case("the clocksource watchdog's verdict in a Hyper-V VM: counted, no ticket (M4)", None)
def tsc_watchdog_in_vm(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    # The corpus's Supermicro dmidecode with its System Information as Hyper-V's (our edit of two lines).
    guest = sample(SUPERMICRO).replace("Manufacturer: Supermicro\n\tProduct Name: X9DRT-P", HYPERV, 1)
    assert HYPERV in guest
    host.snap.command(["dmidecode", "-t", "bios", "-t", "system"], guest)
    reports = [host.cycle(0)]
    host.kernel_log(sample(TSC_UNSTABLE))
    reports.append(host.cycle(1))
    return host, reports, Expect(None, never=frozenset({"clocksource-unstable"}))


SUPERMICRO = "dmi/dmidecode-full-supermicro-ami-3.0b.txt"
HYPERV = "Manufacturer: Microsoft Corporation\n\tProduct Name: Virtual Machine"
POD = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{n}.slice"


def memcg_oom(at: float, pod: str, comm: str, pids: list[int], *, group: bool = False) -> str:
    """One OOM in 6.x wording (mm/oom_kill.c): the report's head, its summary, the kills."""
    text = (
        f"[{at:11.6f}] {comm} invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=936\n"
        f"[{at + 0.000001:11.6f}] memory: usage 4194304kB, limit 4194304kB, failcnt 2113\n"
        f"[{at + 0.000002:11.6f}] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0-1,"
        f"oom_memcg={pod},task_memcg={pod}/cri-containerd-1.scope,task={comm},pid={pids[0]},uid=1000\n"
    )
    for n, pid in enumerate(pids):
        if n == 1 and group:
            text += f"[{at + 0.000003:11.6f}] Tasks in {pod} are going to be killed due to memory.oom.group set\n"
        text += (
            f"[{at + 0.00001 * (n + 1):11.6f}] Memory cgroup out of memory: Killed process {pid} ({comm}) "
            "total-vm:8123456kB, anon-rss:4170112kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:9104kB\n"
        )
    return text


def global_oom(at: float, comm: str, pid: int) -> str:
    return (
        f"[{at:11.6f}] {comm} invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE), order=0, oom_score_adj=0\n"
        f"[{at + 0.000002:11.6f}] oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0-1,"
        f"global_oom,task_memcg=/system.slice/{comm}.service,task={comm},pid={pid},uid=0\n"
        f"[{at + 0.00001:11.6f}] Out of memory: Killed process {pid} ({comm}) total-vm:1234567kB, "
        "anon-rss:1000000kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:2000kB oom_score_adj:0\n"
    )


@case("one memory.oom.group OOM kills a pod's 5 tasks: one OOM, no ticket (M5)", None)
def oom_group_one_oom(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    reports = [host.cycle(0)]
    host.kernel_log(memcg_oom(700.0, POD.format(n="a1"), "nginx", [4001, 4002, 4003, 4004, 4005], group=True))
    reports.append(host.cycle(1))
    return host, reports, Expect(None)


@case("five different pods hit their own limits once each: no ticket (M5)", None)
def oom_five_pods_once(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    reports = [host.cycle(0)]
    for n in range(5):
        host.kernel_log(memcg_oom(700.0 + 60 * n, POD.format(n=f"p{n}"), "java", [5000 + n]))
        reports.append(host.cycle(1 + n))
    return host, reports, Expect(None)


@case(
    "the host runs out of memory twice, sshd killed: a host ticket in service, no workload ticket (S4)", "oom-host-wide"
)
def oom_host_wide(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    reports = [host.cycle(0)]
    host.kernel_log(global_oom(700.0, "java", 812) + global_oom(760.0, "sshd", 913))
    reports.append(host.cycle(1))
    expect = Expect(
        "oom-host-wide",
        "ticket",
        title=r"ran out of memory 2 times in a day \(CONSTRAINT_NONE, last killed: sshd\)",
        part_type="host",
        also=holds(False),
        never=frozenset({"oom-kills-repeated"}),
        never_actions=frozenset({"drain"}),
    )
    return host, reports, expect


@case("a container hits its own limit twice: the orchestrator's business, no host ticket (M5, S4)", None)
def oom_container_twice(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    reports = [host.cycle(0)]
    host.kernel_log(
        memcg_oom(700.0, POD.format(n="c1"), "java", [6001]) + memcg_oom(760.0, POD.format(n="c1"), "java", [6002])
    )
    reports.append(host.cycle(1))
    return host, reports, Expect(None)


@case("ext4 errors=panic panics twice on the data disk: the filesystem's ticket, never a reimage (S6)", "fs-readonly")
def ext4_panics_twice(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = mounted(SnapHost(tmp))
    reports = [host.cycle(0)]
    for minute in (1, 2):
        host.kernel_log(
            f"[  {700 + minute}.000000] Kernel panic - not syncing: EXT4-fs (device dm-4): panic forced after error\n"
        )
        reports.append(host.cycle(minute))
    expect = Expect(
        "fs-readonly",
        "drain",
        title=r"dm-4 \(/data\)",
        part_type="filesystem",
        never=frozenset({"kernel-panic-repeated", "hardware-fatal-panic"}),
        never_actions=frozenset({"reimage", "reboot"}),
    )
    return host, reports, expect


CHRONY_LOCAL = "7F7F0101,,10,1788249600.0,0.000000000,0.0,0.0,0.000,0.000,0.000,0.0,0.0,64.0,Normal\n"


@case("chrony serves its own clock (`local stratum 10`) on an isolated network: nothing (S7)", None)
def chrony_local_clock(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    host.snap.command(CHRONYC, CHRONY_LOCAL)
    reports = [host.cycle(minute) for minute in (0, 30, 61, 70)]
    return host, reports, Expect(None)


@case("chrony synchronised but 2.5 s ahead (a negative offset) for 40 minutes: a ticket (S5)", "clock-offset-large")
def clock_ahead(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    host.snap.command(CHRONYC, CHRONY_SYNCED.replace("-0.000012345", "-2.500000000"))
    reports = [host.cycle(minute) for minute in (0, 15, 31, 40)]
    return host, reports, Expect("clock-offset-large", "ticket", title=r"clock 2\.5 s off NTP time")


@case("a host short of DIMMs runs out of memory twice: the capacity ticket, no OOM ticket beside it (S3)", None)
def oom_host_short_of_dimms(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    host.labels = {"capacity.dimms": "99"}  # the inventory says far more DIMMs than dmidecode lists
    reports = [host.cycle(0)]
    host.kernel_log(global_oom(700.0, "java", 812) + global_oom(760.0, "sshd", 913))
    reports.append(host.cycle(1))
    expect = Expect(
        "capacity-dimm-missing",
        "ticket",
        never=frozenset({"oom-host-wide", "oom-kills-repeated"}),
        also=host_oom_noted_lost_memory,
    )
    return host, reports, expect


def host_oom_noted_lost_memory(session: Session, _remediation: Remediation | None, _ticket: Ticket | None) -> None:
    """The two host-wide OOMs were counted, and their signal carries the capacity finding that held the rule."""
    oom = session.scalars(select(Signal).where(Signal.kind == "oom_events", Signal.subject == "host")).all()
    assert oom
    assert oom[-1].value == 2.0, [(s.value, s.detail) for s in oom]
    assert oom[-1].detail["lost_memory"] is True
    assert "dimms:" in oom[-1].detail["capacity_missing"]
