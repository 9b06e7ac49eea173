"""Block-device filesystems from /proc/self/mountinfo, named as the kernel's log names them.

One read of mountinfo, then per filesystem a few small sysfs reads: its uevent (DEVNAME: the name
"EXT4-fs (sdd1)" or "XFS (dm-4)" uses), where its sysfs link resolves (a disk on a USB bus, an
iSCSI session, a network block device), the removable flag of the disk under it, and for a
device-mapper volume the disks under it (slaves/). Bind mounts (a root other than "/") and virtual
filesystems (no block device) are left out, so a Kubernetes node's hundreds of bind mounts cost
nothing; btrfs subvolume mounts (root /@, /root) are kept, once per filesystem, and a btrfs
filesystem's member devices are named from /sys/fs/btrfs/<fsid>/devices/.
"""

from __future__ import annotations

from checker.collectors.context import Context, Unavailable
from checker.parsers.mountinfo import MountEntry, parse_mountinfo
from checker.schemas import Filesystems, Mount

MOUNTINFO = "/proc/self/mountinfo"
BTRFS = "/sys/fs/btrfs"
MAX_MOUNTS = 128
MAX_DEPTH = 3  # dm on dm on a disk (LUKS on LVM): deep enough, and bounded
# Block devices whose storage is across the network: Ceph RBD, network block devices.
REMOTE_NAMES = ("rbd", "nbd")


def _uevent(ctx: Context, entry: MountEntry) -> dict[str, str]:
    text = ctx.host.read_text(f"/sys/dev/block/{entry.major}:{entry.minor}/uevent") or ""
    return {k: v for k, _, v in (line.partition("=") for line in text.splitlines()) if k}


def _flag(ctx: Context, path: str) -> bool | None:
    text = ctx.host.read_text(path)
    return text.strip() == "1" if text is not None and text.strip() in ("0", "1") else None


def bus_of(
    ctx: Context, name: str, link: str | None = None, depth: int = 0, *, partition: bool | None = None
) -> tuple[bool | None, bool | None]:
    """(removable, remote) of a block device by its kernel name (and its sysfs link, /sys/dev/block/M:m by
    default /sys/class/block/<name>): removable when its disk says so or sits on a USB bus, remote when it
    is an RBD/NBD device or an iSCSI session's; a dm/md volume is what its slaves are. None when sysfs does
    not tell (the link not resolved, no removable file)."""
    if name.startswith(REMOTE_NAMES):
        return False, True
    link = link or f"/sys/class/block/{name}"
    real = ctx.host.resolve(link)
    if real is None:
        return None, None
    if "/session" in real:
        return False, True
    if "/usb" in real:
        return True, False
    if name.startswith(("dm-", "md")) and depth < MAX_DEPTH:
        slaves = ctx.host.list_dir(f"{link}/slaves") or []
        found = [bus_of(ctx, slave, None, depth + 1) for slave in slaves[:8]]
        if not found:
            return None, None
        removable = True if any(r for r, _ in found) else (False if all(r is False for r, _ in found) else None)
        remote = True if any(n for _, n in found) else (False if all(n is False for _, n in found) else None)
        return removable, remote
    # A partition's directory sits in its disk's (…/block/sdd/sdd1, …/nvme0n1/nvme0n1p2): the disk's flag.
    parts = real.rstrip("/").split("/")
    if partition is None:  # the uevent's DEVTYPE when the caller read it, else sysfs' partition file
        partition = ctx.host.read_text(f"{link}/partition") is not None
    disk = parts[-2] if partition and len(parts) >= 2 else parts[-1]
    return _flag(ctx, f"/sys/block/{disk}/removable"), False


def _btrfs_members(ctx: Context) -> list[list[str]]:
    """Each mounted btrfs filesystem's member devices (kernel names), from /sys/fs/btrfs/<fsid>/devices/."""
    found = []
    for fsid in (ctx.host.list_dir(BTRFS) or [])[:MAX_MOUNTS]:
        if fsid in ("features",):
            continue
        devices = ctx.host.list_dir(f"{BTRFS}/{fsid}/devices")
        if devices:
            found.append(sorted(devices)[:16])
    return found


def _device_name(ctx: Context, entry: MountEntry, uevent: dict[str, str]) -> str | None:
    if uevent.get("DEVNAME"):
        return uevent["DEVNAME"]
    if not entry.source.startswith("/dev/"):
        return None
    # btrfs: an anonymous device number; its source (/dev/mapper/luks-…) resolves to the name the log uses (dm-0).
    real = ctx.host.resolve(entry.source)
    return (real or entry.source).rsplit("/", 1)[-1]


def _is_block(entry: MountEntry) -> bool:
    # btrfs has an anonymous device number (major 0) but a /dev source, and a subvolume as its root.
    if entry.fstype == "btrfs":
        return entry.source.startswith("/dev/")
    return entry.root == "/" and (entry.major != 0 or entry.source.startswith("/dev/"))


def collect(ctx: Context) -> None:
    text = ctx.host.read_text(MOUNTINFO)
    if text is None:
        raise Unavailable(f"{MOUNTINFO} is not readable (no procfs?)")
    entries = ctx.take(parse_mountinfo(text), "mountinfo", text)
    mounts: list[Mount] = []
    seen: set[tuple[int, int] | str] = set()
    btrfs: list[list[str]] | None = None
    truncated = 0
    for entry in entries:
        key: tuple[int, int] | str = entry.source if entry.fstype == "btrfs" else (entry.major, entry.minor)
        if not _is_block(entry) or key in seen:
            continue
        seen.add(key)
        if len(mounts) >= MAX_MOUNTS:
            truncated += 1
            continue
        uevent = _uevent(ctx, entry) if entry.major != 0 else {}
        device = _device_name(ctx, entry, uevent)
        link = f"/sys/dev/block/{entry.major}:{entry.minor}" if entry.major != 0 else None
        partition = uevent.get("DEVTYPE") == "partition" if uevent else None
        removable, remote = bus_of(ctx, device, link, partition=partition) if device else (None, None)
        members: list[str] = []
        if entry.fstype == "btrfs" and device:
            btrfs = _btrfs_members(ctx) if btrfs is None else btrfs
            members = next((m for m in btrfs if device in m), [])
        mounts.append(
            Mount(
                mountpoint=entry.mountpoint[:512],
                device=device[:64] if device else None,
                devices=[m[:64] for m in members if m != device],
                source=entry.source[:512],
                fstype=entry.fstype[:32],
                read_only=entry.read_only,
                forced_read_only=entry.forced_read_only,
                removable=removable,
                remote=remote,
            )
        )
    ctx.observations.filesystems = Filesystems(mounts=mounts, truncated=truncated)
    ctx.source = "mountinfo"
