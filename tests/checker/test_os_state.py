"""The time_sync and filesystems collectors and their parsers.

No chrony, timedatectl or mountinfo sample is in the corpus: the texts below are the project's own,
written in the tools' real formats (chronyc's CSV field order as `chronyc tracking` prints them,
client.c; `timedatectl show`'s properties; mountinfo per Documentation/filesystems/proc.rst).
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

from bench.samples import SnapshotBuilder
from checker.collectors import filesystems, time_sync
from checker.parsers.mountinfo import parse_mountinfo
from checker.parsers.time_sync import parse_chronyc_tracking, parse_timedatectl_show

CHRONY_SYNCED = (
    "A9FEA97B,169.254.169.123,4,1764220680.123456789,-0.000012345,0.000003210,0.000021987,-12.345,-0.001,0.012,"
    "0.000512345,0.000234567,64.4,Normal\n"
)
CHRONY_UNSYNCED = (
    "00000000,,0,0.000000000,0.000000000,0.000000000,0.000000000,-12.345,0.000,0.000,1.000000000,1.000000000,"
    "0.0,Not synchronised\n"
)
CHRONY_LOCAL = "7F7F0101,,10,1764220680.000000000,0.000000000,0.0,0.0,0.000,0.000,0.000,0.0,0.0,64.0,Normal\n"
CHRONY_OFF = (  # synchronised, but 2.5 s behind and still slewing (a step refused after makestep's first updates)
    "C0A80001,192.168.0.1,3,1764220680.5,2.500000000,2.4,1.2,-3.000,0.100,0.500,0.010,0.020,128.0,Normal\n"
)
TIMEDATECTL = (
    "Timezone=Etc/UTC\nLocalRTC=no\nCanNTP=yes\nNTP=yes\nNTPSynchronized=no\n"
    "TimeUSec=Fri 2026-11-27 05:18:00 UTC\nRTCTimeUSec=Fri 2026-11-27 05:18:00 UTC\n"
)
MOUNTINFO = (
    "22 1 253:0 / / rw,relatime shared:1 - xfs /dev/mapper/rhel-root rw,seclabel,attr2,inode64,noquota\n"
    "24 22 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw\n"
    "61 22 8:1 / /boot rw,relatime shared:29 - xfs /dev/sda1 rw,seclabel,attr2,inode64,noquota\n"
    "63 22 253:4 / /data rw,relatime shared:31 - xfs /dev/mapper/vg-data rw,attr2,inode64,noquota\n"
    "310 22 8:49 / /media/backup\\040disk rw,nosuid,nodev,relatime shared:160 - ext4 /dev/sdd1 ro,errors=remount-ro\n"
    "400 22 253:0 /var/lib/kubelet /var/lib/kubelet rw,relatime shared:1 - xfs /dev/mapper/rhel-root rw,attr2\n"
    "401 22 0:45 / /srv rw,relatime shared:40 - btrfs /dev/nvme0n1p2 rw,ssd,space_cache=v2,subvolid=5,subvol=/\n"
    "402 22 8:2 / /mnt/iso ro,relatime shared:41 - iso9660 /dev/sda2 ro\n"
)


def test_chronyc_synchronised() -> None:
    parsed = parse_chronyc_tracking(CHRONY_SYNCED)
    assert parsed.problems == []
    sync = parsed.value
    assert sync is not None
    assert (sync.synchronised, sync.reference, sync.stratum, sync.leap_status) == (
        True,
        "169.254.169.123",
        4,
        "Normal",
    )
    assert sync.offset_s == -0.000012345
    assert sync.reference_time == dt.datetime(2025, 11, 27, 5, 18, 0, 123457, tzinfo=dt.UTC)


def test_chronyc_unsynchronised_and_local_clock_only() -> None:
    unsynced = parse_chronyc_tracking(CHRONY_UNSYNCED).value
    assert unsynced is not None
    assert (unsynced.synchronised, unsynced.reference, unsynced.stratum) == (False, None, 0)
    assert unsynced.reference_time is None
    local = parse_chronyc_tracking(CHRONY_LOCAL).value
    assert local is not None
    assert local.synchronised is False


def test_chronyc_garbage_is_a_problem_not_a_value() -> None:
    parsed = parse_chronyc_tracking("506 Cannot talk to daemon\n")
    assert parsed.value is None
    assert parsed.problems
    assert parse_chronyc_tracking(CHRONY_SYNCED.replace("-0.000012345", "nan")).value.offset_s is None  # type: ignore[union-attr]


def test_timedatectl_show() -> None:
    sync = parse_timedatectl_show(TIMEDATECTL).value
    assert sync is not None
    assert (sync.source, sync.synchronised, sync.ntp_enabled) == ("timedatectl", False, True)
    assert parse_timedatectl_show("Timezone=UTC\n").value is None


def test_mountinfo_fields_escapes_and_forced_read_only() -> None:
    entries = parse_mountinfo(MOUNTINFO).value
    assert len(entries) == 8
    backup = entries[4]
    assert (backup.mountpoint, backup.source, backup.fstype) == ("/media/backup disk", "/dev/sdd1", "ext4")
    assert backup.read_only
    assert backup.forced_read_only
    iso = entries[7]
    assert iso.read_only
    assert not iso.forced_read_only
    assert not entries[0].read_only


def _sysfs(snap: SnapshotBuilder, tmp: Path) -> None:
    """/sys/dev/block/M:m as the kernel has it: symlinks into the block tree (a partition inside its disk)."""
    devices = {"253:0": "dm-0", "8:1": "sda/sda1", "253:4": "dm-4", "8:49": "sdd/sdd1", "8:2": "sda/sda2"}
    for number, where in devices.items():
        name = where.rsplit("/", 1)[-1]
        kind = "partition" if "/" in where else "disk"
        snap.file(f"/sys/block/{where}/uevent", f"MAJOR={number.split(':')[0]}\nDEVNAME={name}\nDEVTYPE={kind}\n")
    snap.file("/sys/block/sda/removable", "0\n").file("/sys/block/sdd/removable", "1\n")
    snap.file("/sys/block/dm-0/removable", "0\n").file("/sys/block/dm-4/removable", "0\n")
    (tmp / "snap" / "root" / "sys" / "dev" / "block").mkdir(parents=True)
    for number, where in devices.items():
        os.symlink(
            tmp / "snap" / "root" / "sys" / "block" / where, tmp / "snap" / "root" / "sys" / "dev" / "block" / number
        )


def test_filesystems_collector_names_devices_as_the_kernel_log_does(tmp_path: Path) -> None:
    snap = SnapshotBuilder(tmp_path / "snap").file("/proc/self/mountinfo", MOUNTINFO)
    _sysfs(snap, tmp_path)
    report = snap.cycle(collectors={"filesystems": filesystems.collect})
    assert report.collectors["filesystems"].status == "ok", report.collectors["filesystems"]
    state = report.observations.filesystems
    assert state is not None
    shape = [(m.mountpoint, m.device, m.fstype, m.read_only, m.forced_read_only, m.removable) for m in state.mounts]
    assert shape == [
        ("/", "dm-0", "xfs", False, False, None),  # a dm volume is what its disks are: no slaves/ here, unknown
        ("/boot", "sda1", "xfs", False, False, False),
        ("/data", "dm-4", "xfs", False, False, None),
        ("/media/backup disk", "sdd1", "ext4", True, True, True),
        ("/srv", "nvme0n1p2", "btrfs", False, False, None),  # btrfs: anonymous device number, named by its source
        ("/mnt/iso", "sda2", "iso9660", True, False, False),
    ]  # the bind mount of / at /var/lib/kubelet and /proc are left out


def test_time_sync_prefers_chrony_then_timedatectl_then_says_why_not(tmp_path: Path) -> None:
    only = {"time_sync": time_sync.collect}
    chrony = SnapshotBuilder(tmp_path / "a").command(time_sync.CHRONYC, CHRONY_SYNCED)
    report = chrony.cycle(collectors=only)
    assert report.collectors["time_sync"].source == "chrony"
    assert report.observations.time_sync is not None
    assert report.observations.time_sync.synchronised
    fallback = SnapshotBuilder(tmp_path / "b").command(time_sync.CHRONYC, "", rc=1, stderr="506 Cannot talk to daemon")
    fallback.command(time_sync.TIMEDATECTL, TIMEDATECTL)
    report = fallback.cycle(collectors=only)
    assert report.collectors["time_sync"].source == "timedatectl"
    assert report.observations.time_sync is not None
    assert not report.observations.time_sync.synchronised
    assert any("506 Cannot talk to daemon" in p for p in report.collectors["time_sync"].problems)
    neither = SnapshotBuilder(tmp_path / "c").cycle(collectors=only)
    assert neither.collectors["time_sync"].status == "unavailable"
    assert neither.observations.time_sync is None


def _link(snap: SnapshotBuilder, tmp: Path, link: str, target: str) -> None:
    """A symlink inside the snapshot's tree, as sysfs and /dev/mapper have them (SnapshotHost.resolve follows it)."""
    root = tmp / "snap" / "root"
    (root / target.lstrip("/")).mkdir(parents=True, exist_ok=True)
    (root / link.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
    os.symlink(root / target.lstrip("/"), root / link.lstrip("/"))


USB = "/sys/devices/pci0000:00/0000:00:14.0/usb2/2-1/2-1:1.0/host6/target6:0:0/6:0:0:0/block/sdd"
ISCSI = "/sys/devices/platform/host3/session1/target3:0:0/3:0:0:0/block/sdb"


def _disk(snap: SnapshotBuilder, tmp: Path, number: str, path: str, *, removable: str = "0") -> None:
    name = path.rsplit("/", 1)[-1]
    partition = name[-1].isdigit() and not name.startswith(("dm-", "rbd"))
    snap.file(f"{path}/uevent", f"DEVNAME={name}\nDEVTYPE={'partition' if partition else 'disk'}\n")
    if partition:
        snap.file(f"{path}/partition", "1\n")
    disk = path.rsplit("/", 2)[-2] if partition else name
    snap.file(f"/sys/block/{disk}/removable", f"{removable}\n")
    _link(snap, tmp, f"/sys/dev/block/{number}", path)
    _link(snap, tmp, f"/sys/class/block/{name}", path)


def test_a_usb_disk_reporting_removable_0_at_mnt_backup_is_removable_by_its_bus(tmp_path: Path) -> None:
    """M2: most USB enclosures leave the SCSI removable bit 0; the sysfs path shows the USB bus. Before: False."""
    text = "310 22 8:49 / /mnt/backup rw,relatime shared:160 - ext4 /dev/sdd1 rw,errors=remount-ro\n"
    snap = SnapshotBuilder(tmp_path / "snap").file("/proc/self/mountinfo", text)
    _disk(snap, tmp_path, "8:49", f"{USB}/sdd1")
    (mount,) = snap.cycle(collectors={"filesystems": filesystems.collect}).observations.filesystems.mounts  # type: ignore[union-attr]
    assert (mount.mountpoint, mount.device, mount.removable, mount.remote) == ("/mnt/backup", "sdd1", True, False)


def test_luks_on_a_usb_disk_is_removable_through_its_slaves(tmp_path: Path) -> None:
    text = "311 22 253:3 / /mnt/vault rw,relatime shared:161 - ext4 /dev/mapper/vault rw\n"
    snap = SnapshotBuilder(tmp_path / "snap").file("/proc/self/mountinfo", text)
    _disk(snap, tmp_path, "253:3", "/sys/devices/virtual/block/dm-3")
    _disk(snap, tmp_path, "8:49", f"{USB}/sdd1")
    snap.file("/sys/devices/virtual/block/dm-3/slaves/.fleetfix-entries", "sdd1\n")
    (mount,) = snap.cycle(collectors={"filesystems": filesystems.collect}).observations.filesystems.mounts  # type: ignore[union-attr]
    assert (mount.device, mount.removable, mount.remote) == ("dm-3", True, False)


def test_iscsi_and_rbd_volumes_are_remote(tmp_path: Path) -> None:
    """M3: an iSCSI session's disk and a Ceph RBD device are the network's storage, not the host's."""
    text = (
        "500 22 8:16 / /var/lib/kubelet/plugins/kubernetes.io/iscsi/iface-default/10.0.0.5:3260-iqn.x-lun-0 "
        "rw,relatime shared:200 - ext4 /dev/sdb rw\n"
        "501 22 252:0 / /var/lib/kubelet/pods/abc/volumes/kubernetes.io~csi/pvc-1/mount rw,relatime shared:201 "
        "- ext4 /dev/rbd0 rw\n"
    )
    snap = SnapshotBuilder(tmp_path / "snap").file("/proc/self/mountinfo", text)
    _disk(snap, tmp_path, "8:16", ISCSI)
    _disk(snap, tmp_path, "252:0", "/sys/devices/virtual/block/rbd0")
    mounts = snap.cycle(collectors={"filesystems": filesystems.collect}).observations.filesystems.mounts  # type: ignore[union-attr]
    assert [(m.device, m.remote) for m in mounts] == [("sdb", True), ("rbd0", True)]


def test_a_btrfs_subvolume_root_on_luks_is_kept_and_named_as_the_kernel_names_it(tmp_path: Path) -> None:
    """M1: Fedora's btrfs root is a subvolume (root field /root), on LUKS (source /dev/mapper/luks-…): before,
    it was left out as a bind mount and the log's dm-0 found no mount. Its subvolume mounts stay one."""
    luks = "/dev/mapper/luks-0f1e2d3c"
    text = (
        f"62 1 0:26 /root / rw,relatime shared:1 - btrfs {luks} rw,seclabel,compress=zstd:1,ssd,subvol=/root\n"
        f"63 62 0:26 /home /home rw,relatime shared:2 - btrfs {luks} rw,seclabel,compress=zstd:1,ssd,subvol=/home\n"
        "64 62 0:27 /@data /data rw,relatime shared:3 - btrfs /dev/sdc rw,space_cache=v2,subvol=/@data\n"
    )
    snap = SnapshotBuilder(tmp_path / "snap").file("/proc/self/mountinfo", text)
    _disk(snap, tmp_path, "253:0", "/sys/devices/virtual/block/dm-0")
    _link(snap, tmp_path, luks, "/dev/dm-0")
    _disk(snap, tmp_path, "8:32", "/sys/devices/pci0000:00/0000:00:17.0/ata3/host2/target2:0:0/2:0:0:0/block/sdc")
    snap.file("/sys/fs/btrfs/0f1e2d3c-aaaa/devices/.fleetfix-entries", "dm-0\n")
    snap.file("/sys/fs/btrfs/9a8b7c6d-bbbb/devices/.fleetfix-entries", "sdc\nsdd\n")
    mounts = snap.cycle(collectors={"filesystems": filesystems.collect}).observations.filesystems.mounts  # type: ignore[union-attr]
    assert [(m.mountpoint, m.device, m.devices, m.fstype) for m in mounts] == [
        ("/", "dm-0", [], "btrfs"),
        ("/data", "sdc", ["sdd"], "btrfs"),  # a two-device filesystem: its log lines may name either
    ]


def test_a_snapshot_of_a_host_with_partitions_keeps_its_filesystems_and_replays_them(tmp_path: Path) -> None:
    """S1: the collector read /sys/dev/block/M:m/../removable, which the recorder refuses ('..'): the section
    was dropped from `fleetfix snapshot`. Now it resolves the link, and the recording replays the same."""
    from checker.collectors.base import SnapshotHost
    from checker.cycle import run_cycle
    from checker.snapshot import capture

    text = "310 22 8:49 / /mnt/backup rw,relatime shared:160 - ext4 /dev/sdd1 rw,errors=remount-ro\n"
    snap = SnapshotBuilder(tmp_path / "snap").file("/proc/self/mountinfo", text)
    _disk(snap, tmp_path, "8:49", f"{USB}/sdd1", removable="0")
    only = {"filesystems": filesystems.collect}
    report, _ = capture(tmp_path / "recorded", hostname="h", inner=snap.host(), collectors=only)
    assert report.collectors["filesystems"].status == "ok", report.collectors["filesystems"]
    replayed = run_cycle(SnapshotHost(tmp_path / "recorded"), hostname="h", collectors=only)
    assert replayed.observations.filesystems == report.observations.filesystems
    (mount,) = replayed.observations.filesystems.mounts  # type: ignore[union-attr]
    assert (mount.device, mount.removable) == ("sdd1", True)
