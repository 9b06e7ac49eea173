"""The OS sections: the host's mounted filesystems (which the kernel made read-only) and its clock's
synchronisation (chrony or systemd-timesyncd).

Facts only: which mount matters to the host's work (the root, a data disk, a removable backup disk)
is the centre's judgement (remediator/derive/os_faults.py).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from checker.report_types import FiniteFloat, Model, NonNegativeInt, Timestamp

MAX_MOUNTS = 128


class Mount(Model):
    """One block-device filesystem, once (its first mount of the filesystem's own root; bind mounts left out)."""

    mountpoint: str = Field(max_length=512)
    device: str | None = Field(
        None, max_length=64, description="The kernel's name for it (sdd1, dm-4, nvme0n1p2), as its log lines say."
    )
    source: str = Field("", max_length=512, description="The mount source as mountinfo shows it (/dev/mapper/vg-data).")
    fstype: str = Field("", max_length=32)
    read_only: bool = Field(description="Read-only now (per-mount or superblock option ro).")
    forced_read_only: bool = Field(
        False,
        description="The superblock is read-only while the mount asked for rw: the kernel made it read-only "
        "(ext4 errors=remount-ro, btrfs forced readonly), nobody mounted it so.",
    )
    devices: list[str] = Field(
        default_factory=list,
        max_length=16,
        description="A multi-device filesystem's other member devices (btrfs: /sys/fs/btrfs/<fsid>/devices/), "
        "any of which its log lines may name.",
    )
    removable: bool | None = Field(
        None,
        description="Its disk is removable or on USB: the disk's sysfs removable flag (SCSI RMB, which most USB "
        "enclosures leave 0), or its sysfs path (/sys/class/block/<dev>, resolved) passing a USB bus; a dm/md "
        "volume is removable when a disk under it (slaves/) is. Null when unknown (the path not resolved).",
    )
    remote: bool | None = Field(
        None,
        description="Its storage is across the network: a Ceph RBD or NBD device, or a disk of an iSCSI session "
        "(its resolved sysfs path passes /session…); null when unknown.",
    )


class Filesystems(Model):
    source: Literal["mountinfo"] = "mountinfo"
    mounts: list[Mount] = Field(default_factory=list, max_length=MAX_MOUNTS)
    truncated: NonNegativeInt = Field(0, description="Mounts beyond the kept ones.")


class TimeSync(Model):
    """The clock's synchronisation as its daemon tells it."""

    source: Literal["chrony", "timedatectl"]
    synchronised: bool = Field(
        description="chrony: a reference is selected and leap status is not 'Not synchronised'; "
        "timedatectl: NTPSynchronized=yes (the kernel's STA_UNSYNC clear)."
    )
    reference: str | None = Field(None, max_length=256, description="The selected source (chrony's name or address).")
    stratum: NonNegativeInt | None = None
    offset_s: FiniteFloat | None = Field(
        None,
        description="chrony's 'System time': how far the system clock is from NTP time, in seconds; positive: "
        "the system clock is behind (chrony's 'slow').",
    )
    reference_time: Timestamp | None = Field(None, description="When the reference was last measured (chrony).")
    leap_status: str | None = Field(
        None, max_length=32, description="Normal, Insert second, Delete second, Not synchronised."
    )
    ntp_enabled: bool | None = Field(None, description="timedatectl NTP=: a time-sync service is enabled.")
    local_clock: bool | None = Field(
        None,
        description="chrony serves its own clock (reference id 7F7F0101, `local stratum N`): unsynchronised by "
        "design on an isolated network; null for timedatectl.",
    )
