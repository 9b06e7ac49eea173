"""DIMM error rates from rasdaemon's mc_event records.

mc_event is EDAC seen through rasdaemon, not a second opinion: rasdaemon writes it from the
`ras:mc_event` trace event that edac_mc_handle_error raises, so it misses what EDAC misses (the
corrected errors the kernel's CE collector, RAS_CEC, took before EDAC's decoders saw them). What it
adds is the DIMM label and a per-event record. The machine checks that EDAC never saw are in
rasdaemon's mce_record table (remediator/derive/mce.py). Events newer than the last id seen are
summed per DIMM label over the time since the previous report into `dimm_ce_rate` (detail.source =
"rasdaemon mc_event (EDAC path)"); uncorrected, fatal and deferred events become `dimm_ue`. The
first sight of a host's rasdaemon database records its last id only: its history spans an unknown time.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict

from checker.schemas import RasdaemonState, RasMemoryEvent
from remediator.derive.memory import RasMemory
from remediator.signals import MAX_GAP_S, SignalValue

SOURCE = "rasdaemon mc_event (EDAC path)"
CORRECTED = frozenset({"corrected"})
UNCORRECTED = frozenset({"uncorrected", "fatal", "deferred"})


def _label(event: RasMemoryEvent) -> str:
    label = event.label.strip()
    if label and not label.lower().startswith("unknown"):
        return label
    layers = ":".join("-" if x is None else str(x) for x in (event.top_layer, event.middle_layer, event.lower_layer))
    return f"mc{event.mc if event.mc is not None else '-'}:{layers}"


def ras_signals(
    state: RasdaemonState | None, previous: RasMemory | None, *, now: dt.datetime
) -> tuple[list[SignalValue], RasMemory | None]:
    if state is None:
        return [], previous
    cursors = [c for c in (state.last_id, state.last_ids.get("mc_event")) if c is not None]
    reported_max = max([e.id for e in state.memory_events] + cursors, default=None)
    if previous is None:
        return [], RasMemory(at=now, last=reported_max)
    restarted = previous.last is not None and reported_max is not None and reported_max < previous.last
    fresh = [e for e in state.memory_events if restarted or previous.last is None or e.id > previous.last]
    last = reported_max
    if not restarted and previous.last is not None:
        last = previous.last if reported_max is None else max(previous.last, reported_max)

    corrected: dict[str, list[RasMemoryEvent]] = defaultdict(list)
    uncorrected: dict[str, list[RasMemoryEvent]] = defaultdict(list)
    for event in fresh:
        kind = event.err_type.strip().lower()
        if kind in CORRECTED:
            corrected[_label(event)].append(event)
        elif kind in UNCORRECTED:
            uncorrected[_label(event)].append(event)

    signals: list[SignalValue] = []
    elapsed = (now - previous.at).total_seconds()
    for label, events in corrected.items():
        errors = sum(e.err_count for e in events)
        if errors == 0 or not 0 < elapsed <= MAX_GAP_S:
            continue
        detail = {**_about(events), "delta": errors, "elapsed_s": round(elapsed, 3)}
        if state.truncated:
            detail["truncated"] = state.truncated  # more rows than a report carries: the rate is a floor
        signals.append(SignalValue("dimm_ce_rate", label, errors / elapsed, detail))
    for label, events in uncorrected.items():
        errors = sum(e.err_count for e in events)
        if errors:
            signals.append(SignalValue("dimm_ue", label, float(errors), _about(events)))
    return signals, RasMemory(at=now, last=last)


def _about(events: list[RasMemoryEvent]) -> dict[str, object]:
    return {
        "source": SOURCE,
        "events": len(events),
        "first_id": events[0].id,
        "last_id": events[-1].id,
        "err_types": sorted({e.err_type for e in events}),
        "message": events[-1].err_msg,
    }
