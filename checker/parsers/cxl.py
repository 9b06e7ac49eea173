"""rasdaemon's cxl_* table rows -> CxlEvent, decoded with the CXL 3.1 event-record tables and the
kernel's trace-event names (drivers/cxl/core/trace.h), as `ras-mc-ctl` and the trace print them.

A Memory Module record (cxl_memory_module_event) carries the device's health as Get Health Info
returns it (CXL 3.1 8.2.9.2.1.3 and 8.2.9.9.3.1): health status flags, media status, the additional
status (life used, temperature, corrected-error counts: each Normal/Warning/Critical by the device's
own thresholds), life used in percent, temperature, dirty shutdowns and corrected-error counts.
rasdaemon (ras-cxl-handler.c, ras_cxl_memory_module_event_handler) stores them raw.

rasdaemon stores each record's fields raw: the General Media and DRAM records' descriptor, type,
transaction type and flags as integers (the CXL 3.1 tables 8-43 "Common Event Record", 8-46
"General Media Event Record", 8-47 "DRAM Event Record"), the AER status as the CXL RAS capability's
Uncorrectable/Correctable Error Status register (CXL 3.1 8.2.4.17), and the poison record's source
and trace type as the kernel's text. 64-bit addresses were bound as signed: -1 (all ones) is the
kernel's "no host address" (the DPA is in no region).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from checker.parsers.common import Parsed, guarded, problem
from checker.sections.cxl import CxlEvent, CxlHealth, CxlTable

Row = Mapping[str, Any]
U64 = (1 << 64) - 1

# Common Event Record: Event Record Flags (bits 2-5; the kernel's CXL_EVENT_RECORD_FLAG_*)
RECORD_FLAGS = {
    2: "Permanent Condition",
    3: "Maintenance Needed",
    4: "Performance Degraded",
    5: "Hardware Replacement Needed",
}
UNCORRECTABLE_EVENT = 0x01  # Memory Event Descriptor bit 0
THRESHOLD_EVENT = 0x02  # bit 1
POISON_LIST_OVERFLOW = 0x04  # bit 2
# Get Poison List payload flags (the kernel's CXL_POISON_FLAG_*, the cxl_poison trace's `flags`)
POISON_FLAGS = {0: "More", 1: "Overflow", 2: "Scanning"}
GENERAL_MEDIA_TYPES = {
    0: "ECC Error",
    1: "Invalid Address",
    2: "Data Path Error",
    3: "TE State Violation",
    4: "Scrub Media ECC Error",
    5: "Adv Programmable CME Counter Expiration",
    6: "CKID Violation",
}
DRAM_TYPES = {
    0: "Media ECC Error",
    1: "Scrub Media ECC Error",
    2: "Invalid Address",
    3: "Data Path Error",
    4: "TE State Violation",
    5: "Adv Programmable CME Counter Expiration",
    6: "CKID Violation",
}
TRANSACTIONS = {
    0: "Unknown",
    1: "Host Read",
    2: "Host Write",
    3: "Host Scan Media",
    4: "Host Inject Poison",
    5: "Internal Media Scrub",
    6: "Internal Media Management",
}
# Memory Module Event Record: Device Event Type (the kernel's show_dev_evt_type, rasdaemon's cxl_dev_evt_type;
# 06h-08h are CXL 3.1's additions)
MODULE_EVENT_TYPES = {
    0: "Health Status Change",
    1: "Media Status Change",
    2: "Life Used Change",
    3: "Temperature Change",
    4: "Data Path Error",
    5: "LSA Error",
    6: "Unrecoverable Internal Sideband Bus Error",
    7: "Memory Media FRU Error",
    8: "Power Management Fault",
}
# Device Health Information: Health Status bits, Media Status, Additional Status fields (the kernel's
# CXL_DHI_*, rasdaemon's cxl_health_status / cxl_media_status / cxl_two_bit_status / cxl_one_bit_status)
# bit 3 Memory Capacity Degraded: CXL 3.1 Get Health Info (Table 8-133); the kernel's and rasdaemon's
# CXL_DHI_HS_MEM_CAPACITY_DEGRADED. A bit not named here is kept by its value (0x10), never dropped.
HEALTH_STATUS = {
    0: "Maintenance Needed",
    1: "Performance Degraded",
    2: "Hardware Replacement Needed",
    3: "Memory Capacity Degraded",
}
# Memory Module Event Record: Device Event Sub-Type (CXL 3.1; the kernel's CXL_MMER_EVT_STYPE_*,
# drivers/cxl/core/trace.h show_dev_event_sub_type)
MODULE_EVENT_SUB_TYPES = {
    0: "Not Reported",
    1: "Invalid Config Data",
    2: "Unsupported Config Data",
    3: "Unsupported Memory Media FRU",
}
MEDIA_STATUS = {
    0: "Normal",
    1: "Not Ready",
    2: "Write Persistency Lost",
    3: "All Data Lost",
    4: "Write Persistency Loss in the Event of Power Loss",
    5: "Write Persistency Loss in Event of Shutdown",
    6: "Write Persistency Loss Imminent",
    7: "All Data Loss in the Event of Power Loss",
    8: "All Data Loss in the Event of Shutdown",
    9: "All Data Loss Imminent",
}
LEVELS = {0: "Normal", 1: "Warning", 2: "Critical"}
LIFE_USED_NOT_IMPLEMENTED = 0xFF  # ndctl's CXL_CMD_HEALTH_INFO_LIFE_USED_NOT_IMPL
TEMPERATURE_NOT_IMPLEMENTED = 0xFFFF  # CXL_CMD_HEALTH_INFO_TEMPERATURE_NOT_IMPL; rasdaemon binds it as -1 (int16)
# CXL RAS capability: Uncorrectable / Correctable Error Status (the kernel's show_uc_errs / show_ce_errs)
UE_BITS = {
    0: "Cache Data Parity Error",
    1: "Cache Address Parity Error",
    2: "Cache Byte Enable Parity Error",
    3: "Cache Data ECC Error",
    4: "Memory Data Parity Error",
    5: "Memory Address Parity Error",
    6: "Memory Byte Enable Parity Error",
    7: "Memory Data ECC Error",
    8: "REINIT Threshold Hit",
    9: "Received Unrecognized Encoding",
    10: "Received Poison From Peer",
    11: "Receiver Overflow",
    14: "Component Specific Error",
    15: "IDE Tx Error",
    16: "IDE Rx Error",
}
CE_BITS = {
    0: "Cache Data ECC Error",
    1: "Memory Data ECC Error",
    2: "CRC Threshold Hit",
    3: "Retry Threshold",
    4: "Received Cache Poison From Peer",
    5: "Received Memory Poison From Peer",
    6: "Received Error From Physical Layer",
}


def _int(row: Row, key: str) -> int | None:
    value = row.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _address(row: Row, key: str) -> int | None:
    value = _int(row, key)
    if value is None or value == -1 or value == U64:
        return None
    return value & U64


def _text(row: Row, key: str) -> str | None:
    value = row.get(key)
    if value is None:
        return None
    text = " ".join(str(value).split())[:128]
    return text or None


def _bits(value: int | None, names: Mapping[int, str]) -> list[str]:
    if not value:
        return []
    found = [name for bit, name in names.items() if value & (1 << bit)]
    unknown = value & ~sum(1 << bit for bit in names)
    if unknown:
        found.append(f"0x{unknown:x}")
    return found[:32]


def _common(table: CxlTable, row: Row, row_id: int) -> dict[str, Any]:
    serial = _int(row, "serial")
    return {
        "table": table,
        "id": row_id,
        "timestamp": _text(row, "timestamp"),
        "memdev": _text(row, "memdev") or "unknown",
        "host": _text(row, "host"),
        "serial": serial & U64 if serial is not None else None,
    }


def _media(table: CxlTable, row: Row, row_id: int) -> CxlEvent:
    descriptor = _int(row, "descriptor") or 0
    kind = _int(row, "type")
    names = GENERAL_MEDIA_TYPES if table == "cxl_general_media_event" else DRAM_TYPES
    transaction = _int(row, "transaction_type")
    return CxlEvent(
        **_common(table, row, row_id),
        log=_text(row, "log_type"),
        uncorrectable=bool(descriptor & UNCORRECTABLE_EVENT),
        kind=names.get(kind, f"type 0x{kind:02x}") if kind is not None else "unknown",
        transaction=TRANSACTIONS.get(transaction, f"0x{transaction:02x}") if transaction is not None else None,
        threshold=bool(descriptor & THRESHOLD_EVENT),
        flags=[f for f in _bits(_int(row, "hdr_flags"), RECORD_FLAGS) if not f.startswith("0x")][:8],
        dpa=_address(row, "dpa"),
        hpa=_address(row, "hpa"),
        region=_text(row, "region"),
        channel=_nonnegative(row, "channel"),
        rank=_nonnegative(row, "rank"),
    )


def _nonnegative(row: Row, key: str) -> int | None:
    value = _int(row, key)
    return value if value is not None and value >= 0 else None


def _poison(row: Row, row_id: int) -> CxlEvent:
    """A poison record: `List` (an entry of the device's poison list, each time the list is read),
    `Inject` or `Clear` (the kernel traces a record it builds from the DPA, so their source is
    always Unknown: only the trace type tells them). `flags`: the list's More/Overflow/Scanning."""
    return CxlEvent(
        **_common("cxl_poison_event", row, row_id),
        uncorrectable=True,  # a poison list entry is data the device could not correct
        kind=f"Poison {_text(row, 'trace_type') or 'List'}",
        dpa=_address(row, "dpa"),
        hpa=_address(row, "hpa"),
        region=_text(row, "region"),
        source=_text(row, "source"),
        flags=[f for f in _bits(_int(row, "flags"), POISON_FLAGS) if not f.startswith("0x")],
    )


def _aer(table: CxlTable, row: Row, row_id: int) -> CxlEvent:
    uncorrectable = table == "cxl_aer_ue_event"
    status = _int(row, "error_status")
    errors = _bits(status, UE_BITS if uncorrectable else CE_BITS)
    first = _first_error(_int(row, "first_error"), status) if uncorrectable else None
    if first is not None and first in UE_BITS:
        errors = [UE_BITS[first], *[e for e in errors if e != UE_BITS[first]]]  # the one the device logged first
    return CxlEvent(
        **_common(table, row, row_id),
        uncorrectable=uncorrectable,
        kind=errors[0] if errors else ("AER uncorrectable" if uncorrectable else "AER correctable"),
        errors=errors,
    )


def _first_error(mask: int | None, status: int | None) -> int | None:
    """The bit of the first error. The kernel traces `first_error` as a mask, not a bit number
    (cxl_handle_ras: the status itself when one bit is set, else BIT(the First Error Pointer)), and
    rasdaemon decodes it as one: the lowest bit set in both, else in the mask."""
    if not mask or mask < 0:
        return None
    both = mask & (status or 0)
    chosen = both or mask
    return (chosen & -chosen).bit_length() - 1


def _level(value: int | None, shift: int, mask: int) -> str | None:
    if value is None:
        return None
    level = (value >> shift) & mask
    return LEVELS.get(level, f"0x{level:x}")


def _count(row: Row, key: str) -> int | None:
    value = _int(row, key)
    return value & 0xFFFFFFFF if value is not None else None  # u32 counters, bound as int


def _sub_type(value: int | None) -> str | None:
    if not value:  # 0: Not Reported, as no sub-type at all
        return None
    return MODULE_EVENT_SUB_TYPES.get(value, f"0x{value:02x}")


def _component(value: object) -> str | None:
    """The Component Identifier (16 bytes, rasdaemon's comp_id BLOB): its text when it is printable
    ASCII (vendors name the FRU, 'DIMM-B2'), else its hex; all zeroes is none."""
    if isinstance(value, str):
        value = value.encode(errors="replace")
    if not isinstance(value, bytes | bytearray) or not any(value):
        return None
    raw = bytes(value[:16])
    text = raw.rstrip(b"\0")
    if text and all(0x20 <= b < 0x7F for b in text):
        return text.decode("ascii")
    return raw.hex()


def _module(row: Row, row_id: int) -> CxlEvent:
    """A Memory Module record: the device's health, with the event that changed it."""
    kind = _int(row, "event_type")
    media = _int(row, "media_status")
    extra = _int(row, "add_status")
    life = _int(row, "life_used")
    temperature = _int(row, "device_temp")
    if temperature is not None and temperature > 0x7FFF:
        temperature -= 0x10000  # a signed 16-bit value, bound unsigned by some versions
    health = CxlHealth(
        event_type=MODULE_EVENT_TYPES.get(kind, f"type 0x{kind:02x}") if kind is not None else "unknown",
        health_status=_bits(_int(row, "health_status"), HEALTH_STATUS)[:8],
        media_status=MEDIA_STATUS.get(media, f"0x{media:02x}") if media is not None else None,
        life_used_status=_level(extra, 0, 0b11),
        temperature_status=_level(extra, 2, 0b11),
        corrected_volatile_status=_level(extra, 4, 0b1),
        corrected_persistent_status=_level(extra, 5, 0b1),
        life_used_percent=life if life is not None and life != LIFE_USED_NOT_IMPLEMENTED and 0 <= life <= 100 else None,
        temperature_c=temperature if temperature not in (None, -1, TEMPERATURE_NOT_IMPLEMENTED) else None,
        dirty_shutdowns=_count(row, "dirty_shutdown_cnt"),
        corrected_volatile_errors=_count(row, "cor_vol_err_cnt"),
        corrected_persistent_errors=_count(row, "cor_per_err_cnt"),
        event_sub_type=_sub_type(_int(row, "event_sub_type")),
        component_id=_component(row.get("comp_id")),
    )
    return CxlEvent(
        **_common("cxl_memory_module_event", row, row_id),
        log=_text(row, "log_type"),
        uncorrectable=False,  # a health record: the statuses say what it means (remediator/derive/cxl_health.py)
        kind=health.event_type,
        flags=[f for f in _bits(_int(row, "hdr_flags"), RECORD_FLAGS) if not f.startswith("0x")][:8],
        health=health,
    )


@guarded(list)
def parse_cxl_rows(table: CxlTable, rows: Iterable[Row]) -> Parsed[list[CxlEvent]]:
    """Rows of one cxl_* table, oldest first; a row without an id or a memdev is a problem, not an event."""
    events: list[CxlEvent] = []
    problems: list[str] = []
    for row in rows:
        row_id = _int(row, "id")
        if row_id is None:
            problems.append(problem(f"{table} row without an integer id", repr(dict(row))[:200]))
            continue
        if not _text(row, "memdev"):
            problems.append(problem(f"{table} row {row_id} names no memdev", repr(dict(row))[:200]))
            continue
        if table == "cxl_poison_event":
            events.append(_poison(row, row_id))
        elif table in ("cxl_aer_ue_event", "cxl_aer_ce_event"):
            events.append(_aer(table, row, row_id))
        elif table == "cxl_memory_module_event":
            events.append(_module(row, row_id))
        else:
            events.append(_media(table, row, row_id))
    return Parsed(events, problems)
