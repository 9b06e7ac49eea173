"""Machine checks: mcelog's decoded records (`mcelog --client`, /var/log/mcelog, mcelog in syslog),
the `mcelog --client` memory summary, and the MCE and memory lines of rasdaemon's `ras-mc-ctl --errors`.

error_class comes from the decoder's words when it gave any (memory controller, cache, bus,
internal) and otherwise from the architectural MCA error code in the low 16 bits of MCi_STATUS.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from typing import Literal

from checker.parsers.common import Parsed, clip, epoch_utc, guarded, plausible, problem
from checker.schemas import MAX_EVENTS, MceRecord, RasMemoryEvent

ErrorClass = Literal["memory", "cache", "bus", "internal", "other"]

_CLASS_WORDS: tuple[tuple[re.Pattern[str], ErrorClass], ...] = (
    (re.compile(r"memory controller|\bDRAM\b|memory error|memory read error|\bMEMORY\b|\bUMC\b", re.I), "memory"),
    (re.compile(r"\bcache\b|\bTLB\b|\bL[0-3]\b|Level-\d|instruction fetch", re.I), "cache"),
    (re.compile(r"\bbus\b|interconnect|\bQPI\b|\bUPI\b|\bHyperTransport\b", re.I), "bus"),
    (re.compile(r"internal|parity|unclassified", re.I), "internal"),
)
_UC_BIT = 1 << 61
_AMD_DEFERRED_BIT = 1 << 44  # AMD: MCA_STATUS[Deferred]; on Intel bits 38-52 are the corrected-error count
AMD_VENDORS = (2, 9)  # the kernel's X86_VENDOR_AMD and X86_VENDOR_HYGON, as rasdaemon stores cpuvendor


def corrected_from_status(status: int, *, amd: bool) -> bool:
    """Whether MCi_STATUS says corrected: UC (bit 61) clear and, on AMD, Deferred (bit 44) clear. A deferred
    error is uncorrectable data the hardware has not consumed yet; Linux grades it with the uncorrected
    ones (arch/x86/kernel/cpu/mce/severity.c, mce_severity_amd), and EDAC's amd64 decoder says "Deferred"."""
    if status & _UC_BIT:
        return False
    return not (amd and status & _AMD_DEFERRED_BIT)


def error_class_from_status(status: int) -> ErrorClass:
    """Architectural MCA error code (MCi_STATUS[15:0], Intel SDM vol. 3B 'Compound error codes')."""
    code = status & 0xFFFF & ~0x1000  # bit 12 is the corrected-filtering flag, not part of the code
    if code in (0x0001, 0x0005) or 0x0400 <= code <= 0x07FF:
        return "internal"
    if 0x0010 <= code <= 0x001F or 0x0100 <= code <= 0x01FF:
        return "cache"
    if 0x0080 <= code <= 0x00FF:
        return "memory"
    if 0x0800 <= code <= 0x0FFF:
        return "bus"
    return "other"


def error_class_of(text: str, status: int | None) -> ErrorClass:
    for pattern, kind in _CLASS_WORDS:
        if pattern.search(text):
            return kind
    return error_class_from_status(status) if status is not None else "other"


def _hex(text: str) -> int | None:
    try:
        return int(text, 16)
    except ValueError:
        return None


@dataclass
class _Record:
    lines: list[str] = field(default_factory=list)
    timestamp: dt.datetime | None = None
    syslog_time: dt.datetime | None = None


_SYSLOG_PREFIX = re.compile(r"^(\d{4}-\d{2}-\d{2}T\S+)\s+\S+\s+mcelog(?:\[\d{1,18}\])?:\s?")
_HEADER = "Hardware event. This is not a software error."


def _strip_syslog(line: str) -> tuple[str, dt.datetime | None]:
    m = _SYSLOG_PREFIX.match(line)
    if m is None:
        return line, None
    try:
        stamp = dt.datetime.fromisoformat(m.group(1).replace("Z", "+00:00"))
        utc = stamp.astimezone(dt.UTC) if stamp.tzinfo is not None else None
    except (ValueError, OverflowError):  # year 1 with a positive offset is before year 1 in UTC
        utc = None
    return line[m.end() :], plausible(utc)


@guarded(list)
def parse_mcelog(text: str) -> Parsed[list[MceRecord]]:
    """Decoded mcelog records ('Hardware event. This is not a software error.' ... 'CPUID ...'),
    plain or as mcelog's syslog lines. A record that carries neither a STATUS nor a
    Corrected/Uncorrected verdict (cut off in the input) is reported as a problem, not a record."""
    records: list[_Record] = []
    current = _Record()
    for raw in text.splitlines():
        line, stamp = _strip_syslog(raw)
        line = line.strip()
        if not line:
            continue
        if line == _HEADER or (line.startswith("MCE ") and current.lines and current.lines[-1] != _HEADER):
            if current.lines:
                records.append(current)
            current = _Record()
        current.lines.append(line)
        if stamp is not None and current.syslog_time is None:
            current.syslog_time = stamp
    if current.lines:
        records.append(current)
    found: list[MceRecord] = []
    problems: list[str] = []
    for record in records:
        mce = _mcelog_record(record)
        if mce is None:
            if any(line.startswith(("MCE ", "CPU ", "STATUS ", _HEADER)) for line in record.lines):
                problems.append(problem("incomplete mcelog record (no STATUS, no verdict)", " / ".join(record.lines)))
            continue
        found.append(mce)
    return Parsed(found[-MAX_EVENTS:], problems)


def _mcelog_record(record: _Record) -> MceRecord | None:
    cpu = bank = socket = status = None
    amd = False
    vendor_seen = False
    address = misc = None
    stamp = record.syslog_time
    verdict: bool | None = None
    words: list[str] = []
    for line in record.lines:
        if m := re.match(r"CPU (\d{1,18}) BANK (\d{1,18})", line):
            cpu, bank = int(m.group(1)), int(m.group(2))
        elif m := re.match(r"TIME (\d{1,18})", line):
            stamp = epoch_utc(int(m.group(1))) or stamp
        elif m := re.match(r"STATUS ([0-9a-fA-F]{1,16})\b", line):
            status = _hex(m.group(1))
        if m := re.search(r"\bADDR ([0-9a-fA-F]{1,16})\b", line):
            address = "0x" + m.group(1).lower()
        if m := re.search(r"\bMISC ([0-9a-fA-F]{1,16})\b", line):
            misc = "0x" + m.group(1).lower()
        if m := re.search(r"\bSOCKETID (\d{1,18})", line):
            socket = int(m.group(1))
        if line.startswith("CPUID Vendor"):
            amd, vendor_seen = line.split()[2:3] in (["AMD"], ["Hygon"]), True
        if line.startswith("Corrected error"):
            verdict = True
        elif line.startswith("Uncorrected error"):
            verdict = False
        elif line.startswith(("MCA:", "Generic ", "Transaction:", "STATUS")) or "CONTROLLER" in line:
            words.append(line)
    if status is None and verdict is None:
        return None
    corrected = verdict if verdict is not None else corrected_from_status(status or 0, amd=amd)
    if corrected and amd and status is not None and not corrected_from_status(status, amd=True):
        corrected = False  # an AMD deferred error, whatever an older mcelog's words say
    message = " ".join(w for w in words if not w.startswith("STATUS"))
    return MceRecord(
        timestamp=stamp,
        cpu=cpu,
        socket=socket,
        bank=bank,
        status=f"0x{status:016x}" if status is not None else None,
        address=address,
        error_class=error_class_of(message, status),
        corrected=corrected,
        message=clip(message, 1000),
        misc=misc,
        amd=amd if vendor_seen else None,
    )


@dataclass(frozen=True)
class McelogMemoryCounter:
    """One block of `mcelog --client` 'Memory errors': None for 'any' (not attributed)."""

    socket: int | None
    channel: int | None
    dimm: int | None
    corrected_total: int
    corrected_24h: int
    uncorrected_total: int
    uncorrected_24h: int


@guarded(list)
def parse_mcelog_client_memory(text: str) -> Parsed[list[McelogMemoryCounter]]:
    """The memory-error triggers of `mcelog --client` (SOCKET/CHANNEL/DIMM blocks)."""
    found: list[McelogMemoryCounter] = []
    problems: list[str] = []
    blocks = re.split(r"(?m)^(?=SOCKET )", text)
    for block in blocks:
        head = re.match(r"SOCKET (\S+) CHANNEL (\S+) DIMM (\S+)", block)
        if head is None:
            continue
        loc = [int(x) if x.isascii() and x.isdecimal() and len(x) <= 18 else None for x in head.groups()]
        counts: dict[str, int] = {}
        section = ""
        for line in block.splitlines()[1:]:
            stripped = line.strip()
            if stripped.endswith("memory errors:"):
                section = stripped.split()[0]
            elif m := re.fullmatch(r"(\d{1,18}) (total|in 24h)", stripped):
                counts[f"{section}_{m.group(2)}"] = int(m.group(1))
        if set(counts) != {"corrected_total", "corrected_in 24h", "uncorrected_total", "uncorrected_in 24h"}:
            problems.append(problem("mcelog memory block without its four counters", block))
            continue
        found.append(
            McelogMemoryCounter(
                loc[0],
                loc[1],
                loc[2],
                counts["corrected_total"],
                counts["corrected_in 24h"],
                counts["uncorrected_total"],
                counts["uncorrected_in 24h"],
            )
        )
    return Parsed(found, problems)


# -- rasdaemon `ras-mc-ctl --errors` -----------------------------------------------------------

_RAS_TS = r"(?P<ts>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} [+-]\d{4})"
_RAS_MCE = re.compile(r"^(?P<id>\d{1,18}) " + _RAS_TS + r" error: (?P<body>.*)$")
_RAS_MC = re.compile(
    r"^(?P<id>\d{1,18}) " + _RAS_TS + r" (?P<count>\d{1,18}) (?P<type>\S+) error\(s\): (?P<msg>.*?) at (?P<label>.*?) "
    r"location: (?P<mc>-?\d{1,18}):(?P<top>-?\d{1,18}):(?P<mid>-?\d{1,18}):(?P<low>-?\d{1,18})"
    r"(?:, addr (?P<addr>\d{1,20}))?"
)
_RAS_RECORD_START = re.compile(r"^\d{1,18} \d{4}-\d{2}-\d{2} ")


@dataclass
class RasErrors:
    """`ras-mc-ctl --errors`: the EDAC memory events (mc_event) and the MCE records."""

    memory_events: list[RasMemoryEvent] = field(default_factory=list)
    mce: list[MceRecord] = field(default_factory=list)


def _ras_time(text: str) -> dt.datetime | None:
    try:
        return plausible(dt.datetime.strptime(text, "%Y-%m-%d %H:%M:%S %z").astimezone(dt.UTC))
    except ValueError:
        return None


def _kv_int(body: str, key: str) -> int | None:
    m = re.search(r"\b" + key + r"=(0x[0-9a-fA-F]{1,16}|\d{1,18})\b", body)
    if m is None:
        return None
    return int(m.group(1), 16) if m.group(1).startswith("0x") else int(m.group(1))  # base 0 refuses '007'


@guarded(RasErrors)
def parse_ras_mc_ctl_errors(text: str) -> Parsed[RasErrors]:
    """`ras-mc-ctl --errors`. Lines wrapped by a terminal or a mail client are joined back to their record."""
    result = RasErrors()
    problems: list[str] = []
    records: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.endswith("ras-mc-ctl --errors"):
            continue
        if _RAS_RECORD_START.match(line):
            records.append(line)
        elif records and not line.startswith("No ") and not line.endswith(":"):
            records[-1] += " " + line
        elif "DBD::" in line or "Can't " in line or "no such table" in line:
            problems.append(problem("ras-mc-ctl failed", line))
    for record in records:
        if m := _RAS_MC.match(record):
            result.memory_events.append(
                RasMemoryEvent(
                    id=int(m.group("id")),
                    timestamp=m.group("ts"),
                    err_count=int(m.group("count")),
                    err_type=clip(m.group("type"), 64),
                    err_msg=clip(m.group("msg"), 1000),
                    label=clip(m.group("label"), 256),
                    mc=int(m.group("mc")),
                    top_layer=int(m.group("top")),
                    middle_layer=int(m.group("mid")),
                    lower_layer=int(m.group("low")),
                    address=int(m.group("addr")) if m.group("addr") and int(m.group("addr")) < 2**64 else None,
                )
            )
        elif m := _RAS_MCE.match(record):
            result.mce.append(_ras_mce(m.group("body"), _ras_time(m.group("ts"))))
        else:
            problems.append(problem("unrecognised ras-mc-ctl record", record))
    result.memory_events = result.memory_events[-MAX_EVENTS:]
    result.mce = result.mce[-MAX_EVENTS:]
    return Parsed(result, problems)


def _ras_mce(body: str, stamp: dt.datetime | None) -> MceRecord:
    status = _kv_int(body, "status")
    cpu = _kv_int(body, "cpu")
    if cpu is None and (m := re.search(r"\bCPU (\d{1,18})", body)):
        cpu = int(m.group(1))
    bank = _kv_int(body, "bank")
    if m := re.search(r"\(bank=(\d{1,18})\)", body):
        bank = int(m.group(1))
    addr = _kv_int(body, "addr")
    lowered = body.lower()
    if "uncorrected" in lowered or "fatal" in lowered or "mci uecc" in lowered or "deferred" in lowered:
        corrected = False
    elif "corrected" in lowered or "cecc" in lowered:
        corrected = True
    else:
        vendor = _kv_int(body, "cpuvendor")
        corrected = corrected_from_status(status or 0, amd=vendor in AMD_VENDORS)
    message = re.split(r", (?:mcgcap|status|mcgstatus_msg)=", body, maxsplit=1)[0]
    vendor, misc = _kv_int(body, "cpuvendor"), _kv_int(body, "misc")
    return MceRecord(
        timestamp=stamp,
        cpu=cpu,
        socket=_kv_int(body, "socketid"),
        bank=bank,
        status=f"0x{status:016x}" if status is not None else None,
        address=f"0x{addr:x}" if addr is not None else None,
        error_class=error_class_of(body, status),
        corrected=corrected,
        message=clip(message, 1000),
        misc=f"0x{misc:x}" if misc is not None else None,
        amd=vendor in AMD_VENDORS if vendor is not None else None,
    )
