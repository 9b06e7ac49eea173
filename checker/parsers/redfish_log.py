"""Redfish LogEntry collections (Systems|Managers/{id}/LogServices/{id}/Entries) -> SelEntry records.

The entries land in the report's `sel` section, so they are written the way ipmitool writes a SEL
entry and the centre's SEL deriver (remediator/derive/sel.py) reads them unchanged: `sensor_type` is
ipmitool's name for the IPMI sensor type, and `event` starts with ipmitool's text for the event offset
where the entry lets us know it ("Correctable ECC", "Power Supply AC lost", "Log area reset/cleared"),
followed by the BMC's own Message. Where nothing says what kind of sensor an entry is about, the
sensor type is the vendor's own category ("Dell Audit", "HPE Network"), which no deriver reads as a
hardware kind: a 'Critical' entry that is not a hardware fault (Dell SWC9005 raised by a crawl, a
LOG007 repeat, USR logins) must never look like one.

What says the kind, in order of trust:
1. IPMI raw event bytes (Supermicro Oem.Supermicro.RawEventData): sensor type and offset decoded per
   IPMI v2.0 table 42-3 (`IPMI_SENSOR_TYPES`, `IPMI_OFFSETS`).
2. The entry's SensorType (DMTF LogEntry.SensorType enum), mapped to ipmitool's names (`SENSOR_TYPES`).
3. A vendor registry: Dell MessageIds (`DELL_MESSAGES`), OpenBMC's registry (`OPENBMC_MESSAGES`), HPE IML
   ClassDescription (`HPE_CLASSES`).
4. The Message text, only for the sensor types above (`MESSAGE_RULES`), or for vendor entries that are
   in a hardware category (HPE IML; never Dell Audit/Configuration entries).

Direction: EntryCode 'Assert'/'Deassert'; a DMTF threshold EntryCode ('Upper Critical - going high')
is an assertion; HPE marks a condition fixed with Oem.Hpe.Repaired (and Severity 'Repaired'), which is
its deassertion. Record ids: the entry's Id when it is a decimal number (it is on every sample, but
Redfish Ids are strings and not guaranteed numeric), else 0; `entry_id` keeps the Id as served, and the
collector numbers the records itself (docs/agent.md, "Redfish").
"""

from __future__ import annotations

import json
import re
from typing import Any

from checker.parsers.common import Parsed, clip, guarded, int64, problem
from checker.parsers.ipmi_sel import component_of
from checker.parsers.redfish_common import created, obj, odata_id, text
from checker.schemas import MAX_SEL_ENTRIES, SelEntry

# DMTF LogEntry.v1_x SensorType enum -> ipmitool's sensor type names (ipmitool lib/ipmi_sel.c, the
# names checker/parsers/ipmi_sel.py splits on). Values the enum shares with ipmitool map to themselves.
SENSOR_TYPES: dict[str, str] = {
    "Platform Security Violation Attempt": "Platform Security",
    "Physical Chassis Security": "Physical Security",
    "Power Supply / Converter": "Power Supply",
    "Power Supply": "Power Supply",
    "PowerUnit": "Power Unit",
    "Power Unit": "Power Unit",
    "CoolingDevice": "Cooling Device",
    "Drive Slot/Bay": "Drive Slot / Bay",
    "Button/Switch": "Button",
    "Module/Board": "Module / Board",
    "Microcontroller/Coprocessor": "Microcontroller",
    "ChipSet": "Chip Set",
    "Cable/Interconnect": "Cable / Interconnect",
    "SystemBoot/Restart": "System Boot Initiated",
    "BaseOSBoot/InstallationStatus": "OS Boot",
    "OS Stop/Shutdown": "OS Critical Stop",
    "Slot/Connector": "Slot / Connector",
    "System ACPI PowerState": "System ACPI Power State",
    "Watchdog": "Watchdog2",
    "Monitor ASIC/IC": "Monitor ASIC",
    "FRUState": "FRU State",
    **{
        name: name
        for name in (
            "Temperature", "Voltage", "Current", "Fan", "Processor", "Other Units-based Sensor", "Memory",
            "POST Memory Resize", "System Firmware Progress", "Event Logging Disabled", "System Event",
            "Critical Interrupt", "Add-in Card", "Chassis", "Other FRU", "Terminator", "Boot Error", "Platform Alert",
            "Entity Presence", "LAN", "Management Subsystem Health", "Battery", "Session Audit", "Version Change",
        )
    },
}  # fmt: skip

# IPMI v2.0 table 42-3: sensor type codes, named as ipmitool names them.
IPMI_SENSOR_TYPES: dict[int, str] = {
    0x01: "Temperature", 0x02: "Voltage", 0x03: "Current", 0x04: "Fan", 0x05: "Physical Security",
    0x06: "Platform Security", 0x07: "Processor", 0x08: "Power Supply", 0x09: "Power Unit", 0x0A: "Cooling Device",
    0x0B: "Other Units-based Sensor", 0x0C: "Memory", 0x0D: "Drive Slot / Bay", 0x0E: "POST Memory Resize",
    0x0F: "System Firmware Progress", 0x10: "Event Logging Disabled", 0x11: "Watchdog1", 0x12: "System Event",
    0x13: "Critical Interrupt", 0x14: "Button", 0x15: "Module / Board", 0x16: "Microcontroller", 0x17: "Add-in Card",
    0x18: "Chassis", 0x19: "Chip Set", 0x1A: "Other FRU", 0x1B: "Cable / Interconnect", 0x1C: "Terminator",
    0x1D: "System Boot Initiated", 0x1E: "Boot Error", 0x1F: "OS Boot", 0x20: "OS Critical Stop",
    0x21: "Slot / Connector", 0x22: "System ACPI Power State", 0x23: "Watchdog2", 0x24: "Platform Alert",
    0x25: "Entity Presence", 0x26: "Monitor ASIC", 0x27: "LAN", 0x28: "Management Subsystem Health", 0x29: "Battery",
    0x2A: "Session Audit", 0x2B: "Version Change", 0x2C: "FRU State",
}  # fmt: skip

# IPMI v2.0 table 42-3 sensor-specific offsets (event type 6Fh), in ipmitool's words
# (lib/ipmi_sel.c sensor_specific_event_types), for the sensor types the centre classifies.
IPMI_OFFSETS: dict[str, tuple[str, ...]] = {
    "Physical Security": (
        "General Chassis intrusion", "Drive Bay intrusion", "I/O Card area intrusion", "Processor area intrusion",
        "System unplugged from LAN", "Unauthorized dock", "FAN area intrusion",
    ),
    "Processor": (
        "IERR", "Thermal Trip", "FRB1/BIST failure", "FRB2/Hang in POST failure",
        "FRB3/Processor startup/init failure", "Configuration Error", "SM BIOS Uncorrectable CPU-complex Error",
        "Presence detected", "Disabled", "Terminator presence detected", "Throttled",
        "Uncorrectable machine check exception", "Correctable machine check error",
    ),
    "Power Supply": (
        "Presence detected", "Failure detected", "Predictive failure", "Power Supply AC lost",
        "AC lost or out-of-range", "AC out-of-range, but present", "Config Error",
    ),
    "Power Unit": (
        "Power off/down", "Power cycle", "240VA power down", "Interlock power down", "AC lost",
        "Soft-power control failure", "Failure detected", "Predictive failure",
    ),
    "Memory": (
        "Correctable ECC", "Uncorrectable ECC", "Parity", "Memory Scrub Failed", "Memory Device Disabled",
        "Correctable ECC logging limit reached", "Presence Detected", "Configuration Error", "Spare", "Throttled",
        "Critical Overtemperature",
    ),
    "Event Logging Disabled": (
        "Correctable memory error logging disabled", "Event logging disabled", "Log area reset/cleared",
        "All event logging disabled", "Log full", "Log almost full",
    ),
    "Critical Interrupt": (
        "NMI/Diag Interrupt", "Bus Timeout", "I/O Channel check NMI", "Software NMI", "PCI PERR", "PCI SERR",
        "EISA failsafe timeout", "Bus Correctable error", "Bus Uncorrectable error", "Fatal NMI", "Bus Fatal Error",
        "Bus Degraded",
    ),
}  # fmt: skip

# Dell iDRAC MessageIds (Dell "Event and Error Message Reference" (EEMI) for iDRAC9; MEM0701/MEM0702 as
# Dell KB 000141221 quotes them, MEM0001 and CPU0000 as KB 000137261 does, MEM8000 as Dell's "Memory
# Errors and PowerEdge YX4X Server Memory RAS Features" describes it) -> (sensor type, ipmitool event).
DELL_MESSAGES: dict[str, tuple[str, str]] = {
    "MEM0001": ("Memory", "Uncorrectable ECC"),  # "Multi-bit memory errors detected on a memory device at ..."
    "MEM0701": ("Memory", "Correctable ECC"),  # "Correctable memory error rate exceeded for DIMM_xx." (Warning)
    "MEM0702": ("Memory", "Correctable ECC"),  # the same, Critical
    "MEM8000": ("Memory", "Correctable ECC logging limit reached"),  # "Correctable memory error logging disabled ..."
    "PSU0001": ("Power Supply", "Failure detected"),  # "Power supply %1 failed."
    "PSU0002": ("Power Supply", "Predictive failure"),  # "A predictive failure detected on power supply %1."
    "PSU0003": ("Power Supply", "Power Supply AC lost"),  # "Power supply %1 has lost input."
    "CPU0000": ("Processor", "IERR"),  # "CPU %1 has an internal error (IERR)."
    "SEC0000": ("Physical Security", "General Chassis intrusion"),  # "The chassis is open while the power is on."
    "SEC0033": ("Physical Security", "General Chassis intrusion"),  # "The chassis is open while the power is off."
}
# Dell MessageId prefixes that name a hardware subsystem (EEMI chapters); any other prefix (USR, LOG, SWC,
# RAC, JCP, LIC, SYS ...) is about people, the log itself or iDRAC's own jobs, never a hardware kind.
DELL_PREFIXES: dict[str, str] = {
    "MEM": "Memory", "PSU": "Power Supply", "PWR": "Power Unit", "FAN": "Fan", "TMP": "Temperature",
    "CPU": "Processor", "VLT": "Voltage", "BAT": "Battery", "SEC": "Physical Security",
}  # fmt: skip
# OpenBMC's message registry (bmcweb redfish-core/include/registries/openbmc_message_registry.hpp), the
# MessageId's last part ('OpenBMC.0.1.MemoryECCCorrectable') -> (sensor type, ipmitool event).
OPENBMC_MESSAGES: dict[str, tuple[str, str]] = {
    "MemoryECCCorrectable": ("Memory", "Correctable ECC"),  # "Memory ECC correctable error. Socket=%1 ..."
    "ADDDCCorrectable": ("Memory", "Correctable ECC"),  # "ADDDC Correctable Error.Socket=%1 ..."
    "MemoryECCUncorrectable": ("Memory", "Uncorrectable ECC"),  # "Memory ECC uncorrectable error. ..."
    "PowerSupplyPowerLost": ("Power Supply", "Power Supply AC lost"),  # "Power supply %1 power lost."
    "PowerSupplyFailed": ("Power Supply", "Failure detected"),  # "Power supply %1 failed."
    "PowerSupplyFailurePredicted": ("Power Supply", "Predictive failure"),
    "ChassisIntrusionDetected": ("Physical Security", "General Chassis intrusion"),
}
# HPE IML Oem.Hpe.ClassDescription -> sensor type (the sample's class 0x0B 'Power' links its codes at
# www.hpe.com/support/class0x000bcode0x0052-gen10; HPE's "Integrated Management Log messages" guide).
HPE_CLASSES: dict[str, str] = {"power": "Power Unit", "main memory": "Memory", "memory": "Memory", "cooling": "Fan"}

# Message text -> (sensor type, ipmitool event), first match wins (uncorrectable before correctable:
# one contains the other; input loss before failure). Our own reading of the vendors' wording.
MESSAGE_RULES: tuple[tuple[str, str, re.Pattern[str]], ...] = tuple(
    (kind, event, re.compile(pattern, re.IGNORECASE))
    for kind, event, pattern in (
        ("Memory", "Uncorrectable ECC", r"uncorrectable (?:ecc|memory)|multi-?bit (?:memory |ecc )?error"),
        ("Memory", "Correctable ECC", r"correct(?:able|ed) (?:ecc|memory error)|single-?bit (?:memory |ecc )?error"),
        ("Power Supply", "Power Supply AC lost", r"input power loss|\bac lost|input lost|lost input|unplugged power"),
        ("Power Supply", "Predictive failure", r"power supply.*predictive failure"),
        ("Power Supply", "Failure detected", r"power supply.*\bfail(?:ed|ure)\b"),
        ("Power Unit", "Redundancy Lost", r"power supplies not redundant|power.*redundancy (?:is )?lost"),
        ("Fan", "Failure detected", r"\bfan\b.*\bfail(?:ed|ure)\b"),
        ("Physical Security", "General Chassis intrusion", r"chassis is (?:open|closed)|chassis intrusion"),
        ("Event Logging Disabled", "Log area reset/cleared", r"\b(?:log|sel|iml)\b (?:was |area )?(?:cleared|reset)"),
        ("Critical Interrupt", "Bus Uncorrectable error", r"bus uncorrectable|uncorrectable (?:pcie|bus) error"),
        ("Critical Interrupt", "PCI SERR", r"\bserr\b"),
        ("Critical Interrupt", "PCI PERR", r"\bperr\b"),
    )
)
_PSU_NUMBER = re.compile(r"\bpower supply\s*(\d{1,3})\b|\bPSU\.Slot\.(\d{1,3})\b|\bPS\s?(\d{1,3})\b", re.IGNORECASE)
# HPE's IML names a DIMM '(Processor 1, DIMM 3)'; its Memory resources' DeviceLocator is 'PROC 1 DIMM 3'.
_HPE_DIMM = re.compile(r"\bProcessor (\d{1,3}), (?:DIMM|Memory Module) (\d{1,3})\b", re.IGNORECASE)
_THRESHOLD_CODE = re.compile(r"^(Upper|Lower) (Non-critical|Critical|Non-recoverable) - going (high|low)$")
CLEARED_EVENT = "Log area reset/cleared"


def is_log_cleared(entry: SelEntry) -> bool:
    """The entry says its log was cleared (ipmitool's text, as the centre's is_clear reads it)."""
    return CLEARED_EVENT.lower() in entry.event.lower() and entry.direction != "deasserted"


def _hex_byte(value: object) -> int | None:
    if not isinstance(value, str) or not re.fullmatch(r"0[xX][0-9a-fA-F]{1,2}", value.strip()):
        return None
    return int(value.strip(), 16)


def _raw_event(entry: dict[str, Any]) -> tuple[str | None, str | None, str | None]:
    """(sensor type, event text, direction) from Supermicro's raw IPMI bytes, where present."""
    raw = obj(obj(obj(entry.get("Oem")).get("Supermicro")).get("RawEventData"))
    code, dir_type, data1 = (_hex_byte(raw.get(k)) for k in ("SensorType", "EventDirAndType", "EventData1"))
    if code is None:
        return None, None, None
    kind = IPMI_SENSOR_TYPES.get(code, "OEM reserved" if code >= 0xC0 else None)
    event = direction = None
    if dir_type is not None:
        direction = "deasserted" if dir_type & 0x80 else "asserted"
        offsets = IPMI_OFFSETS.get(kind or "")
        if (dir_type & 0x7F) == 0x6F and data1 is not None and offsets and (data1 & 0x0F) < len(offsets):
            event = offsets[data1 & 0x0F]
    return kind, event, direction


def _by_message(message: str, kind: str | None) -> tuple[str | None, str | None]:
    for rule_kind, event, pattern in MESSAGE_RULES:
        if (kind is None or rule_kind == kind) and pattern.search(message):
            return rule_kind, event
    return kind, None


def _classify(entry: dict[str, Any], message: str) -> tuple[str, str | None, str | None]:
    """(sensor type, ipmitool event or None, direction from raw bytes or None)."""
    kind, event, raw_direction = _raw_event(entry)
    served = text(entry, "SensorType", 64)
    if kind is None and served is not None:
        kind = SENSOR_TYPES.get(served)
    oem = obj(entry.get("Oem"))
    message_id = text(entry, "MessageId", 64) or ""
    if kind is None and ("Dell" in oem or entry.get("OemRecordFormat") == "Dell"):
        short = message_id.rsplit(".", 1)[-1]  # 'IDRAC.2.8.MEM0001' -> 'MEM0001'
        if short in DELL_MESSAGES:
            kind, event = DELL_MESSAGES[short]
            return kind, event, raw_direction
        kind = DELL_PREFIXES.get(short[:3])
        if kind is None:  # not hardware: the vendor's category, and no message rule applies
            category = text(obj(oem.get("Dell")), "Category", 32) or "Oem"
            return f"Dell {category}", None, raw_direction
    if kind is None and message_id.startswith("OpenBMC.") and message_id.count(".") >= 3:
        known = OPENBMC_MESSAGES.get(message_id.rsplit(".", 1)[-1])
        if known is not None:
            return known[0], known[1], raw_direction
    if kind is None and (hpe := obj(oem.get("Hpe"))):
        kind, event = _by_message(message, None)
        if kind is None:
            described = (text(hpe, "ClassDescription", 64) or "").lower()
            kind = HPE_CLASSES.get(described) or f"HPE {text(hpe, 'ClassDescription', 64) or 'IML'}"
        return kind, event, raw_direction
    if kind is None:
        other = text(entry, "OemSensorType", 64)
        return other or (served or "Unknown"), None, raw_direction
    if event is None:
        _same, event = _by_message(message, kind)
    return kind, event, raw_direction


def _direction(entry: dict[str, Any], raw_direction: str | None) -> str | None:
    code = text(entry, "EntryCode", 64) or ""
    if code == "Assert" or _THRESHOLD_CODE.match(code):
        return "asserted"
    if code == "Deassert":
        return "deasserted"
    hpe = obj(obj(entry.get("Oem")).get("Hpe"))
    if isinstance(hpe.get("Repaired"), bool):
        return "deasserted" if hpe["Repaired"] else "asserted"
    return raw_direction


def _psu_component(message: str) -> str | None:
    if (m := _PSU_NUMBER.search(message)) is not None:
        return f"PS{next(g for g in m.groups() if g)}"
    return None


def _hpe_dimm(message: str) -> str | None:
    m = _HPE_DIMM.search(message)
    return f"PROC {m.group(1)} DIMM {m.group(2)}" if m is not None else None


def _raw_line(entry: dict[str, Any]) -> str:
    """A compact, bounded record of what the BMC said (the whole entry can be kilobytes: HPE's advice text)."""
    keys = ("Id", "Created", "Severity", "EntryType", "EntryCode", "SensorType", "SensorNumber", "MessageId")
    parts = {k: entry[k] for k in keys if isinstance(entry.get(k), str | int) and not isinstance(entry.get(k), bool)}
    oem = obj(entry.get("Oem"))
    hpe = obj(oem.get("Hpe"))
    for key in ("Class", "Code", "Severity", "Repaired", "Count"):
        if key in hpe:
            parts[f"Hpe.{key}"] = hpe[key]
    if (category := text(obj(oem.get("Dell")), "Category", 32)) is not None:
        parts["Dell.Category"] = category
    raw = obj(obj(oem.get("Supermicro")).get("RawEventData"))
    if raw:
        parts["Supermicro.RawEventData"] = {k: v for k, v in raw.items() if isinstance(v, str)}
    parts["Message"] = text(entry, "Message", 512) or ""
    return clip(json.dumps(parts, separators=(",", ":"), default=str), 1024)


def parse_log_entry(entry: dict[str, Any], service: str | None = None) -> SelEntry | None:
    """One LogEntry -> SelEntry; None when it has no Id (nothing to keep a cursor on)."""
    entry_id = text(entry, "Id", 128)
    if entry_id is None:
        return None
    message = text(entry, "Message", 1024) or ""
    kind, event, raw_direction = _classify(entry, message)
    direction = _direction(entry, raw_direction)
    code = text(entry, "EntryCode", 64) or ""
    if event is None and (m := _THRESHOLD_CODE.match(code)) is not None:
        event = f"{m.group(1)} {m.group(2)} going {m.group(3)}"  # ipmitool's words for threshold events
    if event is None or event.lower() in message.lower():
        shown = message or event or ""
    else:
        shown = f"{event}: {message}" if message else event
    number = entry.get("SensorNumber")
    sensor_name = f"#0x{number:02x}" if isinstance(number, int) and not isinstance(number, bool) and number >= 0 else ""
    component = (_psu_component(message) if kind == "Power Supply" else None) or _hpe_dimm(message)
    component = component or component_of(kind, "", message)
    record_id = int64(int(entry_id)) if entry_id.isdigit() and len(entry_id) < 19 else None
    return SelEntry(
        record_id=record_id or 0,
        timestamp=created(entry.get("Created")),
        sensor_type=clip(kind, 128),
        sensor_name=sensor_name,
        event=clip(shown.strip() or kind, 256),
        direction="asserted" if direction == "asserted" else "deasserted" if direction == "deasserted" else None,
        component=clip(component, 128) if component else None,
        raw=_raw_line(entry),
        log_service=clip(service, 512) if service else None,
        entry_id=entry_id,
    )


def page_info(collection: object) -> tuple[int | None, str | None]:
    """(Members@odata.count, the next page's link) of a collection; either None when not served."""
    doc = obj(collection)
    count = doc.get("Members@odata.count")
    link = doc.get("Members@odata.nextLink", doc.get("@odata.nextLink"))
    good_count = count if isinstance(count, int) and not isinstance(count, bool) and count >= 0 else None
    return good_count, link.strip() if isinstance(link, str) and link.strip() else None


@guarded(list)
def parse_log_entries(collection: object, service: str | None = None) -> Parsed[list[SelEntry]]:
    """One page of a LogEntryCollection -> its entries as SelEntry, in the order served (Dell and HPE serve
    newest or oldest first: the collector orders them). A member that is not an object or has no Id is
    a problem, never an entry."""
    problems: list[str] = []
    doc = obj(collection)
    if not doc:
        return Parsed([], [problem("not a JSON object", repr(collection)[:200])])
    members = doc.get("Members")
    if not isinstance(members, list):
        return Parsed([], [problem("a LogEntryCollection without a Members list", repr(sorted(doc))[:200])])
    service = service or odata_id(doc)
    entries: list[SelEntry] = []
    for member in members:
        if not isinstance(member, dict):
            problems.append(problem("a log entry that is not an object", repr(member)))
            continue
        parsed = parse_log_entry(member, service)
        if parsed is None:
            problems.append(problem("a log entry without an Id", json.dumps(member, default=str)[:200]))
            continue
        if parsed.timestamp is None and member.get("Created") is not None:
            problems.append(problem(f"entry {parsed.entry_id}: no usable Created time", str(member.get("Created"))))
        entries.append(parsed)
    if len(entries) > MAX_SEL_ENTRIES:
        problems.append(f"{len(entries)} entries on one page, only the first {MAX_SEL_ENTRIES} kept")
        entries = entries[:MAX_SEL_ENTRIES]
    return Parsed(entries, problems)
