"""The OS signals (remediator/derive/os_faults.py) and a filesystem ticket's part (remediator/os_evidence.py)."""

from __future__ import annotations

import datetime as dt

import pytest

from checker.schemas import Filesystems, Mount, TimeSync
from remediator.derive.os_faults import filesystem_signals, note_guest_and_capacity, oom_signals, role_of, time_signals
from remediator.os_evidence import filesystem_part, parent_disk
from remediator.signals import SignalValue

NOW = dt.datetime(2026, 9, 1, 8, 0, tzinfo=dt.UTC)


def mount(
    mountpoint: str, device: str, *, removable: bool | None = False, forced: bool = False, remote: bool | None = None
) -> Mount:
    return Mount(
        mountpoint=mountpoint, device=device, fstype="ext4", read_only=forced, forced_read_only=forced,
        removable=removable, remote=remote,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("where", "removable", "role"),
    [
        ("/", False, "system"),
        ("/var/lib/docker", False, "system"),
        ("/data", False, "data"),
        ("/srv/db", None, "data"),
        ("/media/backup", None, "removable"),
        ("/mnt/usb", True, "removable"),
        ("/var/lib/kubelet/pods/abc/volumes/kubernetes.io~csi/pvc-1/mount", None, "remote"),  # M3: was system
    ],
)
def test_role_of_a_mount(where: str, removable: bool | None, role: str) -> None:
    m = mount(where, "sdb1", removable=removable)
    assert role_of(m, Filesystems(mounts=[m])) == role


def test_role_without_the_mount_or_the_section() -> None:
    # M1: a device in no reported mount is unknown (treated as needed), not harmlessly "unmounted" (before).
    assert role_of(None, Filesystems(mounts=[])) == "unknown"
    assert role_of(None, None) == "unknown"


def test_network_volumes_are_remote_wherever_mounted() -> None:
    """M3: rbd/nbd devices and a disk of an iSCSI session (the collector's `remote`) are the storage's."""
    assert role_of(None, Filesystems(mounts=[]), "rbd0") == "remote"
    iscsi = mount("/srv/db", "sdb", remote=True)
    assert role_of(iscsi, Filesystems(mounts=[iscsi])) == "remote"
    local = mount("/var/lib/kubelet/pods/x/volumes/kubernetes.io~local-volume/pv1", "sdc1", remote=False)
    assert role_of(local, Filesystems(mounts=[local])) == "system"  # resolved local: a local PV is the host's


def test_a_btrfs_member_device_finds_its_filesystems_mount() -> None:
    """M1: a two-device btrfs filesystem's log may name either device."""
    data = mount("/data", "sdc").model_copy(update={"devices": ["sdd"]})
    (signal,) = filesystem_signals([kernel("fs_readonly", "sdd")], Filesystems(mounts=[data]))
    assert (signal.detail["role"], signal.detail["where"]) == ("data", "/data")


def kernel(kind: str, device: str, value: float = 1.0) -> SignalValue:
    return SignalValue("device_event_count", device, value, {"kind": kind, "window_s": 86400, "lines": ["x"]})


def test_a_readonly_device_carries_its_errors_and_mountinfo_adds_what_the_log_missed() -> None:
    fs = Filesystems(mounts=[mount("/", "dm-0", forced=True), mount("/data", "dm-4")])
    found = filesystem_signals([kernel("fs_error", "dm-4", 3), kernel("fs_readonly", "dm-4")], fs)
    shape = [(s.kind, s.subject, s.value, s.detail["role"], s.detail.get("from"), s.detail["where"]) for s in found]
    assert shape == [
        ("filesystem_readonly", "dm-4", 1.0, "data", "kernel_log", "/data"),
        ("filesystem_readonly", "dm-0", 1.0, "system", "mountinfo", "/"),
    ]  # dm-4's errors go with its read-only signal


def test_errors_alone_and_an_unreported_mount() -> None:
    (errors,) = filesystem_signals([kernel("fs_error", "sdc1", 2)], None)
    assert (errors.kind, errors.value, errors.detail["role"], errors.detail["where"]) == (
        "filesystem_errors",
        2.0,
        "unknown",
        "mount not reported",
    )


def test_time_signals_unsynchronised_and_offset_only_when_it_matters() -> None:
    synced = TimeSync(
        source="chrony", synchronised=True, offset_s=-0.00002, reference_time=NOW - dt.timedelta(seconds=64)
    )
    assert time_signals(synced, NOW) == []
    behind = synced.model_copy(update={"offset_s": 2.5})
    (offset,) = time_signals(behind, NOW)
    assert (offset.kind, offset.value, offset.detail["offset_s"], offset.detail["reference_age_s"]) == (
        "clock_offset_s",
        2.5,
        2.5,
        64,
    )
    ahead = synced.model_copy(update={"offset_s": -2.5})  # S5: chrony's negative offset (the clock is ahead)
    (offset,) = time_signals(ahead, NOW)
    assert (offset.value, offset.detail["offset_s"]) == (2.5, -2.5)
    lost = TimeSync(source="timedatectl", synchronised=False, ntp_enabled=True)
    (unsynced,) = time_signals(lost, NOW)
    assert (unsynced.kind, unsynced.subject, unsynced.detail["source"]) == (
        "time_unsynchronised",
        "clock",
        "timedatectl",
    )


def test_parent_disk_and_the_part_named_with_its_disk() -> None:
    # S2: smartctl's scan names NVMe by its controller (/dev/nvme0): nvme0n1p2 -> nvme0 (before: nvme0n1, never
    # found); network block devices and loop files have no disk here (before: "rbd", "nbd", "loop").
    names = ("sdd1", "sda", "nvme0n1p2", "nvme0n1", "mmcblk0p1", "dm-4", "md127", "rbd0", "nbd0", "loop0")
    assert [parent_disk(d) for d in names] == [
        "sdd", "sda", "nvme0", "nvme0", "mmcblk0", None, None, None, None, None,
    ]  # fmt: skip
    nvme = {"disks": [{"device": "/dev/nvme0", "model": "SAMSUNG MZQL23T8HCLS", "serial": "S64HNE0R000000"}]}
    assert filesystem_part("nvme0n1p2", nvme)["serial"] == "S64HNE0R000000"
    assert "network volume" in filesystem_part("rbd0", {})["disk_note"]
    observations = {
        "filesystems": {"mounts": [mount("/media/backup", "sdd1", removable=True, forced=True).model_dump()]},
        "disks": [{"device": "/dev/sdd", "model": "WDC WD40EZRZ-22GXCB0", "serial": "WD-WCC7K4XXXXXX"}],
    }
    part = filesystem_part("sdd1", observations)
    assert (part["mountpoint"], part["disk"], part["model"], part["serial"], part["forced_read_only"]) == (
        "/media/backup",
        "sdd",
        "WDC WD40EZRZ-22GXCB0",
        "WD-WCC7K4XXXXXX",
        True,
    )
    assert "device-mapper" in filesystem_part("dm-4", {})["disk_note"]


def test_a_local_chrony_reference_is_marked_so_the_rule_leaves_it() -> None:
    """S7: chrony serving `local stratum N` (refid 7F7F0101) is unsynchronised by design."""
    (signal,) = time_signals(TimeSync(source="chrony", synchronised=False, local_clock=True), NOW)
    assert signal.detail["local_clock"] is True
    (signal,) = time_signals(TimeSync(source="chrony", synchronised=False), NOW)
    assert signal.detail["local_clock"] is False


def oom(subject: str, value: float, scope: str, victims: list[str]) -> SignalValue:
    detail = {"kind": "oom_kill", "window_s": 86400, "lines": [], "scope": scope, "victims": victims}
    return SignalValue("device_event_count", subject, value, detail | {"memcg": None if scope == "host" else subject})


def test_oom_events_per_cgroup_and_a_host_oom_carries_the_capacity_finding() -> None:
    """M5, S3, S4: one signal per memory cgroup (or host); a host-wide OOM notes memory the host lost."""
    found = oom_signals([oom("/kubepods/pod1", 2, "cgroup", ["java"]), oom("host", 3, "host", ["sshd"])])
    capacity = SignalValue("capacity_missing", "dimms", 2.0, {})
    note_guest_and_capacity([*found, capacity], guest=False)
    shape = [(s.kind, s.subject, s.value, s.detail["victim"], s.detail.get("lost_memory")) for s in found]
    assert shape == [("oom_events", "/kubepods/pod1", 2.0, "java", False), ("oom_events", "host", 3.0, "sshd", True)]
    assert found[1].detail["capacity_missing"] == "dimms: 2 missing"


def test_a_clocksource_verdict_in_a_vm_is_marked() -> None:
    """M4: the watchdog's reference clock is emulated in a VM."""
    signal = SignalValue("kernel_event_count", "clocksource_unstable", 1.0, {})
    note_guest_and_capacity([signal], guest=True)
    assert signal.detail["virtual_machine"] is True
