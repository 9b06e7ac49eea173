"""What a simulated Redfish BMC logs: each SEL entry the simulation writes, as the vendor's LogEntry resource.

The simulation writes its BMC events once, as `ipmitool sel elist` lines (checker/sim/logs.py). A host of a
Redfish class (checker/sim/hardware.py `bmc_protocol`) serves the same events the way its vendor's Redfish
service does, and the agent's real parser (checker/parsers/redfish_log.py `parse_log_entry`) turns them into
the report's SelEntry records, as the redfish collector would. So the wording is the vendor's where the
samples in shared/fixtures/redfish show it, and what the parser makes of it is what the centre sees:

- Dell iDRAC9 (`Managers/iDRAC.Embedded.1/LogServices/Sel/Entries`, the R650 sample
  dell-idrac9-r650-sel-entries-*): EntryType SEL, the DMTF SensorType, EntryCode Assert/Deassert (a
  threshold's DMTF code, 'Lower Critical - going low', as the DMTF mockup's Log1 sample has it), a
  SensorNumber, and Dell's message text (EEMI: MEM0001, MEM0701, PSU0001, PSU0003 as the parser's
  DELL_MESSAGES quotes them; a CPU temperature's TMP0203 'CPU 2 temperature is greater than the upper
  critical threshold.', Severity Critical, and TMP0205 'CPU 2 temperature is within range.' when it drops
  back, as Dell's knowledge base article 000123186 quotes an iDRAC9's SEL). An event with no Dell wording we
  can name keeps ipmitool's text. A deasserted threshold event is EntryCode Deassert (the R650 sample's
  deassertions): the threshold codes say only 'going high/low', and the parser reads them as assertions.
- Supermicro (`Systems/1/LogServices/Log1/Entries`, the X10SDV sample supermicro-x10sdv-log1-*): EntryType
  Event, EntryCode Assert, SensorType as served, the message '[ SENSOR ] EVENT' with '@DIMM' for memory
  ('[ OEM ] Correctable ECC @DIMMB1'), and the raw IPMI bytes in Oem.Supermicro.RawEventData (sensor type,
  event type 6Fh for sensor-specific offsets, the offset in EventData1's low nibble; bit 7 of
  EventDirAndType for a deassertion) that the parser decodes first.
"""

from __future__ import annotations

import re
from typing import Any

from checker.parsers.redfish_log import IPMI_OFFSETS, IPMI_SENSOR_TYPES, SENSOR_TYPES, parse_log_entry
from checker.schemas import SelEntry

# ipmitool's sensor type names -> the DMTF LogEntry.SensorType a Dell SEL entry carries (the parser's map, read
# backwards: the first DMTF name of each, e.g. 'Physical Chassis Security' as in the R650 sample).
DMTF_SENSOR_TYPES: dict[str, str] = {}
for _dmtf, _ipmitool in SENSOR_TYPES.items():
    DMTF_SENSOR_TYPES.setdefault(_ipmitool, _dmtf)
IPMI_CODES: dict[str, int] = {name: code for code, name in IPMI_SENSOR_TYPES.items()}
_THRESHOLD = re.compile(r"^(Upper|Lower) (Non-critical|Critical|Non-recoverable) going (high|low)$", re.IGNORECASE)
# IPMI v2.0 table 42-2: the threshold offsets (event type 01h), in ipmitool's order
_THRESHOLD_OFFSETS = (
    "lower non-critical going low", "lower non-critical going high", "lower critical going low",
    "lower critical going high", "lower non-recoverable going low", "lower non-recoverable going high",
    "upper non-critical going low", "upper non-critical going high", "upper critical going low",
    "upper critical going high", "upper non-recoverable going low", "upper non-recoverable going high",
)  # fmt: skip
_DIMM_PREFIX = re.compile(r"^DIMM[\s_]*", re.IGNORECASE)
_PSU_NUMBER = re.compile(r"(\d+)")
_CPU_NUMBER = re.compile(r"^CPU(\d+)")


def _extra(entry: SelEntry) -> str:
    """The elist line's last column (a DIMM's locator, a reading), which the ipmitool parser folds away."""
    columns = [c.strip() for c in entry.raw.split("|")]
    return columns[6] if len(columns) > 6 else ""


def _dimm(entry: SelEntry) -> str:
    return entry.component or _extra(entry)


def _psu_number(entry: SelEntry) -> str:
    m = _PSU_NUMBER.search(entry.component or entry.sensor_name)
    return m.group(1) if m else "1"


def _threshold_code(event: str) -> str | None:
    """ipmitool's 'Lower Critical going low' as the DMTF EntryCode 'Lower Critical - going low'."""
    m = _THRESHOLD.match(event.strip())
    if m is None:
        return None
    level = m.group(2).lower()
    return f"{m.group(1).title()} {level[0].upper()}{level[1:]} - going {m.group(3).lower()}"


def _dell_message(entry: SelEntry) -> str:
    """Dell's text for the events the simulation logs (EEMI), else ipmitool's words."""
    kind, event = entry.sensor_type, entry.event.strip()
    if kind == "Memory" and event in ("Uncorrectable ECC", "Correctable ECC"):
        slot = "DIMM_" + _DIMM_PREFIX.sub("", _dimm(entry))
        if event == "Uncorrectable ECC":  # MEM0001
            return f"Multi-bit memory errors detected on a memory device at location(s) {slot}."
        return f"Correctable memory error rate exceeded for {slot}."  # MEM0701
    if kind == "Power Supply" and event == "Failure detected":  # PSU0001
        return f"Power supply {_psu_number(entry)} failed."
    if kind == "Power Supply" and event == "Power Supply AC lost":  # PSU0003
        return f"Power supply {_psu_number(entry)} has lost input."
    if kind == "Event Logging Disabled" and event == "Log area reset/cleared":
        return "Log cleared."  # the R650 sample's entry 1
    threshold = _threshold_code(event)
    if kind == "Temperature" and threshold is not None and threshold.startswith("Upper"):  # TMP0203 / TMP0205
        name = _CPU_NUMBER.sub(r"CPU \1", entry.sensor_name.removesuffix(" Temp"))
        if entry.direction == "deasserted":
            return f"{name} temperature is within range."
        level = "critical" if "Critical" in threshold or "Non-recoverable" in threshold else "warning"
        return f"{name} temperature is greater than the upper {level} threshold."
    if kind == "Fan" and threshold is not None and threshold.startswith("Lower"):  # FAN0000 / FAN0001
        level = "critical" if "Critical" in threshold else "warning"
        return f"The fan {entry.sensor_name} RPM is less than the lower {level} threshold."
    if kind == "Memory" and _dimm(entry):
        return f"{event} {_dimm(entry)}".strip()
    if kind == "Fan" and entry.sensor_name and threshold is None:
        return f"{entry.sensor_name} {event}".strip()
    return event or f"{kind} {entry.sensor_name}".strip()


def dell_entry(entry: SelEntry, entry_id: int, service: str) -> dict[str, Any]:
    threshold = _threshold_code(entry.event)
    deasserted = entry.direction == "deasserted"
    message = _dell_message(entry)
    critical = "Uncorrectable" in entry.event
    number = IPMI_CODES.get(entry.sensor_type, 0) + 0x40  # ours: iDRAC numbers its own sensors
    if entry.sensor_type == "Temperature":  # one number per temperature sensor (CPU1 Temp, CPU2 Temp, Inlet)
        critical = threshold is not None and "Non-critical" not in threshold  # TMP0203: Critical
        m = _CPU_NUMBER.match(entry.sensor_name)
        number = 0x30 + (int(m.group(1)) % 0x10 if m else 0)
    doc: dict[str, Any] = {
        "@odata.id": f"{service}/{entry_id}",
        "Id": str(entry_id),
        "Name": f"Log Entry {entry_id}",
        "EntryType": "SEL",
        "EntryCode": "Deassert" if deasserted else (threshold or "Assert"),
        "SensorType": DMTF_SENSOR_TYPES.get(entry.sensor_type, entry.sensor_type),
        "SensorNumber": number,
        "Message": message,
        "Severity": "OK" if deasserted else ("Critical" if critical else "Warning"),
    }
    if entry.timestamp is not None:
        doc["Created"] = entry.timestamp.isoformat()
    return doc


def _raw_bytes(entry: SelEntry) -> dict[str, str]:
    """The IPMI event's bytes as Supermicro serves them: sensor type, event/reading type, EventData1's offset."""
    code = IPMI_CODES.get(entry.sensor_type, 0xC0)  # 0xC0: OEM reserved
    event = entry.event.strip().lower()
    offsets = [o.lower() for o in IPMI_OFFSETS.get(entry.sensor_type, ())]
    if event in offsets:
        event_type, offset = 0x6F, offsets.index(event)
    elif event in _THRESHOLD_OFFSETS:
        event_type, offset = 0x01, _THRESHOLD_OFFSETS.index(event)
    else:
        event_type, offset = 0x6F, 0x0F  # an offset the parser does not name: the message says it
    if entry.direction == "deasserted":
        event_type |= 0x80
    return {
        "EventDirAndType": f"0x{event_type:02X}",
        "SensorType": f"0x{code:02X}",
        "SensorName": "OEM" if entry.sensor_type == "Memory" else entry.sensor_name or "OEM",
        "EventData1": f"0x{0xA0 | offset:02X}",
        "EventData2": "0xFF",
        "EventData3": "0xFF",
    }


def supermicro_entry(entry: SelEntry, entry_id: int, service: str) -> dict[str, Any]:
    raw = _raw_bytes(entry)
    message = f"[ {raw['SensorName']} ] {entry.event.strip()}".rstrip()
    if entry.sensor_type == "Memory" and _dimm(entry):
        slot = _dimm(entry).replace(" ", "")
        message += f" @{slot if 'DIMM' in slot.upper() else 'DIMM' + slot}"
    doc: dict[str, Any] = {
        "@odata.id": f"{service}/{entry_id}",
        "Id": str(entry_id),
        "Name": f"Log Entry {entry_id}",
        "EntryType": "Event",
        "EntryCode": "Deassert" if entry.direction == "deasserted" else "Assert",
        "SensorType": DMTF_SENSOR_TYPES.get(entry.sensor_type, "Other Units-based Sensor"),
        "SensorNumber": 0,
        "Message": message,
        "Oem": {"Supermicro": {"RawEventData": raw}},
    }
    if entry.timestamp is not None:
        doc["Created"] = entry.timestamp.isoformat()
    return doc


VENDOR_ENTRIES = {"dell": dell_entry, "supermicro": supermicro_entry}


def as_redfish(entry: SelEntry, vendor: str, service: str) -> SelEntry:
    """An IPMI SEL entry of the simulation as the vendor's Redfish service serves it, read by the agent's parser.
    The record id stays the sequence number (the collector numbers entries itself; here one service)."""
    served = VENDOR_ENTRIES[vendor](entry, entry.record_id, service)
    parsed = parse_log_entry(served, service)
    if parsed is None:  # every entry built above has an Id
        raise ValueError(f"no Id in {served!r}")
    return parsed.model_copy(update={"record_id": entry.record_id})
