"""Capacity: what memory, CPUs, disks and NICs the OS sees now (class 6, lost capacity).

Plain reads of /proc and /sys, no command: /proc/meminfo, the cpu present/online lists, /proc/cpuinfo, the
names in /sys/block with a uevent read per disk (its model, serial, size, rotational flag and transport read
when first seen and every DISK_REFRESH_S, kept in the collector's state between, and read afresh after a
reboot: names shift when a disk is lost), and a few reads per interface in /sys/class/net. Disks on a network
or USB transport (iSCSI, Fibre Channel LUNs, NVMe over fabrics, USB) are not the host's own: they are not
counted. Nor are interfaces that come and go (SR-IOV virtual functions, the BMC's USB cdc_ether usb0). A file
that cannot be read leaves its field None, never 0: the centre must not read "not read" as "missing".
"""

from __future__ import annotations

import time

from checker.collectors.context import Context, Unavailable
from checker.parsers.capacity import is_disk, parse_cpu_topology, parse_meminfo_total
from checker.parsers.common import nonneg, parse_cpu_list, to_int
from checker.sections.capacity import MAX_BLOCK_DEVICES, MAX_INTERFACES, MAX_OFFLINE_LISTED, BlockDevice, Capacity

CPU_SYSFS = "/sys/devices/system/cpu"
BOOT_ID = "/proc/sys/kernel/random/boot_id"
# In the resolved path of a disk's device: an iSCSI session, a Fibre Channel remote port, a USB bus.
_REMOTE_PATH = ("/session", "/rport-", "/usb")
STATE = "capacity"
DISK_REFRESH_S = 600.0
MAX_BLOCK_ENTRIES = 4096  # /sys/block names looked at (loop devices can be thousands)


def collect(ctx: Context) -> None:
    meminfo = ctx.host.read_text("/proc/meminfo")
    present_text = ctx.host.read_text(f"{CPU_SYSFS}/present")
    online_text = ctx.host.read_text(f"{CPU_SYSFS}/online")
    if meminfo is None and present_text is None and online_text is None:
        raise Unavailable(f"/proc/meminfo, {CPU_SYSFS}/present and /online cannot be read")
    capacity = Capacity()
    if meminfo is not None:
        capacity.mem_total_kb = ctx.take(parse_meminfo_total(meminfo), "/proc/meminfo", meminfo)
    present = ctx.take(parse_cpu_list(present_text), f"{CPU_SYSFS}/present", present_text) if present_text else None
    online = ctx.take(parse_cpu_list(online_text), f"{CPU_SYSFS}/online", online_text) if online_text else None
    if present:
        capacity.cpus_present = len(present)
    if online:
        capacity.cpus_online = len(online)
    if present and online:
        capacity.cpus_offline = sorted(set(present) - set(online))[:MAX_OFFLINE_LISTED]
    cpuinfo = ctx.host.read_text("/proc/cpuinfo")
    if cpuinfo is not None:
        topology = parse_cpu_topology(cpuinfo)
        if topology.value is not None:
            capacity.sockets, capacity.cores = topology.value.sockets, topology.value.cores
        for item in topology.problems[:3]:
            ctx.problem(f"/proc/cpuinfo: {item}")
    ctx.observations.capacity = capacity
    capacity.disks = _disks(ctx)
    capacity.nics = _nics(ctx)


def _first(ctx: Context, *paths: str) -> str | None:
    for path in paths:
        text = ctx.host.read_text(path)
        if text is not None and text.strip():
            return text.strip()
    return None


def _disks(ctx: Context) -> list[BlockDevice] | None:
    names = ctx.host.list_dir("/sys/block")
    if names is None:
        ctx.problem("/sys/block cannot be listed: disks not counted")
        return None
    # A disk's model, serial and size change only when it is swapped: read once, kept in the collector's state
    # and read again after DISK_REFRESH_S, so a steady cycle costs one uevent read per disk.
    saved = ctx.state.get(STATE)
    boot = (ctx.host.read_text(BOOT_ID) or "").strip()[:64] or None
    known = (saved.get("disks") or {}) if saved.get("boot") == boot else {}  # after a reboot, read afresh
    now = time.time()
    kept: dict[str, list[object]] = {}
    disks: list[BlockDevice] = []
    for name in names[:MAX_BLOCK_ENTRIES]:
        base = f"/sys/block/{name}"
        if not is_disk(name) or ctx.host.read_text(f"{base}/device/uevent") is None:
            continue  # a virtual device, or one without a device behind it
        if len(disks) >= MAX_BLOCK_DEVICES:
            ctx.problem(f"more than {MAX_BLOCK_DEVICES} disks; the rest not listed")
            break
        cached = known.get(name)
        if isinstance(cached, list) and len(cached) == 6 and now - float(cached[4] or 0) < DISK_REFRESH_S:
            model, serial, size, rotational, read_at, local = cached
        else:
            rotational_text = _first(ctx, f"{base}/queue/rotational")
            model = (_first(ctx, f"{base}/device/model") or "")[:128] or None
            serial = (_first(ctx, f"{base}/device/serial", f"{base}/device/wwid", f"{base}/wwid") or "")[:128] or None
            size = nonneg(to_int(_first(ctx, f"{base}/size")))
            rotational = None if rotational_text is None else rotational_text == "1"
            read_at, local = now, _local_disk(ctx, name)
        kept[name] = [model, serial, size, rotational, read_at, local]
        if local is False:
            continue
        disks.append(
            BlockDevice(
                name=name[:64],
                model=model if isinstance(model, str) else None,
                serial=serial if isinstance(serial, str) else None,
                size_sectors=size if isinstance(size, int) and not isinstance(size, bool) else None,
                rotational=rotational if isinstance(rotational, bool) else None,
            )
        )
    ctx.state.stage(STATE, {"disks": kept, "boot": boot})
    return disks


def _local_disk(ctx: Context, name: str) -> bool:
    """A disk on the host's own SATA/SAS/NVMe-PCIe controller; False for iSCSI, FC, USB and NVMe-oF."""
    real = ctx.host.resolve(f"/sys/block/{name}/device") or ""
    if any(part in real for part in _REMOTE_PATH):
        return False
    transport = _first(ctx, f"/sys/block/{name}/device/transport")  # the NVMe controller's: pcie, tcp, rdma, fc
    return transport is None or transport == "pcie"


def _nics(ctx: Context) -> list[str] | None:
    """Physical interfaces the host keeps: an entry with a device link, not an SR-IOV virtual function
    (device/physfn: VFs come and go with their configuration) nor on a USB bus (the BMC's cdc_ether usb0,
    a dongle)."""
    names = ctx.host.list_dir("/sys/class/net")
    if names is None:
        ctx.problem("/sys/class/net cannot be listed: NICs not counted")
        return None
    found = [n for n in names[:1024] if _physical_nic(ctx, n)]
    if len(found) > MAX_INTERFACES:
        ctx.problem(f"{len(found)} physical interfaces; only the first {MAX_INTERFACES} listed")
    return [n[:64] for n in found[:MAX_INTERFACES]]


def _physical_nic(ctx: Context, name: str) -> bool:
    base = f"/sys/class/net/{name}/device"
    if ctx.host.read_text(f"{base}/uevent") is None or ctx.host.resolve(f"{base}/physfn") is not None:
        return False
    return "/usb" not in (ctx.host.resolve(base) or "")
