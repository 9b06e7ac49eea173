"""The simulated OS faults: a filesystem the kernel takes read-only (`fs_readonly`, variant `xfs`: a
corruption and a forced shutdown; `ext4`: an aborted journal and errors=remount-ro) and a workload the
OOM killer keeps killing (`oom_kills`); and the sections every virtual host reports for them.

Each host has its root on dm-0 and its data volume on dm-4, mounted at /data (XFS, or ext4 when the
fault's variant is ext4). The kernel lines are the os-faults samples' wording (XFS before 5.15, ext4,
a memory cgroup's OOM on a 5.x kernel), so the real classifier reads them.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from checker.schemas import Filesystems, Mount, TimeSync

if TYPE_CHECKING:
    from checker.sim.faults import Fault
    from checker.sim.host import VirtualHost

KERN_ALERT, KERN_CRIT, KERN_ERR, KERN_WARNING, KERN_INFO = 1, 2, 3, 4, 6
DATA_DEVICE = "dm-4"
OOM_VICTIMS = ("java", "python3", "postgres", "node")


def _fault(host: VirtualHost, kind: str) -> Fault | None:
    return next((f for f in host.faults if f.kind == kind), None)


def variant_of(dimm_index: int) -> str:
    """xfs or ext4, from the index the fleet drew for the fault (no draw: the fleet's stream stays)."""
    return "ext4" if dimm_index % 2 else "xfs"


def _shutdown(variant: str) -> list[tuple[int, str]]:
    dev = DATA_DEVICE
    if variant == "ext4":
        journal = f"EXT4-fs error (device {dev}): ext4_journal_check_start:83: comm postgres: Detected aborted journal"
        return [(KERN_CRIT, journal), (KERN_CRIT, f"EXT4-fs ({dev}): Remounting filesystem read-only")]
    return [
        (KERN_ALERT, f"XFS ({dev}): Internal error xfs_iunlink_remove at line 2038 of file fs/xfs/xfs_inode.c.  "
         "Caller xfs_ifree+0x33/0x130 [xfs]"),
        (KERN_ALERT, f"XFS ({dev}): Corruption detected. Unmount and run xfs_repair"),
        (KERN_WARNING, f"XFS ({dev}): xfs_inactive_ifree: xfs_ifree returned error -117"),
        (KERN_WARNING, f"XFS ({dev}): xfs_do_force_shutdown(0x1) called from line 1788 of file fs/xfs/xfs_inode.c.  "
         "Return address = 000000009d022bf1"),
        (KERN_ALERT, f"XFS ({dev}): I/O Error Detected. Shutting down filesystem"),
        (KERN_ALERT, f"XFS ({dev}): Please umount the filesystem and rectify the problem(s)"),
    ]  # fmt: skip


def oom_kill(host: VirtualHost, fault: Fault, at: dt.datetime) -> None:
    """One memory-cgroup OOM: the report's head, the kernel's constraint line and the kill."""
    victim = OOM_VICTIMS[fault.dimm_index % len(OOM_VICTIMS)]
    pid = host.rng.randrange(2000, 4_000_000)
    pod = f"/kubepods/burstable/pod{host.machine_id[:8]}-{fault.dimm_index:04d}"
    host.log(
        at,
        [
            (KERN_WARNING, f"{victim} invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=936"),
            (KERN_INFO, "memory: usage 4194304kB, limit 4194304kB, failcnt 2113"),
            (KERN_INFO, f"oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0-1,"
             f"oom_memcg={pod},task_memcg={pod},task={victim},pid={pid},uid=1000"),
            (KERN_ERR, f"Memory cgroup out of memory: Killed process {pid} ({victim}) total-vm:8123456kB, "
             "anon-rss:4170112kB, file-rss:21440kB, shmem-rss:0kB, UID:1000 pgtables:9104kB oom_score_adj:936"),
        ],
    )  # fmt: skip


def progress(host: VirtualHost, fault: Fault, now: dt.datetime) -> None:
    """The filesystem's failure, once, when the fault is first seen."""
    if fault.kind == "fs_readonly" and not fault.logged:
        fault.logged = True
        host.log(now, _shutdown(fault.variant or "xfs"))


def filesystems(host: VirtualHost) -> Filesystems:
    """mountinfo as the filesystems collector reports it: ext4's remount-ro shows in the superblock's
    options; an XFS shutdown does not (the filesystem stays mounted rw and fails every I/O)."""
    fault = _fault(host, "fs_readonly")
    ext4 = fault is not None and fault.variant == "ext4"
    forced = ext4 and fault is not None and fault.logged
    return Filesystems(
        mounts=[
            Mount(mountpoint="/", device="dm-0", source="/dev/mapper/vg0-root", fstype="xfs", read_only=False,
                  removable=False),
            Mount(mountpoint="/boot", device="sda1", source="/dev/sda1", fstype="xfs", read_only=False,
                  removable=False),
            Mount(mountpoint="/data", device=DATA_DEVICE, source="/dev/mapper/vg0-data",
                  fstype="ext4" if ext4 else "xfs", read_only=forced, forced_read_only=forced, removable=False),
        ]
    )  # fmt: skip


def time_sync(host: VirtualHost, now: dt.datetime) -> TimeSync:
    """chrony, synchronised to the site's servers (no simulated fault moves the clock)."""
    return TimeSync(
        source="chrony",
        synchronised=True,
        reference="10.0.0.1",
        stratum=3,
        offset_s=0.000012,
        reference_time=now - dt.timedelta(seconds=64),
        leap_status="Normal",
    )
