"""SEL signals: power supply and fan failures, memory ECC the BMC logged, a cleared or full log.

Only entries new since the previous report count (by record id). The BMC's record ids restart
when its log is cleared, so ids going backwards, a falling entry count or a "Log area
reset/cleared" entry mean the history starts over (`sel_cleared`). On a host's first report
only the last FIRST_SIGHT_LOOKBACK_S of history counts: a new agent must not ticket years-old
entries. Deasserted entries are recoveries and never fire a failure.
"""

from __future__ import annotations

import datetime as dt
import re
from collections import defaultdict

from checker.schemas import SelEntry, SelState
from remediator.derive.memory import SelMemory
from remediator.signals import SignalValue

FIRST_SIGHT_LOOKBACK_S = 24 * 3600
SEL_FULL_PERCENT = 90.0
MAX_LISTED = 10
RESTARTED = ("record_ids_backwards", "collector_saw_fewer_entries")  # every listed entry is new

_PSU = re.compile(
    r"failure detected|ac lost|input lost|out.of.range|redundancy lost|non-redundant|predictive failure"
    r"|configuration error|power supply failure|power unit failure",
    re.IGNORECASE,
)
_FAN = re.compile(
    r"\blower critical going low|lower non-recoverable going low|redundancy lost|non-redundant"
    r"|fan fail|failure detected|transition to critical|transition to non-recoverable",
    re.IGNORECASE,
)
_UE = re.compile(r"uncorrectable (?:ecc|error)|uncorrected", re.IGNORECASE)
_CE = re.compile(r"correctable ecc|correctable memory error", re.IGNORECASE)


def is_clear(entry: SelEntry) -> bool:
    return "log area reset/cleared" in entry.event.lower() and entry.direction != "deasserted"


def _subject(entry: SelEntry) -> str:
    if entry.component:
        return entry.component
    name = entry.sensor_name.strip()
    if not name or name.startswith("#"):
        return f"{entry.sensor_type} {name}".strip()
    return name


def classify(entry: SelEntry) -> str | None:
    """The signal kind an asserted entry stands for, or None."""
    if entry.direction == "deasserted":
        return None
    kind = entry.sensor_type.lower()
    if kind in ("power supply", "power unit") and _PSU.search(entry.event):
        return "psu_failure"
    if kind in ("fan", "cooling device") and _FAN.search(entry.event):
        return "fan_failure"
    if kind == "memory" and (_UE.search(entry.event) or _CE.search(entry.event)):
        return "sel_memory_ecc"
    return None


def _reported_max(state: SelState) -> int | None:
    ids = [e.record_id for e in state.entries]
    if state.last_record_id is not None:
        ids.append(state.last_record_id)
    return max(ids, default=None)


def _new_entries(state: SelState, previous: SelMemory | None, now: dt.datetime) -> tuple[list[SelEntry], str | None]:
    reported_max = _reported_max(state)
    if previous is None:
        since = now - dt.timedelta(seconds=FIRST_SIGHT_LOOKBACK_S)
        return [e for e in state.entries if e.timestamp is not None and since <= e.timestamp], None
    if previous.last is not None and reported_max is not None and reported_max < previous.last:
        return list(state.entries), "record_ids_backwards"
    if state.cleared:  # the collector saw the count fall and listed the new log whole
        return list(state.entries), "collector_saw_fewer_entries"
    fresh = [e for e in state.entries if previous.last is None or e.record_id > previous.last]
    if previous.count is not None and state.entry_count is not None and state.entry_count < previous.count:
        return fresh, "entry_count_dropped"
    if any(is_clear(e) for e in fresh):
        return fresh, "log_area_reset"
    return fresh, None


def _failure_signal(kind: str, subject: str, entries: list[SelEntry]) -> SignalValue:
    last = entries[-1]
    detail: dict[str, object] = {
        "sensor": f"{last.sensor_type} {last.sensor_name}".strip(),
        "events": list(dict.fromkeys(e.event for e in entries))[:MAX_LISTED],
        "record_ids": [e.record_id for e in entries][-MAX_LISTED:],
        "last_timestamp": last.timestamp.isoformat() if last.timestamp else None,
        "raw": last.raw,
    }
    if kind == "sel_memory_ecc":
        uncorrectable = sum(1 for e in entries if _UE.search(e.event))
        detail.update(uncorrectable=uncorrectable > 0, uncorrectable_count=uncorrectable)
        detail["correctable_count"] = len(entries) - uncorrectable
    return SignalValue(kind, subject, float(len(entries)), detail)


def sel_signals(
    state: SelState | None, previous: SelMemory | None, *, now: dt.datetime
) -> tuple[list[SignalValue], SelMemory | None]:
    if state is None:
        return [], previous
    fresh, cleared = _new_entries(state, previous, now)
    signals: list[SignalValue] = []
    if cleared is not None and previous is not None:
        signals.append(
            SignalValue(
                "sel_cleared",
                "sel",
                1.0,
                {"reason": cleared, "previous_last_record_id": previous.last, "previous_entry_count": previous.count},
            )
        )
    grouped: dict[tuple[str, str], list[SelEntry]] = defaultdict(list)
    for entry in fresh:
        if (kind := classify(entry)) is not None:
            grouped[(kind, _subject(entry))].append(entry)
    signals.extend(_failure_signal(kind, subject, entries) for (kind, subject), entries in grouped.items())
    if (state.percent_used is not None and state.percent_used >= SEL_FULL_PERCENT) or state.overflow:
        signals.append(
            SignalValue(
                "sel_full",
                "sel",
                float(state.percent_used if state.percent_used is not None else 100.0),
                {"percent_used": state.percent_used, "overflow": state.overflow, "entry_count": state.entry_count},
            )
        )
    reported_max = _reported_max(state)
    last = reported_max
    if cleared not in RESTARTED and previous is not None and previous.last is not None:
        last = previous.last if reported_max is None else max(previous.last, reported_max)
    count = state.entry_count if state.entry_count is not None else (previous.count if previous else None)
    return signals, SelMemory(last=last, count=count)
