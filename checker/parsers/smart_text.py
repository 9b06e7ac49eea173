"""SMART from plain text: `smartctl -a` (hosts whose smartctl predates JSON) and `nvme smart-log`.

Both become DiskHealth. Numbers may carry thousands separators in either locale style
('1,016', '1.954.515'), which first_int strips.
"""

from __future__ import annotations

import re

from checker.parsers.common import Parsed, clip, first_int, guarded, int64, problem
from checker.parsers.smart import ATA_ATTRIBUTES, Protocol, decode_exit_status
from checker.schemas import DiskHealth

_ATTRIBUTE_ROW = re.compile(
    r"^\s*(?P<id>\d{1,3})\s+(?P<name>\S+)\s+0x[0-9a-fA-F]{4}\s+\d{1,20}\s+\d{1,20}\s+\S+\s+\S+\s+\S+\s+\S+\s+(?P<raw>\S.*)$"
)
_KEY_VALUE = re.compile(r"^(?P<key>[A-Za-z][^:=]*?)\s*[:=]\s*(?P<value>.*?)\s*$")


def _fields(text: str) -> dict[str, str]:
    """'Key:   value' lines, first occurrence wins, keys lower-cased with single spaces."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        m = _KEY_VALUE.match(line.strip())
        if m is not None:
            key = " ".join(m.group("key").lower().split())
            found.setdefault(key, m.group("value"))
    return found


def _nonneg(value: int | None) -> int | None:
    return value if value is not None and value >= 0 else None


def _temperature(text: str | None) -> float | None:
    value = first_int(text)
    return float(value) if value else None


@guarded(lambda: None)
def parse_smartctl_text(text: str, device: str = "", exit_status: int = 0) -> Parsed[DiskHealth | None]:
    """`smartctl -a DEVICE` text (ATA, NVMe, SCSI/SAS) -> DiskHealth; None when it is not smartctl output."""
    if "smartctl" not in text[:400] and "=== START OF" not in text:
        return Parsed(None, [problem("not smartctl output", text)])
    problems: list[str] = []
    f = _fields(text)
    protocol: Protocol = "unknown"
    if "nvme version" in f or "SMART/Health Information (NVMe" in text or "model number" in f:
        protocol = "NVMe"
    elif "transport protocol" in f or "vendor" in f or "product" in f:
        protocol = "SCSI"
    elif "device model" in f or "ID# ATTRIBUTE_NAME" in text:
        protocol = "ATA"
    model = f.get("device model") or f.get("model number")
    if model is None and "product" in f:
        model = " ".join(x for x in (f.get("vendor"), f.get("product")) if x)
    health = DiskHealth(
        device=clip(device, 256),
        protocol=protocol,
        model=clip(model, 128) if model else None,
        serial=clip(s, 128) if (s := f.get("serial number")) else None,
        firmware=clip(fw, 64) if (fw := f.get("firmware version") or f.get("revision")) else None,
        exit_status=max(exit_status, 0),
        exit_flags=decode_exit_status(exit_status),
    )
    verdict = f.get("smart overall-health self-assessment test result") or f.get("smart health status")
    if verdict:
        health.smart_passed = verdict.upper().startswith(("PASSED", "OK"))
    for line in text.splitlines():
        m = _ATTRIBUTE_ROW.match(line)
        if m is None:
            continue
        attr_id = int(m.group("id"))
        raw = first_int(m.group("raw").split()[0])
        if attr_id in ATA_ATTRIBUTES:
            setattr(health, ATA_ATTRIBUTES[attr_id], _nonneg(raw))
        elif attr_id == 9:
            health.power_on_hours = _nonneg(raw)
        elif attr_id in (194, 190) and health.temperature_c is None and raw:
            health.temperature_c = float(raw)
    if protocol == "NVMe":
        health.nvme_critical_warning = _nonneg(_hex_or_int(f.get("critical warning")))
        health.media_errors = _nonneg(first_int(f.get("media and data integrity errors")))
        health.percentage_used = _nonneg(first_int(f.get("percentage used")))
        health.available_spare = _nonneg(first_int(f.get("available spare")))
        health.available_spare_threshold = _nonneg(first_int(f.get("available spare threshold")))
        health.power_on_hours = _nonneg(first_int(f.get("power on hours")))
        health.temperature_c = _temperature(f.get("temperature"))
    elif protocol == "SCSI":
        health.grown_defects = _nonneg(first_int(f.get("elements in grown defect list")))
        health.temperature_c = _temperature(f.get("current drive temperature") or f.get("current temperature"))
        health.percentage_used = _nonneg(first_int(f.get("percentage used endurance indicator")))
        hours = f.get("accumulated power on time, hours") or f.get("number of hours powered up")
        health.power_on_hours = _nonneg(first_int(hours))
    if health.smart_passed is None and "SMART support is: Unavailable" not in " ".join(text.split()):
        problems.append("no SMART health verdict in smartctl output")
    return Parsed(health, problems)


def _hex_or_int(text: str | None) -> int | None:
    if not text:
        return None
    token = text.split()[0]
    try:
        return int64(int(token, 16) if token.lower().startswith("0x") else int(token))
    except ValueError:
        return None


@guarded(lambda: None)
def parse_nvme_smart_log(text: str, device: str = "") -> Parsed[DiskHealth | None]:
    """`nvme smart-log DEVICE` text (nvme-cli 1.x 'temperature : 38 C' and 2.x '43 °C (316 K)')."""
    m = re.search(r"Smart Log for NVME device:(\S+)", text)
    f = _fields(text)
    if m is None and "critical_warning" not in f:
        return Parsed(None, [problem("not nvme smart-log output", text)])
    name = device or (f"/dev/{m.group(1)}" if m is not None else "")
    health = DiskHealth(device=clip(name, 256), protocol="NVMe")
    health.nvme_critical_warning = _nonneg(_hex_or_int(f.get("critical_warning")))
    health.media_errors = _nonneg(first_int(f.get("media_errors")))
    health.percentage_used = _nonneg(first_int(f.get("percentage_used")))
    health.available_spare = _nonneg(first_int(f.get("available_spare")))
    health.available_spare_threshold = _nonneg(first_int(f.get("available_spare_threshold")))
    health.power_on_hours = _nonneg(first_int(f.get("power_on_hours")))
    temperature = f.get("temperature", "")
    if (kelvin := re.fullmatch(r"(\d{1,20})\s*K", temperature.strip())) is not None:
        health.temperature_c = float(int(kelvin.group(1)) - 273)
    else:
        health.temperature_c = _temperature(temperature)
    problems = [] if health.nvme_critical_warning is not None else ["no critical_warning in nvme smart-log"]
    return Parsed(health, problems)
