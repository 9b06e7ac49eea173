"""SMART from smartctl's JSON (`smartctl -a -j`, `--scan-open -j`) and its exit status bit mask.

A non-zero exit status is not a failure by itself: bit 2 is set when one SMART command failed
(common behind RAID controllers), bit 6 when the error log has old entries. The verdicts are
smart_status.passed and the counters; the flags are reported so rules can weigh them.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Literal

from checker.parsers.common import Parsed, clip, guarded, problem
from checker.schemas import DiskHealth

# smartctl(8) "RETURN VALUES", bit by bit.
EXIT_FLAGS: tuple[str, ...] = (
    "command_line_error",  # 0: command line did not parse
    "device_open_failed",  # 1: device open failed, or device did not return an IDENTIFY
    "command_failed",  # 2: some SMART or other ATA command failed, or a checksum error
    "disk_failing",  # 3: SMART status check returned "DISK FAILING"
    "prefail_below_threshold",  # 4: prefail attributes <= threshold
    "usage_below_threshold_in_past",  # 5: usage/old-age attributes were <= threshold in the past
    "error_log_has_errors",  # 6: the device error log contains records of errors
    "self_test_log_has_errors",  # 7: the self-test log contains records of errors
)

Protocol = Literal["ATA", "NVMe", "SCSI", "unknown"]
_PROTOCOLS: dict[str, Protocol] = {"ata": "ATA", "nvme": "NVMe", "scsi": "SCSI"}

# ATA attribute ids -> DiskHealth fields (raw values).
ATA_ATTRIBUTES: dict[int, str] = {
    5: "reallocated_sectors",
    197: "pending_sectors",
    198: "offline_uncorrectable",
    199: "udma_crc_errors",
}


def decode_exit_status(status: int) -> list[str]:
    """smartctl's exit status -> names of the bits that are set (bit 0 first)."""
    if status < 0:
        return []
    return [name for bit, name in enumerate(EXIT_FLAGS) if status & (1 << bit)]


def protocol_of(text: str | None) -> Protocol:
    return _PROTOCOLS.get((text or "").strip().lower(), "unknown")


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 0 <= value < 2**63 else None  # NVMe's 128-bit counters past 64 bits: a broken field


def _str(value: Any, limit: int) -> str | None:
    if not isinstance(value, str):
        return None
    value = value.strip()
    return clip(value, limit) if value else None


def _load(text: str, problems: list[str]) -> dict[str, Any] | None:
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        problems.append(problem("smartctl output is not JSON", text))
        return None
    if not isinstance(doc, dict):
        problems.append(problem("smartctl JSON is not an object", text))
        return None
    return doc


@guarded(lambda: None)
def parse_smartctl_json(text: str, device: str = "") -> Parsed[DiskHealth | None]:
    """`smartctl -a -j DEVICE` (json_format_version 0.1 and 1.x; ATA, NVMe, SCSI/SAS) -> DiskHealth.

    None when the text is not smartctl JSON. When smartctl could not read the device (no
    'device' section), a DiskHealth with the exit flags is still returned, and smartctl's error
    messages are problems.
    """
    problems: list[str] = []
    doc = _load(text, problems)
    if doc is None:
        return Parsed(None, problems)
    run = _dict(doc.get("smartctl"))
    exit_status = _int(run.get("exit_status"))
    messages = run.get("messages")
    if isinstance(messages, list):
        for message in messages:
            entry = _dict(message)
            if entry.get("severity") == "error":
                problems.append(problem("smartctl error", str(entry.get("string", ""))))
    dev = _dict(doc.get("device"))
    name = _str(dev.get("name"), 256) or device
    if not name:
        argv = run.get("argv")
        if isinstance(argv, list) and argv and isinstance(argv[-1], str) and argv[-1].startswith("/"):
            name = clip(argv[-1], 256)
    health = DiskHealth(
        device=name,
        protocol=protocol_of(dev.get("protocol")),
        model=_str(doc.get("model_name"), 128) or _str(doc.get("scsi_model_name"), 128),
        serial=_str(doc.get("serial_number"), 128),
        firmware=_str(doc.get("firmware_version"), 64)
        or _str(doc.get("scsi_revision"), 64)
        or _str(doc.get("revision"), 64),
        smart_passed=passed if isinstance(passed := _dict(doc.get("smart_status")).get("passed"), bool) else None,
        exit_status=exit_status or 0,
        exit_flags=decode_exit_status(exit_status or 0),
    )
    _ata(doc, health)
    _nvme(doc, health)
    health.grown_defects = _int(doc.get("scsi_grown_defect_list"))
    temperature = _dict(doc.get("temperature")).get("current")
    if (
        isinstance(temperature, int | float)
        and not isinstance(temperature, bool)
        and temperature != 0
        and math.isfinite(temperature)
        and abs(temperature) < 1000
    ):
        # smartctl reports 0 when the device has no sensor (RAID volumes).
        health.temperature_c = float(temperature)
    hours = _int(_dict(doc.get("power_on_time")).get("hours"))
    if hours is not None:
        health.power_on_hours = hours
    return Parsed(health, problems)


def _ata(doc: dict[str, Any], health: DiskHealth) -> None:
    table = _dict(doc.get("ata_smart_attributes")).get("table")
    if not isinstance(table, list):
        return
    for row in table:
        attr = _dict(row)
        field = ATA_ATTRIBUTES.get(_int(attr.get("id")) or -1)
        if field is None:
            continue
        raw = _int(_dict(attr.get("raw")).get("value"))
        if raw is not None:
            setattr(health, field, raw)


def _nvme(doc: dict[str, Any], health: DiskHealth) -> None:
    log = doc.get("nvme_smart_health_information_log")
    if not isinstance(log, dict):
        return
    health.nvme_critical_warning = _int(log.get("critical_warning"))
    health.media_errors = _int(log.get("media_errors"))
    health.percentage_used = _int(log.get("percentage_used"))
    health.available_spare = _int(log.get("available_spare"))
    health.available_spare_threshold = _int(log.get("available_spare_threshold"))
    if health.power_on_hours is None:
        health.power_on_hours = _int(log.get("power_on_hours"))


@dataclass(frozen=True)
class ScannedDevice:
    """One device from `smartctl --scan-open`: what to pass to `smartctl -d TYPE NAME`."""

    name: str
    type: str
    protocol: Protocol = "unknown"


@guarded(list)
def parse_scan_open_json(text: str) -> Parsed[list[ScannedDevice]]:
    """`smartctl --scan-open -j` -> devices with their -d type."""
    problems: list[str] = []
    doc = _load(text, problems)
    if doc is None:
        return Parsed([], problems)
    devices = doc.get("devices")
    if devices is None and _dict(doc.get("smartctl")).get("exit_status") == 0:
        return Parsed([], problems)  # smartctl 7.3 leaves the list out when it found nothing to open
    if not isinstance(devices, list):
        return Parsed([], [*problems, problem("no 'devices' list in scan output", text)])
    found: list[ScannedDevice] = []
    for item in devices:
        entry = _dict(item)
        name, dtype = _str(entry.get("name"), 256), _str(entry.get("type"), 64)
        if name is None or dtype is None:
            problems.append(problem("scan entry without name and type", json.dumps(entry)))
            continue
        found.append(ScannedDevice(name, dtype, protocol_of(entry.get("protocol"))))
    return Parsed(found, problems)


@guarded(list)
def parse_scan_open_text(text: str) -> Parsed[list[ScannedDevice]]:
    """Plain `smartctl --scan-open`: '/dev/sda -d sat # /dev/sda [SAT], ATA device'."""
    found: list[ScannedDevice] = []
    problems: list[str] = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) >= 3 and parts[1] == "-d":
            comment = raw.split("#", 1)[1] if "#" in raw else ""
            kind: Protocol = next((p for k, p in _PROTOCOLS.items() if f"{k} device" in comment.lower()), "unknown")
            found.append(ScannedDevice(clip(parts[0], 256), clip(parts[2], 64), kind))
        else:
            problems.append(problem("not a scan line", raw))
    return Parsed(found, problems)
