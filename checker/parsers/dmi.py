"""SMBIOS/DMI: `dmidecode` (full, `-t memory`, `-t bios`, `-t system`) and /sys/class/dmi/id files.

dmidecode prints 'Handle 0x..., DMI type N, ...', a title line, then indented 'Key: Value' lines
(tabs, or spaces in pasted copies); deeper-indented lines are list items and are skipped.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from checker.parsers.common import Parsed, clip, guarded, int64, problem
from checker.schemas import DimmInventory, Firmware

_HANDLE = re.compile(r"^Handle 0x[0-9A-Fa-f]+, DMI type (\d{1,20}),")
_TITLE_TYPES = {"BIOS Information": 0, "System Information": 1, "Base Board Information": 2, "Memory Device": 17}
# Values vendors leave in unset fields; they identify nothing.
_PLACEHOLDERS = {
    "",
    "not specified",
    "not provided",
    "not available",
    "not present",
    "unknown",
    "none",
    "to be filled by o.e.m.",
    "default string",
    "system serial number",
    "system product name",
    "system manufacturer",
    "no dimm",
    "nodimm",
    "[empty]",
    "empty",
}
MAX_DIMMS = 512
_MEMORY_TYPES = frozenset({17})
_FIRMWARE_TYPES = frozenset({0, 1})


@dataclass
class DmiStructure:
    """One dmidecode record: its SMBIOS type, title and top-level properties."""

    dmi_type: int | None
    title: str
    properties: dict[str, str] = field(default_factory=dict)


@guarded(list)
def parse_dmidecode_structures(text: str, types: frozenset[int] | None = None) -> Parsed[list[DmiStructure]]:
    """All records of dmidecode output, in order; with `types`, only records of those SMBIOS types
    (the others are skipped line by line without being split: a full dump is mostly other types)."""
    structures: list[DmiStructure] = []
    problems: list[str] = []
    pending_type: int | None = None
    expecting_title = False
    current: DmiStructure | None = None
    prop_indent: int | None = None
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line:
            continue
        first = line[0]
        if first == "H" and (m := _HANDLE.match(line)):
            pending_type = int(m.group(1))
            expecting_title = True
            current = None
            continue
        if current is None and not expecting_title and first in " \t":
            continue  # inside a record that is not wanted, or before the first one
        body = line.lstrip()
        indent = len(line) - len(body)
        if indent == 0:
            if expecting_title or line in _TITLE_TYPES:
                dmi_type = pending_type if expecting_title else _TITLE_TYPES[line]
                current = None
                if types is None or dmi_type in types:
                    current = DmiStructure(dmi_type, line)
                    structures.append(current)
                prop_indent = None
            else:
                current = None  # '# dmidecode 3.1', 'SMBIOS 2.7 present.', 'Table at …'
            expecting_title = False
            continue
        if current is None:
            continue
        if prop_indent is None:
            prop_indent = indent
        if indent > prop_indent:
            continue  # list items under 'Characteristics:' and the like
        key, sep, value = body.partition(":")
        if sep:
            current.properties.setdefault(key.rstrip(), value.strip())
        else:
            problems.append(problem("dmidecode property without 'Key: value'", line))
    return Parsed(structures, problems)


def _value(text: str | None, limit: int) -> str | None:
    if text is None:
        return None
    value = text.strip()
    if value.lower() in _PLACEHOLDERS:
        return None
    return clip(value, limit)


def _size_mb(text: str) -> int | None:
    """'32 GB' -> 32768, '8192 MB' -> 8192; None for 'No Module Installed' and unknown sizes."""
    m = re.fullmatch(r"(\d{1,20})\s*(kB|KB|MB|GB|TB)", text.strip())
    if m is None:
        return None
    factor = {"kB": 1 / 1024, "KB": 1 / 1024, "MB": 1, "GB": 1024, "TB": 1024 * 1024}[m.group(2)]
    return int64(int(int(m.group(1)) * factor))  # past 64 bits a broken field, not a size


def _non_volatile(properties: dict[str, str]) -> bool | None:
    """Persistent memory by what dmidecode prints (SMBIOS 3.2 Memory Technology: DRAM, NVDIMM-N/-F/-P,
    Intel Optane persistent memory; Type Detail: Non-Volatile; Type: Logical non-volatile device)."""
    technology = (properties.get("Memory Technology") or "").strip().lower()
    detail = (properties.get("Type Detail") or "").lower()
    if "non-volatile" in detail or "non-volatile" in (properties.get("Type") or "").lower():
        return True
    if technology in ("", "unknown", "other"):
        return None
    return technology != "dram"


@guarded(list)
def parse_dmidecode_memory(text: str) -> Parsed[list[DimmInventory]]:
    """Populated memory devices (type 17) only: empty slots ('No Module Installed', size 0) are skipped."""
    parsed = parse_dmidecode_structures(text, _MEMORY_TYPES)
    problems = list(parsed.problems)
    dimms: list[DimmInventory] = []
    for s in parsed.value:
        if s.dmi_type != 17:
            continue
        size_text = s.properties.get("Size", "")
        size = _size_mb(size_text)
        if size == 0 or "no module" in size_text.lower() or "not installed" in size_text.lower():
            continue
        locator = _value(s.properties.get("Locator"), 128)
        if locator is None:
            problems.append(problem("memory device without a locator", str(s.properties)))
            continue
        if size is None and size_text.strip().lower() not in ("unknown", ""):
            problems.append(problem(f"{locator}: unreadable Size", size_text))
        speed = re.match(r"(\d{1,20})\s*(?:MHz|MT/s)", s.properties.get("Speed", "") or "")
        dimms.append(
            DimmInventory(
                locator=locator,
                bank_locator=_value(s.properties.get("Bank Locator"), 128),
                size_mb=size,
                mem_type=_value(s.properties.get("Type"), 32),
                speed_mts=int(speed.group(1)) if speed else None,
                manufacturer=_value(s.properties.get("Manufacturer"), 128),
                part_number=_value(s.properties.get("Part Number"), 128),
                serial=_value(s.properties.get("Serial Number"), 128),
                non_volatile=_non_volatile(s.properties),
            )
        )
    if len(dimms) > MAX_DIMMS:
        problems.append(f"{len(dimms)} memory devices, only {MAX_DIMMS} kept")
        dimms = dimms[:MAX_DIMMS]
    return Parsed(dimms, problems)


@guarded(Firmware)
def parse_dmidecode_firmware(text: str) -> Parsed[Firmware]:
    """BIOS (type 0) and system (type 1) fields from `dmidecode`, `-t bios` or `-t system`."""
    parsed = parse_dmidecode_structures(text, _FIRMWARE_TYPES)
    firmware = Firmware()
    for s in parsed.value:
        p = s.properties
        if s.dmi_type == 0 and firmware.bios_version is None:
            firmware.bios_vendor = _value(p.get("Vendor"), 128)
            firmware.bios_version = _value(p.get("Version"), 128)
            firmware.bios_date = _value(p.get("Release Date"), 32)
        elif s.dmi_type == 1 and firmware.system_product is None:
            firmware.system_manufacturer = _value(p.get("Manufacturer"), 128)
            firmware.system_product = _value(p.get("Product Name"), 128)
            firmware.system_serial = _value(p.get("Serial Number"), 128)
    problems = list(parsed.problems)
    if not any(s.dmi_type in (0, 1) for s in parsed.value):
        problems.append(problem("no BIOS or System Information record", text))
    return Parsed(firmware, problems)


@guarded(Firmware)
def parse_dmi_id(files: Mapping[str, str]) -> Parsed[Firmware]:
    """/sys/class/dmi/id: a mapping of file name ('bios_version', 'product_name' …) to content.

    product_serial is readable by root only; when the collector could not read it, it is absent.
    """
    names = {key.rstrip("/").rsplit("/", 1)[-1]: value for key, value in files.items()}
    firmware = Firmware(
        bios_vendor=_value(names.get("bios_vendor"), 128),
        bios_version=_value(names.get("bios_version"), 128),
        bios_date=_value(names.get("bios_date"), 32),
        system_manufacturer=_value(names.get("sys_vendor"), 128),
        system_product=_value(names.get("product_name"), 128),
        system_serial=_value(names.get("product_serial"), 128),
    )
    problems = [] if names else ["no /sys/class/dmi/id files"]
    return Parsed(firmware, problems)
