"""rasdaemon's `ras-mc-ctl --error-count` and `--summary`.

`--summary` failing half-way (a Perl DBD::SQLite error such as 'no such table: devlink_event',
when ras-mc-ctl is newer than the rasdaemon that made the database) must not read as healthy:
every such line is a problem, and the sections after it were never printed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from checker.parsers.common import Parsed, guarded, problem

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
