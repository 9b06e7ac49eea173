"""rasdaemon: `ras-mc-ctl --error-count` and `--summary` output, and rows of its SQLite database.

`--summary` failing half-way (a Perl DBD::SQLite error such as 'no such table: devlink_event',
when ras-mc-ctl is newer than the rasdaemon that made the database) must not read as healthy:
every such line is a problem, and the sections after it were never printed.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from checker.parsers.common import Parsed, clip, guarded, plausible, problem
from checker.parsers.mce import AMD_VENDORS, corrected_from_status, error_class_of
from checker.schemas import MceRecord, RasAerEvent, RasDimmTotal, RasMemoryEvent, RasMemoryFailure

_FAILURE = re.compile(r"DBD::|no such table|Can't (?:call|locate|open|connect)|ras-mc-ctl: Error|Permission denied")


@dataclass(frozen=True)
class DimmErrorCount:
    """One row of `ras-mc-ctl --error-count`: the EDAC counters per DIMM label."""

    label: str
    ce: int
    ue: int


@guarded(list)
def parse_ras_error_count(text: str) -> Parsed[list[DimmErrorCount]]:
    """`ras-mc-ctl --error-count`: 'Label<TAB>CE<TAB>UE' header, then one row per DIMM."""
    rows: list[DimmErrorCount] = []
    problems: list[str] = []
    seen_header = False
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if re.match(r"Label\s+CE\s+UE$", line):
            seen_header = True
            continue
        if not seen_header:
            if _FAILURE.search(line):
                problems.append(problem("ras-mc-ctl failed", line))
            continue
        parts = line.rsplit(None, 2)
        if len(parts) == 3 and all(x.isdecimal() and len(x) <= 20 for x in parts[1:]):
            rows.append(DimmErrorCount(parts[0].strip(), int(parts[1]), int(parts[2])))
        else:
            problems.append(problem("not a 'label CE UE' row", line))
    if not seen_header:
        problems.append(problem("no 'Label CE UE' header in ras-mc-ctl --error-count output", text))
    return Parsed(rows, problems)


@dataclass(frozen=True)
class MemorySummary:
    """A 'Memory controller events summary' row: errors per DIMM label and location."""

    err_type: str
    label: str
    location: str
    count: int


@dataclass
class RasSummary:
    """`ras-mc-ctl --summary`: which sections were clean, what the non-clean ones say."""

    clean: list[str] = field(default_factory=list)  # 'Memory', 'PCIe AER', 'MCE' … from 'No X errors.'
    memory: list[MemorySummary] = field(default_factory=list)
    mce: list[tuple[int, str]] = field(default_factory=list)  # (count, description)
    other: dict[str, list[str]] = field(default_factory=dict)  # section title -> its lines

    @property
    def has_errors(self) -> bool:
        return bool(self.memory or self.mce or any(self.other.values()))


_CLEAN = re.compile(r"^No (.+?) errors\.$")
_MEMORY_ROW = re.compile(
    r"^(?P<type>.+?) on DIMM Label\(s\): '(?P<label>.*)' location: (?P<loc>[-\d:]+) errors: (?P<count>\d{1,20})$"
)
_MCE_ROW = re.compile(r"^(?P<count>\d{1,20}) (?P<what>.+?)(?: errors)?$")


@guarded(RasSummary)
def parse_ras_summary(text: str) -> Parsed[RasSummary]:
    """`ras-mc-ctl --summary`. Tool failures (DBD::SQLite errors) are problems, so the caller can
    tell 'no errors recorded' from 'could not read the error database'."""
    summary = RasSummary()
    problems: list[str] = []
    section: str | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if _FAILURE.search(line):
            problems.append(problem("ras-mc-ctl failed", line))
            section = None
            continue
        if m := _CLEAN.match(line):
            summary.clean.append(m.group(1))
            section = None
            continue
        if line.endswith(":") and raw[:1] not in (" ", "\t"):
            section = line[:-1]
            if not _is_known(section):
                summary.other.setdefault(section, [])
            continue
        if section is None:
            problems.append(problem("ras-mc-ctl summary line outside a section", line))
        elif section.startswith("Memory controller"):
            if m := _MEMORY_ROW.match(line):
                summary.memory.append(
                    MemorySummary(m.group("type"), m.group("label"), m.group("loc"), int(m.group("count")))
                )
            else:
                problems.append(problem("unrecognised memory summary row", line))
        elif section.startswith("MCE"):
            if m := _MCE_ROW.match(line):
                summary.mce.append((int(m.group("count")), m.group("what")))
            else:
                problems.append(problem("unrecognised MCE summary row", line))
        else:
            summary.other.setdefault(section, []).append(line)
    if not summary.clean and not summary.has_errors and not problems:
        problems.append(problem("no ras-mc-ctl summary sections found", text))
    return Parsed(summary, problems)


def _is_known(section: str) -> bool:
    return section.startswith(("Memory controller", "MCE"))


# -- rows of rasdaemon's SQLite database (/var/lib/rasdaemon/ras-mc_event.db) ------------------
# The collector runs the queries; these turn rows (column name -> value) into report models.
# rasdaemon binds 64-bit registers as signed integers, so MCi_STATUS and addresses with the top
# bit set come back negative and are masked back to unsigned here.

Row = Mapping[str, object]
_U64 = (1 << 64) - 1


def _row_int(row: Row, key: str) -> int | None:
    value = row.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _row_text(row: Row, key: str, limit: int) -> str:
    value = row.get(key)
    return clip(value.strip(), limit) if isinstance(value, str) else ""


def _row_id(row: Row, table: str, problems: list[str]) -> int | None:
    value = _row_int(row, "id")
    if value is None:
        problems.append(problem(f"{table} row without an integer id", repr(dict(row))))
    return value


@guarded(list)
def parse_mc_event_rows(rows: Iterable[Row]) -> Parsed[list[RasMemoryEvent]]:
    """mc_event rows (EDAC memory errors as rasdaemon recorded them)."""
    events: list[RasMemoryEvent] = []
    problems: list[str] = []
    for row in rows:
        if (row_id := _row_id(row, "mc_event", problems)) is None:
            continue
        count = _row_int(row, "err_count")
        events.append(
            RasMemoryEvent(
                id=row_id,
                timestamp=_row_text(row, "timestamp", 64) or None,
                err_count=count if count is not None and count >= 0 else 1,
                err_type=_row_text(row, "err_type", 64) or "unknown",
                err_msg=_row_text(row, "err_msg", 1000),
                label=_row_text(row, "label", 256),
                mc=_row_int(row, "mc"),
                top_layer=_row_int(row, "top_layer"),
                middle_layer=_row_int(row, "middle_layer"),
                lower_layer=_row_int(row, "lower_layer"),
                address=(address & _U64) if (address := _row_int(row, "address")) is not None else None,
                grain=grain if (grain := _row_int(row, "grain")) is not None and 0 <= grain <= 64 else None,
            )
        )
    return Parsed(events, problems)


@guarded(list)
def parse_dimm_total_rows(rows: Iterable[Row]) -> Parsed[list[RasDimmTotal]]:
    """Rows of 'SELECT err_type, label, mc, top_layer, middle_layer, lower_layer, SUM(err_count) AS err_count
    FROM mc_event GROUP BY …' (what `ras-mc-ctl --summary` prints)."""
    totals: list[RasDimmTotal] = []
    for row in rows:
        count = _row_int(row, "err_count")
        totals.append(
            RasDimmTotal(
                err_type=_row_text(row, "err_type", 64) or "unknown",
                label=_row_text(row, "label", 256),
                mc=_row_int(row, "mc"),
                top_layer=_row_int(row, "top_layer"),
                middle_layer=_row_int(row, "middle_layer"),
                lower_layer=_row_int(row, "lower_layer"),
                err_count=count if count is not None and count >= 0 else 0,
            )
        )
    return Parsed(totals, [])


@guarded(list)
def parse_aer_event_rows(rows: Iterable[Row]) -> Parsed[list[RasAerEvent]]:
    """aer_event rows (PCIe AER errors)."""
    events: list[RasAerEvent] = []
    problems: list[str] = []
    for row in rows:
        if (row_id := _row_id(row, "aer_event", problems)) is None:
            continue
        events.append(
            RasAerEvent(
                id=row_id,
                timestamp=_row_text(row, "timestamp", 64) or None,
                dev_name=_row_text(row, "dev_name", 128),
                err_type=_row_text(row, "err_type", 64),
                err_msg=_row_text(row, "err_msg", 1000),
            )
        )
    return Parsed(events, problems)


@guarded(list)
def parse_memory_failure_rows(rows: Iterable[Row]) -> Parsed[list[RasMemoryFailure]]:
    """memory_failure_event rows (pages the kernel tried to offline, and how that went)."""
    events: list[RasMemoryFailure] = []
    problems: list[str] = []
    for row in rows:
        if (row_id := _row_id(row, "memory_failure_event", problems)) is None:
            continue
        events.append(
            RasMemoryFailure(
                id=row_id,
                timestamp=_row_text(row, "timestamp", 64) or None,
                pfn=_row_text(row, "pfn", 64),
                page_type=_row_text(row, "page_type", 128),
                action_result=_row_text(row, "action_result", 64),
            )
        )
    return Parsed(events, problems)


def ras_timestamp(text: str) -> dt.datetime | None:
    """rasdaemon's '2023-10-27 10:00:00 +0200'."""
    try:
        return plausible(dt.datetime.strptime(text.strip(), "%Y-%m-%d %H:%M:%S %z").astimezone(dt.UTC))
    except ValueError:
        return None


@guarded(list)
def parse_mce_record_rows(rows: Iterable[Row]) -> Parsed[list[MceRecord]]:
    """mce_record rows -> MceRecord. Corrected or not comes from MCi_STATUS when the row has a status (UC,
    bit 61; on AMD also Deferred, bit 44), else from rasdaemon's decoded words."""
    records: list[MceRecord] = []
    problems: list[str] = []
    for row in rows:
        if (row_id := _row_id(row, "mce_record", problems)) is None:
            continue
        status = _row_int(row, "status")
        status = status & _U64 if status is not None else None
        addr = _row_int(row, "addr")
        words = " ".join(
            w for key in ("bank_name", "error_msg", "mc_location", "mcistatus_msg") if (w := _row_text(row, key, 400))
        )
        vendor, misc = _row_int(row, "cpuvendor"), _row_int(row, "misc")
        if status is not None:
            corrected = corrected_from_status(status, amd=vendor in AMD_VENDORS)
        else:
            lowered = words.lower()
            corrected = not any(w in lowered for w in ("uncorrected", "fatal", "deferred"))
        cpu, socket, bank = _row_int(row, "cpu"), _row_int(row, "socketid"), _row_int(row, "bank")
        records.append(
            MceRecord(
                timestamp=ras_timestamp(_row_text(row, "timestamp", 64)),
                cpu=cpu if cpu is not None and cpu >= 0 else None,
                socket=socket if socket is not None and socket >= 0 else None,
                bank=bank if bank is not None and bank >= 0 else None,
                status=f"0x{status:016x}" if status is not None else None,
                address=f"0x{addr & _U64:x}" if addr is not None and addr != 0 else None,
                error_class=error_class_of(words, status),
                corrected=corrected,
                message=clip(words, 1000),
                id=row_id,
                misc=f"0x{misc & _U64:x}" if misc is not None else None,
                amd=vendor in AMD_VENDORS if vendor is not None else None,
            )
        )
    return Parsed(records, problems)
