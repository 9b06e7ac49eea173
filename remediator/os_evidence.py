"""A filesystem ticket's part: the mount the kernel's device name stands for, and the disk under it.

The kernel names a filesystem by its block device (sdd1, dm-4); the technician needs the mount point,
the filesystem type and, to check or replace it, the disk: for a partition its parent disk's model
and serial from the SMART section. A device-mapper volume (dm-N) sits on disks the report does not
map, so the ticket says so instead of guessing one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

_NVME = re.compile(r"^(?P<ctrl>nvme\d+)n\d+(?:p\d+)?$")
_PARTITION = re.compile(r"^(?P<disk>mmcblk\d+)(?:p\d+)?$|^(?P<plain>(?:sd|vd|xvd|hd)[a-z]+)\d*$")
# Not a disk in this host: network block devices (rbd, nbd), loop files, device-mapper and md volumes.
NO_DISK = ("dm-", "md", "rbd", "nbd", "loop", "zram")


def parent_disk(device: str) -> str | None:
    """The disk smartctl names (its scan's /dev/<name>): sdd1 -> sdd, nvme0n1p2 -> nvme0 (the controller,
    as `smartctl --scan` lists NVMe), mmcblk0p1 -> mmcblk0; None for a dm/md volume, a network block
    device or a loop file."""
    if device.startswith(NO_DISK):
        return None
    if (m := _NVME.match(device)) is not None:
        return m.group("ctrl")
    if (m := _PARTITION.match(device)) is not None:
        return m.group("disk") or m.group("plain")
    return None


def filesystem_part(subject: str, observations: dict[str, Any]) -> dict[str, Any]:
    mounts = (observations.get("filesystems") or {}).get("mounts") or []
    mount = next((m for m in mounts if subject in (m.get("device"), *(m.get("devices") or []))), None) or {}
    disk_name = parent_disk(subject)
    disk = None
    if disk_name is not None:
        disk = next(
            (d for d in observations.get("disks") or [] if str(d.get("device", "")).rsplit("/", 1)[-1] == disk_name),
            None,
        )
    part: dict[str, Any] = {
        "device": subject,
        "mountpoint": mount.get("mountpoint"),
        "fstype": mount.get("fstype"),
        "source": mount.get("source"),
        "read_only": mount.get("read_only"),
        "forced_read_only": mount.get("forced_read_only"),
        "removable": mount.get("removable"),
        "remote": mount.get("remote"),
        "disk": disk_name,
        "vendor": None,
        "model": (disk or {}).get("model"),
        "serial": (disk or {}).get("serial"),
    }
    if subject.startswith(("rbd", "nbd")) or mount.get("remote"):
        part["disk_note"] = "a network volume (RBD, NBD, iSCSI): its storage is not in this host; its owners check it"
    elif subject.startswith(("loop", "zram")):
        part["disk_note"] = "a loop or zram device: a file or memory, no disk of its own (losetup -l)"
    elif disk_name is None:
        part["disk_note"] = "a device-mapper or md volume: its disks are not in the report (dmsetup deps, lsblk)"
    elif disk is None:
        part["disk_note"] = f"{disk_name} is not in the report's SMART section: read its serial on the host"
    return part


def workload_part(subject: str, recent: Sequence[Any]) -> dict[str, Any]:
    """An OOM ticket's part: the memory cgroup (the workload: a pod, a systemd unit), how its OOMs were
    constrained and which processes they killed, from the `oom_events` signal (derive/os_faults.py)."""
    detail = next((dict(s.detail or {}) for s in recent if s.kind == "oom_events"), {})
    return {
        "cgroup": detail.get("memcg") or subject,
        "scope": detail.get("scope"),
        "constraint": detail.get("constraint"),
        "victims": detail.get("victims"),
        "capacity_missing": detail.get("capacity_missing") or None,
        "vendor": None,
        "model": None,
        "serial": None,
    }
