"""IPMI System Event Log: `ipmitool sel list|elist`, `ipmitool -c sel list` and FreeIPMI `ipmi-sel`.

ipmitool prints the sensor column as '<sensor type> <sensor name>' (elist, from the SDR) or
'<sensor type> #0x<number>' (list); the type is split off with ipmitool's own type names.
Record ids are hex in ipmitool and decimal in FreeIPMI. BMC clocks are often local time, so the
caller passes the zone (default UTC); 'Pre-Init'/'PostInit' dates mean the clock was not set.
"""

from __future__ import annotations

import datetime as dt
import re

from checker.parsers.common import Parsed, clip, guarded, month_number, plausible, problem, to_int
from checker.schemas import MAX_SEL_ENTRIES, SelEntry

# ipmitool's sensor type names (lib/ipmi_sel.c, both the old and the 1.8.19+ spellings).
SENSOR_TYPES: tuple[str, ...] = tuple(
    sorted(
        {
            "Temperature", "Voltage", "Current", "Fan", "Physical Security", "Platform Security", "Processor",
            "Power Supply", "Power Unit", "Cooling Device", "Other", "Memory", "Drive Slot / Bay", "Drive Slot (Bay)",
            "POST Memory Resize", "System Firmwares", "System Firmware Progress", "System Firmware",
            "Event Logging Disabled", "Watchdog1", "Watchdog 1", "System Event", "Critical Interrupt", "Button",
            "Module / Board", "Module/Board", "Microcontroller", "Microcontroller/Coprocessor", "Add-in Card",
            "Chassis", "Chip Set", "Other FRU", "Cable / Interconnect", "Cable/Interconnect", "Terminator",
            "System Boot Initiated", "System Boot/Restart Initiated", "Boot Error", "OS Boot", "OS Critical Stop",
            "Slot / Connector", "Slot/Connector", "System ACPI Power State", "Watchdog2", "Watchdog 2",
            "Platform Alert", "Entity Presence", "Monitor ASIC", "LAN", "Management Subsystem Health", "Battery",
            "Session Audit", "Version Change", "FRU State", "Other Units-based Sensor", "Unknown", "OEM reserved",
        },
        key=len,
        reverse=True,
    )
)  # fmt: skip

_DIMM = re.compile(r"\b(?:(?:CPU|P|Proc(?:essor)?)\s*\d{1,20}[\s_-]*)?DIMM[\s_#-]*[A-Z]?\d{1,20}\w*", re.IGNORECASE)
_PSU = re.compile(r"\bPSU?\s*\d{1,20}\b", re.IGNORECASE)
_DIRECTIONS = {"asserted": "asserted", "deasserted": "deasserted"}


def split_sensor(text: str) -> tuple[str, str]:
    """'Power Supply PS1 Status' -> ('Power Supply', 'PS1 Status'); unknown types keep the whole text."""
    for name in SENSOR_TYPES:
        if text == name:
            return name, ""
        if text.startswith(name + " "):
            return name, text[len(name) + 1 :].strip()
    return text, ""


def component_of(sensor_type: str, sensor_name: str, *extra: str) -> str | None:
    """The DIMM, PSU or fan an entry is about, if it names one."""
    for text in (*extra, sensor_name):
        if text and (m := _DIMM.search(text)) is not None:
            return m.group(0)
    if sensor_type == "Memory" and sensor_name and "dimm" in sensor_name.lower():
        return sensor_name
    if (m := _PSU.search(sensor_name)) is not None:
        return m.group(0).replace(" ", "")
    if sensor_type == "Power Supply":
        return f"Power Supply {sensor_name}".strip()
    if sensor_type == "Fan" or "fan" in sensor_name.lower():
        return sensor_name if sensor_name and not sensor_name.startswith("#") else f"Fan {sensor_name}".strip()
    return None


def _ipmitool_time(date: str, time: str, tz: dt.tzinfo) -> dt.datetime | None:
    m = re.fullmatch(r"(\d{1,2})/(\d{1,2})/(\d{4})", date.strip())
    t = re.fullmatch(r"(\d{1,2}):(\d{2}):(\d{2})", time.strip())
    if m is None or t is None:
        return None
    try:
        hh, mm, ss = (int(x) for x in t.groups())
        local = dt.datetime(int(m.group(3)), int(m.group(1)), int(m.group(2)), hh, mm, ss, tzinfo=tz)
    except ValueError:
        return None
    return plausible(local.astimezone(dt.UTC))


def _freeipmi_time(date: str, time: str, tz: dt.tzinfo) -> dt.datetime | None:
    m = re.fullmatch(r"([A-Za-z]{3})-(\d{1,2})-(\d{4})", date.strip())
    t = re.fullmatch(r"(\d{1,2}):(\d{2}):(\d{2})", time.strip())
    if m is None or t is None or (month := month_number(m.group(1))) is None:
        return None
    try:
        hh, mm, ss = (int(x) for x in t.groups())
        local = dt.datetime(int(m.group(3)), month, int(m.group(2)), hh, mm, ss, tzinfo=tz)
    except ValueError:
        return None
    return plausible(local.astimezone(dt.UTC))


def _direction(text: str) -> str | None:
    return _DIRECTIONS.get(text.strip().lower())


def _entry(
    record_id: int, stamp: dt.datetime | None, sensor: str, event: str, direction: str | None, extra: str, raw: str
) -> SelEntry:
    sensor_type, sensor_name = split_sensor(sensor.strip())
    return SelEntry(
        record_id=record_id,
        timestamp=stamp,
        sensor_type=clip(sensor_type, 128),
        sensor_name=clip(sensor_name, 128),
        event=clip(event.strip(), 256),
        direction="asserted" if direction == "asserted" else "deasserted" if direction == "deasserted" else None,
        component=clip(c, 128) if (c := component_of(sensor_type, sensor_name, extra)) else None,
        raw=clip(raw, 4096),
    )


@guarded(list)
def parse_ipmitool_sel(text: str, tz: dt.tzinfo = dt.UTC) -> Parsed[list[SelEntry]]:
    """`ipmitool sel list`, `sel elist` and `-c sel list` (CSV) -> SelEntry list.

    At most MAX_SEL_ENTRIES are returned, the newest ones.
    """
    entries: list[SelEntry] = []
    problems: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or line.startswith("SEL has no entries"):
            continue
        if "|" in line:
            cols = [c.strip() for c in line.split("|")]
        elif line.count(",") >= 4:
            cols = [c.strip() for c in line.split(",")]
        else:
            problems.append(problem("not a SEL record", line))
            continue
        record_id = to_int(cols[0], 16)
        if record_id is None or record_id < 0 or len(cols) < 5:
            problems.append(problem("SEL record without a hex record id and 5 columns", line))
            continue
        date, time, sensor, event = cols[1], cols[2], cols[3], cols[4]
        stamp = _ipmitool_time(date, time, tz)
        direction = _direction(cols[5]) if len(cols) > 5 else None
        extra = " | ".join(cols[6:]) if len(cols) > 6 else ""
        if len(cols) > 5 and direction is None:
            # Threshold-style line ('VBAT | 38h | lcr | 7.18 | 2.54 Volts'): keep it readable, flag it.
            problems.append(problem("SEL record with no Asserted/Deasserted column", line))
            event = " | ".join(cols[4:])
            extra = ""
        entries.append(_entry(record_id, stamp, sensor, event, direction, extra, raw))
    return _bounded(entries, problems)


@guarded(list)
def parse_freeipmi_sel(text: str, tz: dt.tzinfo = dt.UTC) -> Parsed[list[SelEntry]]:
    """FreeIPMI `ipmi-sel` table (columns taken from its header line; ids are decimal)."""
    entries: list[SelEntry] = []
    problems: list[str] = []
    header: list[str] | None = None
    for raw in text.splitlines():
        if not raw.strip():
            continue
        cols = [c.strip() for c in raw.split("|")]
        if header is None:
            if cols and cols[0] == "ID":
                header = [c.lower() for c in cols]
            else:
                problems.append(problem("ipmi-sel output without its header line", raw))
            continue
        row = dict(zip(header, cols, strict=False))
        record_id = to_int(row.get("id"))
        if record_id is None or record_id < 0 or len(cols) < 4:
            problems.append(problem("not an ipmi-sel row", raw))
            continue
        stamp = _freeipmi_time(row.get("date", ""), row.get("time", ""), tz)
        name = row.get("name", "")
        sensor_type = row.get("type", "")
        event = row.get("event", "")
        direction = _direction(row.get("event direction", row.get("direction", "")))
        entries.append(
            SelEntry(
                record_id=record_id,
                timestamp=stamp,
                sensor_type=clip(sensor_type, 128),
                sensor_name=clip(name, 128),
                event=clip(event, 256),
                direction="asserted"
                if direction == "asserted"
                else "deasserted"
                if direction == "deasserted"
                else None,
                component=clip(c, 128) if (c := component_of(sensor_type, name, event)) else None,
                raw=clip(raw, 4096),
            )
        )
    return _bounded(entries, problems)


@guarded(list)
def parse_sel(text: str, tz: dt.tzinfo = dt.UTC) -> Parsed[list[SelEntry]]:
    """Any supported SEL listing: FreeIPMI when its 'ID | Date' header is present, else ipmitool."""
    for line in text.splitlines():
        if line.strip():
            if re.match(r"\s*ID\s*\|\s*Date", line):
                return parse_freeipmi_sel(text, tz)
            break
    return parse_ipmitool_sel(text, tz)


def _bounded(entries: list[SelEntry], problems: list[str]) -> Parsed[list[SelEntry]]:
    if len(entries) > MAX_SEL_ENTRIES:
        problems.append(f"{len(entries)} SEL entries, only the newest {MAX_SEL_ENTRIES} kept")
        entries = entries[-MAX_SEL_ENTRIES:]
    return Parsed(entries, problems)
