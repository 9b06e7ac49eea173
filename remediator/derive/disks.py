"""SMART signals per disk: failing verdicts, NVMe warnings, and growth of the wear counters.

Reallocated and pending sectors, SAS grown defects and NVMe media errors matter when they
grow, not when they are non-zero: plenty of healthy disks carry a few hundred remapped
sectors for years. The first sight of a disk records its counters only. A disk is known by
its serial number, or by its device name when the serial is missing or not unique in the
report (RAID controllers and redacted samples repeat serials), and by its position as well when even
the device name repeats.
"""

from __future__ import annotations

from collections import Counter

from checker.schemas import DiskHealth
from remediator.derive.memory import DiskCounters
from remediator.signals import SignalValue

MAX_DISKS = 64

# DiskHealth field -> growth signal, in DiskCounters order
GROWTH: tuple[tuple[str, str], ...] = (
    ("reallocated_sectors", "smart_reallocated_growth"),
    ("pending_sectors", "smart_pending_growth"),
    ("grown_defects", "smart_grown_defects_growth"),
    ("media_errors", "nvme_media_errors_growth"),
)
TEMPERATURE_BIT = 0x02
# NVMe SMART/Health log byte 0, bit by bit (NVMe base specification).
CRITICAL_WARNING_BITS: tuple[str, ...] = (
    "spare_below_threshold",
    "temperature",
    "reliability_degraded",
    "read_only",
    "volatile_backup_failed",
    "persistent_memory_read_only",
)


def disk_keys(disks: list[DiskHealth]) -> list[str]:
    """Serial when unique in the report, else device name when unique, else device and position."""
    serials = Counter(d.serial for d in disks if d.serial)
    devices = Counter(d.device for d in disks)
    keys = []
    for i, d in enumerate(disks):
        if d.serial and serials[d.serial] == 1:
            keys.append(d.serial)
        else:
            keys.append(d.device if devices[d.device] == 1 else f"{d.device}#{i}")
    return keys


def _about(disk: DiskHealth) -> dict[str, object]:
    return {"device": disk.device, "serial": disk.serial, "model": disk.model, "protocol": disk.protocol}


def _counters(disk: DiskHealth, before: DiskCounters | None) -> DiskCounters:
    values = [getattr(disk, name) for name, _ in GROWTH]
    old = list(before) if before is not None else [None] * len(GROWTH)
    a, b, c, d = (now if now is not None else was for now, was in zip(values, old, strict=True))
    return (a, b, c, d)


def disk_signals(
    disks: list[DiskHealth] | None, previous: dict[str, DiskCounters] | None
) -> tuple[list[SignalValue], dict[str, DiskCounters] | None]:
    if disks is None:
        return [], previous
    prev = previous or {}
    signals: list[SignalValue] = []
    memory: dict[str, DiskCounters] = {}
    for key, disk in zip(disk_keys(disks), disks, strict=True):
        about = _about(disk)
        if disk.smart_passed is False or "disk_failing" in disk.exit_flags:
            detail = {**about, "smart_passed": disk.smart_passed, "exit_flags": list(disk.exit_flags)}
            detail["reallocated_sectors"] = disk.reallocated_sectors
            signals.append(SignalValue("smart_failing", key, 1.0, detail))
        if disk.nvme_critical_warning:
            bits = [name for i, name in enumerate(CRITICAL_WARNING_BITS) if disk.nvme_critical_warning & (1 << i)]
            detail = {**about, "bits": bits, "temperature_c": disk.temperature_c}
            # Bit 1 is a temperature threshold: the drive's surroundings, not the drive. The others are the drive.
            if media := disk.nvme_critical_warning & ~TEMPERATURE_BIT:
                signals.append(SignalValue("nvme_critical_warning", key, float(media), detail))
            if disk.nvme_critical_warning & TEMPERATURE_BIT:
                signals.append(SignalValue("nvme_temperature_warning", key, disk.temperature_c or 1.0, detail))
        spare, threshold = disk.available_spare, disk.available_spare_threshold
        if spare is not None and threshold is not None and spare <= threshold:
            signals.append(SignalValue("nvme_spare_low", key, float(spare), {**about, "threshold": threshold}))
        before = prev.get(key)
        if before is not None:
            for (name, kind), was in zip(GROWTH, before, strict=True):
                now = getattr(disk, name)
                if was is not None and now is not None and now > was:
                    signals.append(SignalValue(kind, key, float(now - was), {**about, "previous": was, "current": now}))
        if key not in memory and len(memory) < MAX_DISKS:
            memory[key] = _counters(disk, before)
    return signals, memory
