"""IPMI besides the SEL entries: `ipmitool sel info`, `sdr list|elist|type X list`, and `mc info`."""

from __future__ import annotations

import re
from typing import Literal

from checker.parsers.common import Parsed, clip, guarded, problem, split_key_value, to_float, to_int
from checker.schemas import SelState, SensorReading

_PSU_NAME = re.compile(r"\bPSU?\s*\d|\bpower supply\b|\bPWS\b", re.IGNORECASE)
_READING = re.compile(r"^(-?\d{1,20}(?:\.\d{1,20})?)\s*(.*)$")
SensorKind = Literal["psu", "fan", "temperature", "voltage", "power", "other"]
_UNIT_KINDS: tuple[tuple[str, SensorKind], ...] = (
    ("degrees", "temperature"),
    ("volt", "voltage"),
    ("rpm", "fan"),
    ("watt", "power"),
)


@guarded(SelState)
def parse_sel_info(text: str) -> Parsed[SelState]:
    """`ipmitool sel info` or FreeIPMI `ipmi-sel --info`: entry count, percent used, overflow and
    the last add time (no entries). FreeIPMI prints no percentage: it is computed from its
    allocation units when they are given."""
    problems: list[str] = []
    fields: dict[str, str] = {}
    for line in text.splitlines():
        kv = split_key_value(line)
        if kv is not None:
            fields.setdefault(" ".join(kv[0].lower().split()), kv[1])
    count = to_int(fields.get("entries", fields.get("number of log entries")))
    percent: float | None = None
    if (raw := fields.get("percent used")) is not None:
        percent = to_float(raw.rstrip("%"))
        if percent is not None and not 0 <= percent <= 100:
            problems.append(problem("percent used out of range", raw))
            percent = None
    elif (units := to_int(fields.get("number of possible allocation units"))) and (
        free := to_int(fields.get("amount of usable free allocation units"))
    ) is not None:
        percent = round(100 * (units - free) / units, 1) if 0 <= free <= units else None
    overflow_text = fields.get("overflow", fields.get("events drop due to lack of space in sel", "")).lower()
    overflow = True if overflow_text in ("true", "yes") else False if overflow_text in ("false", "no") else None
    last_add = fields.get("last add time", fields.get("recent addition timestamp"))
    if count is None and "entries" not in fields and "number of log entries" not in fields:
        problems.append(problem("no 'Entries' line in sel info", text))
    return Parsed(
        SelState(
            entry_count=count if count is not None and count >= 0 else None,
            percent_used=percent,
            overflow=overflow,
            last_add_time=clip(last_add, 64) if last_add else None,
        ),
        problems,
    )


def _sensor_kind(name: str, unit: str | None) -> SensorKind:
    if _PSU_NAME.search(name):
        return "psu"
    low_unit = (unit or "").lower()
    for marker, kind in _UNIT_KINDS:
        if marker in low_unit:
            return kind
    low_name = name.lower()
    if "fan" in low_name:
        return "fan"
    if "temp" in low_name:
        return "temperature"
    return "other"


def _reading(text: str) -> tuple[float | None, str | None]:
    """'11.88 Volts' -> (11.88, 'Volts'); '0x00', 'Not Readable', 'disabled', 'no reading' -> (None, None)."""
    value = text.strip()
    if value.lower().startswith("0x"):
        return None, None
    m = _READING.match(value)
    if m is None:
        return None, None
    unit = m.group(2).strip() or None
    return float(m.group(1)), clip(unit, 32) if unit else None


THRESHOLDS = ("lnr", "lcr", "lnc", "unc", "ucr", "unr")


def _thresholds(cols: list[str]) -> dict[str, float]:
    found: dict[str, float] = {}
    for name, text in zip(THRESHOLDS, cols, strict=False):
        number, _unit = _reading(text)
        if number is not None:
            found[name] = number
    return found


@guarded(list)
def parse_sdr(text: str) -> Parsed[list[SensorReading]]:
    """`ipmitool sdr list` (name | reading | status), `sdr elist` / `sdr type X list`
    (name | id | status | entity | reading), and `ipmitool sensor list` (name | reading | unit | status |
    lnr | lcr | lnc | unc | ucr | unr), whose thresholds are kept."""
    readings: list[SensorReading] = []
    problems: list[str] = []
    for raw in text.splitlines():
        if not raw.strip():
            continue
        cols = [c.strip() for c in raw.split("|")]
        thresholds: dict[str, float] = {}
        if len(cols) == 3:
            name, value, status = cols
        elif len(cols) == 5:
            name, status, value = cols[0], cols[2], cols[4]
        elif len(cols) == 10:
            name, status = cols[0], cols[3]
            value = f"{cols[1]} {cols[2]}" if cols[2] else cols[1]
            thresholds = _thresholds(cols[4:])
        else:
            problems.append(problem("not an sdr line of 3 or 5 columns, nor a sensor list line of 10", raw))
            continue
        if not name:
            problems.append(problem("sdr line without a sensor name", raw))
            continue
        number, unit = _reading(value)
        kind = _sensor_kind(name, unit)
        readings.append(
            SensorReading(
                name=clip(name, 128),
                kind=kind,
                status=clip(status.lower(), 32),
                reading=number,
                unit=unit,
                thresholds=thresholds,
            )
        )
    return Parsed(readings, problems)


@guarded(lambda: None)
def parse_mc_info(text: str) -> Parsed[str | None]:
    """`ipmitool mc info` -> the BMC's 'Firmware Revision' string."""
    for line in text.splitlines():
        kv = split_key_value(line)
        if kv is not None and kv[0] == "Firmware Revision":
            return Parsed(clip(kv[1], 64) if kv[1] else None, [])
    return Parsed(None, [problem("no 'Firmware Revision' in mc info", text)])
