"""SEL signals: power supply failures and lost input, fans, memory ECC the BMC logged, fatal bus and
PCI errors (critical interrupts), temperatures past an upper critical threshold, chassis intrusion, a
sensor flooding the log, a cleared or full log.

Only entries new since the previous report count (by record id). The BMC's record ids restart
when its log is cleared, so ids going backwards, a falling entry count or a "Log area
reset/cleared" entry mean the history starts over (`sel_cleared`). On a host's first report
only the last FIRST_SIGHT_LOOKBACK_S of history counts: a new agent must not ticket years-old
entries. Where the ids restarted and the log is listed whole (ids backwards, or the collector saw the
count fall), the listing still holds old history when the BMC renumbered it (after a BMC reflash) or
dropped only its oldest entries: only entries dated after the newest one already seen count (less
SKEW_S, the entries that close to it matched by content), and an undated (Pre-Init) entry only after
the last dated entry that was history. Deasserted entries are recoveries and never fire a failure.
A host whose log is read by the other protocol this time (SelState.source: both configured, one failing)
keeps a cursor per protocol: the switch is no clearing, and only entries dated after the newest one
already seen and past that protocol's own cursor are new (`_switched`), by time alone (the two protocols word
one entry differently). One log, but not one clock: ipmitool
prints the BMC's local time, which the parser takes as UTC, where Redfish's Created carries its zone (the
third review of the Redfish rules, finding 5: a BMC on UTC-6 recounted six hours of entries at the switch).
So each protocol's offset from UTC is bounded by its entries new by record id, which were logged between
its previous read and this one (`clock`, bounds in seconds), and the newest time seen is carried over by the
one zone offset (a multiple of 15 minutes) inside those bounds; where the bounds hold none or several, the
offset is taken as 0 (the fourth review, finding 2). Where no time was seen yet, only the last
FIRST_SIGHT_LOOKBACK_S of the listing is new, as on a first report. The memory entries' times are taken into
UTC by the same offset before their rate's buckets and EDAC's windows (the fourth review, finding 6: a BMC
on local time west of UTC put its entries hours out of the hour's buckets).

A PSU that lost its input ("AC lost", "input lost or out-of-range") usually sits on a failed
feed, PDU or whip, not a failed PSU: it is `psu_input_lost`, apart from `psu_failure` (failure
detected, predictive failure, configuration error). A Power Unit
"failure detected", "redundancy lost" or "non-redundant" names no PSU and follows either: it is
`power_unit_fault` only when neither was logged within POWER_EXPLAINS_S.
A sensor that logs FLOOD_ENTRIES or more entries within FLOOD_WINDOW_S is `sel_flood`, and a
full SEL says whether a flood filled it: clearing a flooded log only hides its source.

`sel_critical_interrupt` is a fatal bus or PCI error the firmware logged (PERR, SERR, bus uncorrectable
or fatal, a fatal or I/O-check NMI): under firmware-first error handling the OS may never see it.
`sel_temperature_high` is a temperature past an upper critical (`level` upper_cr) or non-recoverable
(upper_nr) threshold, logged when it happened: the live reading is sensor_critical's (derive/sensors.py),
the log says it happened between two reads. `chassis_intrusion` is recorded and no rule of the built-in
pack tickets it: in a data center an open chassis is almost always a technician at work, often sent by
fleetfix's own ticket; an operator who wants one per host adds a rule.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import math
import re
from collections import defaultdict
from collections.abc import Sequence
from typing import Literal

from checker.schemas import SelEntry, SelState
from remediator.derive.capacity_sel import sel_kind
from remediator.derive.kernel import add_to_bucket, live_buckets
from remediator.derive.memory import Bucket, ClockBounds, SelCursor, SelMemory
from remediator.derive.sel_interrupts import RecentAer, interrupt_detail, is_critical, remember_aers
from remediator.derive.sel_memory import ce_rate_signals
from remediator.signals import SignalValue

FIRST_SIGHT_LOOKBACK_S = 24 * 3600
SEL_FULL_PERCENT = 90.0
MAX_LISTED = 10
RESTARTED = ("record_ids_backwards", "collector_saw_fewer_entries")  # every listed entry is new
POWER_EXPLAINS_S = 3600
FLOOD_WINDOW_S = 24 * 3600
FLOOD_ENTRIES = 50  # a day's worth from one sensor fills a 512-1024-entry SEL within two or three weeks
FLOOD_MEMORY_S = 7 * 24 * 3600  # a full SEL logs nothing more: remember what filled it for a week
MAX_WATCHED_SENSORS = 8
SKEW_S = 300  # our own allowance for the BMC's clock stepping (NTP, a BMC reset) between two listings
MAX_TAIL = 32

_PSU_INPUT = re.compile(r"ac lost|input lost|out.of.range", re.IGNORECASE)
_PSU = re.compile(
    r"failure detected|predictive failure|configuration error|power supply failure|power unit failure",
    re.IGNORECASE,
)
_REDUNDANCY = re.compile(r"redundancy lost|non-redundant", re.IGNORECASE)
_FAN = re.compile(
    r"\blower critical going low|lower non-recoverable going low|redundancy lost|non-redundant"
    r"|fan fail|failure detected|transition to critical|transition to non-recoverable",
    re.IGNORECASE,
)
_UE = re.compile(r"uncorrectable (?:ecc|error)|uncorrected", re.IGNORECASE)
_CE = re.compile(r"correctable ecc|correctable memory error", re.IGNORECASE)
# IPMI 2.0 table 42-3, sensor type 13h Critical Interrupt, in ipmitool's words: the offsets that say a bus or
# device failed (02h I/O channel check NMI, 04h PCI PERR, 05h PCI SERR, 08h Bus Uncorrectable, 09h Fatal
# NMI, 0Ah Bus Fatal). Not 00h (the front panel's NMI button), 03h software NMI, 07h Bus Correctable or
# 0Bh Bus Degraded: those are a person, the OS, or the sel-flood watch's business.
# (remediator/derive/sel_interrupts.py FATAL_INTERRUPTS, with Dell's wordings)
# IPMI 2.0 35.1 threshold events, as ipmitool (and the Redfish log parser, from a DMTF threshold EntryCode)
# write them: an upper critical or non-recoverable threshold crossed going high. A lower one is cold or a
# failed sensor, not heat.
_UPPER = re.compile(r"upper (?:critical|non-recoverable) going high", re.IGNORECASE)
# IPMI 2.0 table 42-3, sensor type 05h Physical Security, offsets 00h-03h and 06h: an intrusion (not 04h
# 'System unplugged from LAN' or 05h 'Unauthorized dock').
_INTRUSION = re.compile(r"intrusion", re.IGNORECASE)


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
    if (disabled := sel_kind(entry)) is not None:  # a DIMM or CPU firmware took out (lost capacity)
        return disabled
    if entry.direction == "deasserted":
        return None
    kind = entry.sensor_type.lower()
    if kind in ("power supply", "power unit"):
        if _PSU_INPUT.search(entry.event):
            return "psu_input_lost"
        if kind == "power supply" and _PSU.search(entry.event):
            return "psu_failure"
        if _PSU.search(entry.event) or _REDUNDANCY.search(entry.event):
            return "power_unit_fault"  # the host's power as a whole: it names no PSU
        return None
    if kind in ("fan", "cooling device") and _FAN.search(entry.event):
        return "fan_failure"
    if kind == "memory" and (_UE.search(entry.event) or _CE.search(entry.event)):
        return "sel_memory_ecc"
    if kind == "critical interrupt" and is_critical(entry.event):
        return "sel_critical_interrupt"
    if kind == "temperature" and _UPPER.search(entry.event):
        return "sel_temperature_high"
    if kind == "physical security" and _INTRUSION.search(entry.event):
        return "chassis_intrusion"
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
        return _after_history(state.entries, previous, now), "record_ids_backwards"
    if state.cleared:  # the collector saw the count fall and listed the new log whole
        return _after_history(state.entries, previous, now), "collector_saw_fewer_entries"
    fresh = [e for e in state.entries if previous.last is None or e.record_id > previous.last]
    if previous.count is not None and state.entry_count is not None and state.entry_count < previous.count:
        return fresh, "entry_count_dropped"
    if any(is_clear(e) for e in fresh):
        return fresh, "log_area_reset"
    return fresh, None


Source = Literal["ipmi", "redfish"]


ZONE_STEP_S = 900  # every UTC offset in the tz database is a multiple of 15 minutes (Nepal +5:45, Chatham +12:45)


def _offset(clock: ClockBounds | None) -> float:
    """A clock's offset from UTC (seconds): the one multiple of ZONE_STEP_S inside its learned bounds, else 0
    (one clock assumed). Never the bounds' middle: entries logged near a read leave the bounds tens of seconds
    off the zone (the fourth review, finding 2: 18 s off recounted 6 entries), and an offset off by a little
    counts the entries around the newest one again or loses them."""
    if clock is None:
        return 0.0
    low, high = math.ceil(clock[0] / ZONE_STEP_S), math.floor(clock[1] / ZONE_STEP_S)
    return float(low * ZONE_STEP_S) if low == high else 0.0


def _learn_clock(
    fresh: list[SelEntry], previous: SelMemory, now: dt.datetime, known: ClockBounds | None
) -> ClockBounds | None:
    """Narrow the bounds on the source's clock offset with entries new by record id: each was logged after the
    previous read (previous.read_at) and before this one, so its time less the offset lies between the two. A
    clock that stepped (bounds that no longer meet) starts again from this report's entries."""
    if previous.read_at is None:
        return known
    dated = [e.timestamp for e in fresh if e.timestamp is not None]
    if not dated:
        return known
    low = max(t - now for t in dated).total_seconds()
    high = min(t - previous.read_at for t in dated).total_seconds()
    if low > high:  # entries older than the previous read: a backlog, not news of the clock
        return known
    if known is not None and max(low, known[0]) <= min(high, known[1]):
        return (max(low, known[0]), min(high, known[1]))
    return (low, high)


def _switched(
    state: SelState, previous: SelMemory, source: Source, was: Source, now: dt.datetime
) -> tuple[list[SelEntry], SelMemory, dict[Source, SelCursor]]:
    """A host whose log is read by the other protocol this time (both configured, Redfish preferred, one of them
    failing): its record ids and count are another space, so the other protocol's cursor (ids, newest time,
    clock) is kept aside and this one's taken up where it was left. The newest entry already seen (by the
    other) is carried into this protocol's clock by the two clocks' zone offsets (`_offset`); only an entry
    dated strictly after it, and with this protocol's cursor only ids past it, is new (the second review of the
    Redfish rules, finding 6; the third, finding 5). Never by what the entries say: ipmitool's 'PS1 Status'
    'Failure detected' is Redfish's '#0x60' 'Power supply PS1 failure detected.', so the same entry never
    matches across protocols and any window of content matching counts it again (the fourth review, finding
    2: a repaired PSU ticketed again). An entry logged in the same second as the newest one seen, after the
    other protocol's last listing, is lost. With no time seen yet, the first-sight lookback. An undated entry
    is new only past this protocol's cursor and after the last dated entry that was old."""
    cursors = {k: v for k, v in previous.cursors.items() if k != source}
    cursors[was] = SelCursor(
        last=previous.last, count=previous.count, newest=previous.newest, tail=previous.tail, clock=previous.clock
    )
    own = previous.cursors.get(source) or SelCursor()
    view = previous.model_copy(
        update={"last": own.last, "count": own.count, "newest": own.newest, "tail": own.tail, "clock": own.clock}
    )
    reported_max = _reported_max(state)
    past = own.last is not None and (reported_max is None or reported_max >= own.last)
    into = _offset(own.clock) - _offset(previous.clock)  # the other clock's times into this one's
    if previous.newest is not None:
        cut = previous.newest + dt.timedelta(seconds=into)
    else:  # no time seen by either: as a first sight, by this clock
        cut = now + dt.timedelta(seconds=_offset(own.clock) - FIRST_SIGHT_LOOKBACK_S)

    def dated_new(entry: SelEntry) -> bool:
        return entry.timestamp is not None and entry.timestamp > cut

    old = [i for i, e in enumerate(state.entries) if e.timestamp is not None and not dated_new(e)]
    last_old = old[-1] if old else -1

    def new(index: int, entry: SelEntry) -> bool:
        if past and own.last is not None and entry.record_id <= own.last:
            return False
        if entry.timestamp is None:
            return past and index > last_old
        return dated_new(entry)

    if not past:  # this protocol's ids start over (never read this way, or its log was cleared): times alone
        view = view.model_copy(update={"last": None, "count": None})
    return [e for i, e in enumerate(state.entries) if new(i, e)], view, cursors


def _key(entry: SelEntry) -> str:
    """The entry's time, and a short digest of what it says (the memory stays small)."""
    at = entry.timestamp.isoformat() if entry.timestamp is not None else "-"
    said = f"{entry.sensor_type}|{entry.sensor_name}|{entry.event}|{entry.direction}".encode()
    return f"{at}|{hashlib.blake2b(said, digest_size=6).hexdigest()}"


def _after_history(entries: list[SelEntry], previous: SelMemory, now: dt.datetime) -> list[SelEntry]:
    """The entries of a restarted listing newer than the history already counted (module docstring).
    Memory from before the newest time was kept: the first-sight lookback stands in."""
    if previous.newest is None:
        cut, seen = now - dt.timedelta(seconds=FIRST_SIGHT_LOOKBACK_S), set[str]()
    else:
        cut, seen = previous.newest - dt.timedelta(seconds=SKEW_S), set(previous.tail)

    def new(entry: SelEntry) -> bool:
        return entry.timestamp is not None and entry.timestamp > cut and _key(entry) not in seen

    history = [i for i, e in enumerate(entries) if e.timestamp is not None and not new(e)]
    last_old = history[-1] if history else -1
    return [e for i, e in enumerate(entries) if new(e) or (e.timestamp is None and i > last_old)]


def _newest(
    state: SelState, previous: SelMemory | None, now: dt.datetime, clock: ClockBounds | None = None
) -> tuple[dt.datetime | None, list[str]]:
    """The newest entry time seen (never one in the future of this source's clock, as learned: a BMC clock
    set wrong) and the entries within SKEW_S of it."""
    newest = previous.newest if previous is not None else None
    ahead = dt.timedelta(seconds=SKEW_S + _offset(clock))
    dated = [e for e in state.entries if e.timestamp is not None and e.timestamp <= now + ahead]
    for entry in dated:
        if entry.timestamp is not None and (newest is None or entry.timestamp > newest):
            newest = entry.timestamp
    if newest is None:
        return None, []
    floor = newest - dt.timedelta(seconds=SKEW_S)
    kept = [k for k in (previous.tail if previous is not None else []) if _dated(k) >= floor]
    kept += [_key(e) for e in dated if e.timestamp is not None and e.timestamp >= floor]
    return newest, list(dict.fromkeys(kept))[-MAX_TAIL:]


def _dated(key: str) -> dt.datetime:
    try:
        at = dt.datetime.fromisoformat(key.split("|", 1)[0])
    except ValueError:
        return dt.datetime.min.replace(tzinfo=dt.UTC)
    return at if at.tzinfo is not None else at.replace(tzinfo=dt.UTC)


def _failure_signal(
    kind: str,
    subject: str,
    entries: list[SelEntry],
    aers: list[RecentAer] | None = None,
    now: dt.datetime | None = None,
) -> SignalValue:
    last = entries[-1]
    detail: dict[str, object] = {
        "sensor": f"{last.sensor_type} {last.sensor_name}".strip(),
        "events": list(dict.fromkeys(e.event for e in entries))[:MAX_LISTED],
        "record_ids": [e.record_id for e in entries][-MAX_LISTED:],
        "last_timestamp": last.timestamp.isoformat() if last.timestamp else None,
        "raw": last.raw,
    }
    if kind == "sel_memory_ecc":
        dated = [e.timestamp for e in entries if e.timestamp is not None]  # EDAC is compared from here on
        detail["first_timestamp"] = min(dated).isoformat() if dated else None
        uncorrectable = sum(1 for e in entries if _UE.search(e.event))
        detail.update(uncorrectable=uncorrectable > 0, uncorrectable_count=uncorrectable)
        detail["correctable_count"] = len(entries) - uncorrectable
    if kind == "sel_critical_interrupt":
        detail.update(interrupt_detail(entries, aers or [], now or dt.datetime.now(dt.UTC)))
    if kind == "sel_temperature_high":
        detail["level"] = "upper_nr" if any("non-recoverable" in e.event.lower() for e in entries) else "upper_cr"
    return SignalValue(kind, subject, float(len(entries)), detail)


def sensor_of(entry: SelEntry) -> str:
    """The sensor an entry came from, as the flood watch counts it ('Critical Interrupt PCIe Cor Sensor')."""
    return f"{entry.sensor_type} {entry.sensor_name}".strip()[:128]


def _watch(
    previous: dict[str, list[Bucket]], fresh: list[SelEntry], now: dt.datetime
) -> tuple[dict[str, list[Bucket]], dict[str, list[SelEntry]]]:
    """Per sensor, entries logged per bucket over the last FLOOD_MEMORY_S (the busiest sensors only)."""
    now_s = now.timestamp()
    counts = {
        sensor: live for sensor, buckets in previous.items() if (live := live_buckets(buckets, now_s, FLOOD_MEMORY_S))
    }
    by_sensor: dict[str, list[SelEntry]] = defaultdict(list)
    for entry in fresh:
        if entry.direction == "deasserted" or is_clear(entry):
            continue
        by_sensor[sensor_of(entry)].append(entry)
        at = min(entry.timestamp or now, now).timestamp()
        if at > now_s - FLOOD_MEMORY_S:
            counts[sensor_of(entry)] = add_to_bucket(counts.get(sensor_of(entry), []), at, FLOOD_MEMORY_S)
    busiest = sorted(counts.items(), key=lambda kv: -sum(n for _, n in kv[1]))[:MAX_WATCHED_SENSORS]
    return dict(busiest), by_sensor


def _in_window(buckets: list[Bucket], now: dt.datetime, window_s: int) -> int:
    width = max(1, FLOOD_MEMORY_S // 24)
    start = now.timestamp() - window_s
    return sum(n for index, n in buckets if (index + 1) * width > start)


def _flood_signals(
    watched: dict[str, list[Bucket]], fresh: dict[str, list[SelEntry]], now: dt.datetime
) -> list[SignalValue]:
    signals = []
    for sensor, entries in fresh.items():
        day = _in_window(watched.get(sensor, []), now, FLOOD_WINDOW_S)
        if day < FLOOD_ENTRIES:
            continue
        detail = {
            "sensor": sensor,
            "entries_24h": day,
            "threshold": FLOOD_ENTRIES,
            "events": list(dict.fromkeys(e.event for e in entries))[:MAX_LISTED],
            "record_ids": [e.record_id for e in entries][-MAX_LISTED:],
            "raw": [e.raw for e in entries][-3:],
        }
        signals.append(SignalValue("sel_flood", sensor, float(day), detail))
    return signals


def sel_signals(
    state: SelState | None,
    previous: SelMemory | None,
    *,
    now: dt.datetime,
    aer_seen: bool = False,
    aer_devices: Sequence[Sequence[str]] = (),
) -> tuple[list[SignalValue], SelMemory | None]:
    """`aer_devices`: this report's kernel log's uncorrected PCIe AER errors, each the functions it names
    (empty: none named); `aer_seen`: one that names none (remediator/derive/sel_interrupts.py)."""
    if state is None:
        return [], previous
    aer_at = now if aer_seen or aer_devices else (previous.aer_at if previous is not None else None)
    kept_aers = list(previous.aers) if previous is not None else []
    if previous is not None and previous.aer_at is not None and not kept_aers:  # memory from before `aers`
        kept_aers = [(int(previous.aer_at.timestamp()), [])]
    seen = [[str(x) for x in d if x] for d in aer_devices] + ([[]] if aer_seen and not aer_devices else [])
    aers = remember_aers(kept_aers, seen, now, previous.newest if previous is not None else None)
    was = previous.source if previous is not None else None
    clock = None
    if previous is not None and was is not None and state.source is not None and state.source != was:
        fresh, previous, cursors = _switched(state, previous, state.source, was, now)
        cleared = None  # the other protocol's record ids are another space: no clearing, no restart
        clock = previous.clock
    else:
        fresh, cleared = _new_entries(state, previous, now)
        cursors = dict(previous.cursors) if previous is not None else {}
        if previous is not None:
            clock = previous.clock
            if cleared is None and previous.last is not None and not state.truncated:
                clock = _learn_clock(fresh, previous, now, previous.clock)
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
    behind = dt.timedelta(seconds=_offset(clock))
    for entry in fresh:
        if (kind := classify(entry)) is not None:
            if kind == "sel_memory_ecc" and behind and entry.timestamp is not None:
                # the rate's buckets and EDAC's windows are in UTC: a BMC on local time west of UTC would put its
                # entries hours in the past, out of the hour's buckets (the fourth review, finding 6)
                entry = entry.model_copy(update={"timestamp": entry.timestamp - behind})
            grouped[(kind, _subject(entry))].append(entry)
    power_at = previous.power_at if previous is not None else None
    if any(kind in ("psu_failure", "psu_input_lost") for kind, _ in grouped):
        power_at = now
    explained = power_at is not None and (now - power_at).total_seconds() <= POWER_EXPLAINS_S
    signals.extend(
        _failure_signal(kind, subject, entries, aers, now)
        for (kind, subject), entries in grouped.items()
        if not (kind == "power_unit_fault" and explained)
    )
    correctable = {
        subject: ce
        for (kind, subject), entries in grouped.items()
        if kind == "sel_memory_ecc" and (ce := [e for e in entries if not _UE.search(e.event)])
    }
    rates, dimm_ce = ce_rate_signals(correctable, previous.dimm_ce if previous is not None else {}, now)
    signals.extend(rates)
    watched, by_sensor = _watch(previous.sensors if previous is not None else {}, fresh, now)
    signals.extend(_flood_signals(watched, by_sensor, now))
    if (state.percent_used is not None and state.percent_used >= SEL_FULL_PERCENT) or state.overflow:
        flooders = {s: _in_window(b, now, FLOOD_MEMORY_S) for s, b in watched.items()}
        flooders = {s: n for s, n in flooders.items() if n >= FLOOD_ENTRIES}
        signals.append(
            SignalValue(
                "sel_full",
                "sel",
                float(state.percent_used if state.percent_used is not None else 100.0),
                {
                    "percent_used": state.percent_used,
                    "overflow": state.overflow,
                    "entry_count": state.entry_count,
                    "flooding": bool(flooders),
                    "flooded_by": sorted(flooders, key=lambda s: -flooders[s]),
                },
            )
        )
    reported_max = _reported_max(state)
    last = reported_max
    if cleared not in RESTARTED and previous is not None and previous.last is not None:
        last = previous.last if reported_max is None else max(previous.last, reported_max)
    count = state.entry_count if state.entry_count is not None else (previous.count if previous else None)
    if cleared is not None:
        watched = {}  # a cleared log starts the flood watch afresh
    newest, tail = _newest(state, previous, now, clock)
    memory = SelMemory(
        source=state.source or (previous.source if previous is not None else None),
        cursors=cursors,
        last=last,
        count=count,
        power_at=power_at,
        read_at=now,
        clock=clock,
        sensors=watched,
        newest=newest,
        tail=tail,
        dimm_ce=dimm_ce,
        aer_at=aer_at,
        aers=aers,
    )
    return signals, memory
