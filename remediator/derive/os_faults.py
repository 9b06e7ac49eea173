"""OS signals: filesystems the kernel made read-only or shut down, filesystem errors, OOMs and the clock.

The kernel log names a filesystem by its device ("EXT4-fs (sdd1)", "XFS (dm-4)"); the counts per
device come from remediator/derive/kernel.py (`device_event_count`, kinds fs_readonly and fs_error,
a day's window). Here each is placed on its mount (the filesystems section) and given a role, so a
rule can drain a host whose root or data filesystem went read-only and leave one whose USB backup
disk or network volume did in service. mountinfo also shows a read-only remount the log did not (its
lines were rate-limited, or before the agent's cursor): a superblock that is ro under a mount that
asked for rw. OOMs are counted per memory cgroup (kind oom_kill, one per OOM) as `oom_events`.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from checker.schemas import Filesystems, Mount, TimeSync
from remediator.signals import SignalValue

Role = Literal["system", "data", "removable", "remote", "unknown"]
# The OS's own trees: the host cannot run without them writable (logs, spool, package state, /tmp).
SYSTEM_MOUNTS = frozenset({"/", "/usr", "/var", "/boot", "/boot/efi", "/opt", "/home", "/tmp"})  # noqa: S108 (a name)
SYSTEM_PREFIXES = ("/var/", "/usr/")
# Where udisks mounts removable media: a backup or transfer disk, not the host's work.
REMOVABLE_PREFIXES = ("/media/", "/run/media/")
# Kubernetes' volumes (CSI, in-tree RBD/iSCSI): a storage system's, mounted under the kubelet's tree.
REMOTE_PREFIXES = ("/var/lib/kubelet/",)
# Network block devices (Ceph RBD, NBD): the storage is not in the host, whatever the mount point.
REMOTE_DEVICES = ("rbd", "nbd")
SAMPLE_LINES = 5
# clock_offset_s is emitted from this offset on: the node-exporter mixin's NodeClockSkewDetected threshold,
# so a healthy host's microseconds add no rows.
OFFSET_SHOWN_S = 0.05


def find_mount(device: str, filesystems: Filesystems | None) -> Mount | None:
    """The mount of a kernel device name: its own, or a multi-device btrfs filesystem's it is a member of."""
    if filesystems is None:
        return None
    return next((m for m in filesystems.mounts if m.device == device or device in m.devices), None)


def role_of(mount: Mount | None, filesystems: Filesystems | None, device: str | None = None) -> Role:
    """What a filesystem is to the host: its OS (system), its work (data), a removable disk, a network
    volume (remote: the storage's owners', not the host's), or unknown. A device found among no mounts
    is unknown, not harmless: mountinfo may name it otherwise (a btrfs subvolume, a device-mapper
    alias), and rules treat unknown as needed."""
    if (device or "").startswith(REMOTE_DEVICES) or (mount is not None and mount.remote):
        return "remote"
    if filesystems is None or mount is None:
        return "unknown"
    if mount.removable or mount.mountpoint.startswith(REMOVABLE_PREFIXES):
        return "removable"
    if mount.mountpoint.startswith(REMOTE_PREFIXES) and mount.remote is not False:
        return "remote"
    if mount.mountpoint in SYSTEM_MOUNTS or mount.mountpoint.startswith(SYSTEM_PREFIXES):
        return "system"
    return "data"


def _place(device: str, filesystems: Filesystems | None) -> dict[str, Any]:
    mount = find_mount(device, filesystems)
    return {
        "device": device,
        "mountpoint": mount.mountpoint if mount else None,
        "fstype": mount.fstype if mount else None,
        "source": mount.source if mount else None,
        "read_only_now": mount.read_only if mount else None,
        "role": role_of(mount, filesystems, device),
        # for titles: the mount point, or why there is none
        "where": mount.mountpoint if mount else ("mount not found" if filesystems else "mount not reported"),
    }


def filesystem_signals(kernel: list[SignalValue], filesystems: Filesystems | None) -> list[SignalValue]:
    """`filesystem_readonly` and `filesystem_errors` per device, from this report's kernel counts and mounts."""
    by_kind: dict[str, dict[str, SignalValue]] = {"fs_readonly": {}, "fs_error": {}}
    for signal in kernel:
        kind = signal.detail.get("kind")
        if signal.kind == "device_event_count" and kind in by_kind:
            by_kind[str(kind)][signal.subject] = signal
    found: list[SignalValue] = []
    readonly: set[str] = set()
    for device, signal in by_kind["fs_readonly"].items():
        detail = _place(device, filesystems) | {
            "from": "kernel_log",
            "shutdown": any("hut down" in line or "hutting down" in line for line in signal.detail.get("lines", [])),
            "window_s": signal.detail.get("window_s"),
            "lines": list(signal.detail.get("lines", []))[:SAMPLE_LINES],
        }
        found.append(SignalValue("filesystem_readonly", device, signal.value, detail))
        readonly.add(device)
    for mount in filesystems.mounts if filesystems is not None else []:
        if mount.forced_read_only and mount.device and mount.device not in readonly:
            detail = _place(mount.device, filesystems) | {"from": "mountinfo", "shutdown": False, "lines": []}
            found.append(SignalValue("filesystem_readonly", mount.device, 1.0, detail))
            readonly.add(mount.device)
    for device, signal in by_kind["fs_error"].items():
        if device in readonly:
            continue  # the read-only signal carries it (its ticket gathers the error lines)
        detail = _place(device, filesystems) | {
            "window_s": signal.detail.get("window_s"),
            "lines": list(signal.detail.get("lines", []))[:SAMPLE_LINES],
        }
        found.append(SignalValue("filesystem_errors", device, signal.value, detail))
    return found


def time_signals(sync: TimeSync | None, now: dt.datetime) -> list[SignalValue]:
    """`time_unsynchronised` while the daemon says the clock is not synchronised; `clock_offset_s`
    (chrony's system-time offset, absolute) while it is OFFSET_SHOWN_S or more."""
    if sync is None:
        return []
    detail: dict[str, Any] = {
        "source": sync.source,
        "reference": sync.reference,
        "stratum": sync.stratum,
        "offset_s": sync.offset_s,
        "leap_status": sync.leap_status,
        "ntp_enabled": sync.ntp_enabled,
        "reference_age_s": round((now - sync.reference_time).total_seconds()) if sync.reference_time else None,
        # chronyd serving its own clock (`local stratum N`): not synchronised, by design on an isolated network
        "local_clock": bool(sync.local_clock),
    }
    found: list[SignalValue] = []
    if not sync.synchronised:
        found.append(SignalValue("time_unsynchronised", "clock", 1.0, dict(detail)))
    if sync.offset_s is not None and abs(sync.offset_s) >= OFFSET_SHOWN_S:
        found.append(SignalValue("clock_offset_s", "clock", abs(sync.offset_s), dict(detail)))
    return found


def oom_signals(kernel: list[SignalValue]) -> list[SignalValue]:
    """`oom_events` per memory cgroup (or `host`): OOMs within a day, one per OOM however many tasks it
    killed, from the per-subject kernel counts (remediator/derive/kernel.py, kind oom_kill)."""
    found = []
    for signal in kernel:
        if signal.kind == "device_event_count" and signal.detail.get("kind") == "oom_kill":
            victims = list(signal.detail.get("victims") or [])
            detail = dict(signal.detail) | {
                "memcg": signal.detail.get("memcg"),
                "victim": victims[-1] if victims else None,
                "capacity_missing": "",
                "lost_memory": False,
            }
            found.append(SignalValue("oom_events", signal.subject, signal.value, detail))
    return found


def note_guest_and_capacity(signals: list[SignalValue], *, guest: bool) -> None:
    """In place, on this report's signals: a clocksource verdict in a VM is marked (`virtual_machine`: the
    watchdog's reference clock is emulated too), and a host-wide OOM carries the capacity finding of the
    same report (`capacity_missing`: memory or DIMMs the host should have), which its ticket then is."""
    missing = [
        f"{s.subject}: {s.value:g} missing"
        for s in signals
        if s.kind == "capacity_missing" and s.subject in ("memory", "dimms") and s.value > 0
    ]
    for signal in signals:
        if signal.kind == "kernel_event_count" and signal.subject == "clocksource_unstable":
            signal.detail["virtual_machine"] = guest
        elif signal.kind == "oom_events" and signal.detail.get("scope") != "cgroup":
            signal.detail["capacity_missing"] = "; ".join(missing)
            signal.detail["lost_memory"] = bool(missing)  # oom-host-wide waits for the capacity ticket then
