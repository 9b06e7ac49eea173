"""Corrected memory errors per 4 KiB page: the page that keeps correcting, for soft-offlining it.

A page is `address >> 12` (4 KiB, as mcelog's page accounting counts, PAGE_SHIFT 12; a kernel with
larger pages, arm64's 64 KiB, offlines the larger page that holds it). The addresses come from the
sources that carry one: rasdaemon's mc_event rows (EDAC's decoded system address; its `grain` column
holds the trace event's grain_bits, and where that is above 12 the error may lie on a neighbouring
page: the page is not certain), and machine-check memory records (rasdaemon mce_record, mcelog) whose
MCi_STATUS has ADDRV. Such a record's page is certain only as the kernel's mce_usable_address() judges
an Intel address: MCi_STATUS has MISCV and MCi_MISC says a physical address (mode 2) whose least
significant valid bit is at most 12 (a page or finer). An AMD CPU's memory record (the record's CPU
vendor, else its bank named a Unified Memory Controller) carries the channel's normalised address, which
only the platform's address translation (amd64_edac, the kernel's AMD address translation library) turns
into a system address: such a page is tracked and shown, never certain (on AMD, EDAC's mc_event row of
the same error gives the system address; the normalised page then takes a second of the tracked places).
Uncorrected records are not counted: the kernel's memory_failure() hard-offlines those pages itself.

The same error may be in both mc_event and mce_record (rasdaemon writes both from one machine check):
per page and report, the larger of the two sources' counts is taken, never their sum. Counts are
kept per event hour (the records' own times; the report's when a row has none), with the hour's first
and last error's times, so the 24 h window is exact to the hour; a record dated after the report (a
clock that disagrees) is not placed in it. The signal carries those hours (`since`, the first error's own
time; `counted`): a detection while its DIMM's repair is verified reopens the ticket only on the errors
after the repair (remediator.recount).
At most MAX_PAGES pages are kept per host: the least recently erring one is evicted and the eviction
counted (mcelog's "counter replacements": many evictions mean the errors are spread over many pages,
which is a DIMM's fault for the DIMM rules, not a page's; the evicted pages' errors are no longer in the
DIMM's sum, so no page is called concentrated while any eviction lies in the window). Each source keeps its own cursor
(rasdaemon's row ids, mcelog's record times), so a row is counted once; the first sight of a
database counts its rows of the last 24 h by their times. Pure.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from checker.parsers.rasdaemon import ras_timestamp
from checker.schemas import MceRecord, Observations, RasMemoryEvent
from remediator.derive.mce import memory_channel, memory_location
from remediator.derive.memory import MAX_PAGES, Bucket, PageMemory, PageTrack, TimedBucket
from remediator.signals import SignalValue

PAGE_SHIFT = 12
PAGE_BITS = PAGE_SHIFT  # a grain of up to 2**12 bytes lies within one 4 KiB page when aligned
WINDOW_H = 24
AHEAD = dt.timedelta(minutes=5)  # a record dated later than this after the report cannot be placed in its window
ADDRV = 1 << 58  # IA32_MCi_STATUS: MCi_ADDR holds the address (Intel SDM vol. 3B; AMD MCA_STATUS likewise)
MISCV = 1 << 59  # IA32_MCi_STATUS: MCi_MISC holds the address's mode and granularity
PHYSICAL_MODE = 2  # MCi_MISC[8:6]: 2 = physical address (Intel SDM vol. 3B, "MCi_MISC")
MC_EVENT = "rasdaemon mc_event"
_H = TypeVar("_H", bound=tuple[int, ...])  # a Bucket or a TimedBucket: (epoch hour, count, …)
MCE = "machine check"
_UMC_WORDS = ("unified memory controller", "umc")


@dataclass
class _Counts:
    """One page's new errors in this report, by source family and event hour."""

    hours: dict[str, dict[int, int]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(int)))
    times: dict[int, tuple[int, int]] = field(default_factory=dict)  # event hour -> its first and last error
    address: int = 0
    where: str = ""
    about: dict[str, str | int | None] = field(default_factory=dict)
    sources: set[str] = field(default_factory=set)
    grain_bits: int | None = None
    physical: bool = True

    def seen(self, at: dt.datetime) -> None:
        """An error of this page at `at`: its hour's first and last error's own times."""
        stamp, hour = int(at.timestamp()), _hour(at)
        first, last = self.times.get(hour, (stamp, stamp))
        self.times[hour] = (min(first, stamp), max(last, stamp))

    def merged(self) -> dict[int, int]:
        """Per hour, the larger family's count: the two describe the same machine checks."""
        hours: set[int] = {h for counts in self.hours.values() for h in counts}
        return {h: max(counts.get(h, 0) for counts in self.hours.values()) for h in sorted(hours)}


def page_of(address: int) -> int:
    return address >> PAGE_SHIFT << PAGE_SHIFT


def _hour(at: dt.datetime) -> int:
    return int(at.timestamp()) // 3600


def _dimm_subject(event: RasMemoryEvent) -> str:
    """The DIMM as remediator.derive.rasdaemon names it (its dimm_ce_rate subject)."""
    label = event.label.strip()
    if label and not label.lower().startswith("unknown"):
        return label
    layers = ":".join("-" if x is None else str(x) for x in (event.top_layer, event.middle_layer, event.lower_layer))
    return f"mc{event.mc if event.mc is not None else '-'}:{layers}"


def _new_by_id(ids: Sequence[int], cursor: int | None, reported: int | None) -> tuple[set[int], int | None]:
    """(ids to count, the cursor to keep). A database whose ids went below the cursor was recreated."""
    top = max([*ids, *([reported] if reported is not None else [])], default=None)
    if cursor is None or (top is not None and top < cursor):
        return set(ids), top
    return {i for i in ids if i > cursor}, cursor if top is None else max(cursor, top)


def _mc_event_hits(obs: Observations, memory: PageMemory, now: dt.datetime, pages: dict[int, _Counts]) -> int | None:
    state = obs.rasdaemon
    if state is None:
        return memory.mc_event
    reported = state.last_ids.get("mc_event", state.last_id)
    fresh, cursor = _new_by_id([e.id for e in state.memory_events], memory.mc_event, reported)
    oldest = _hour(now) - WINDOW_H + 1
    for event in state.memory_events:
        if event.id not in fresh or event.err_type.strip().lower() != "corrected" or not event.address:
            continue
        at = ras_timestamp(event.timestamp or "") or now
        if _hour(at) < oldest or at > now + AHEAD:
            continue
        hour = _hour(at)
        counts = pages.setdefault(page_of(event.address), _Counts())
        counts.hours[MC_EVENT][hour] += max(event.err_count, 1)
        counts.seen(at)
        counts.address, counts.where = event.address, _dimm_subject(event)
        counts.about = {
            "mc": event.mc,
            "label": event.label,
            "top_layer": event.top_layer,
            "middle_layer": event.middle_layer,
            "lower_layer": event.lower_layer,
        }
        counts.sources.add(MC_EVENT)
        if event.grain is not None:
            counts.grain_bits = max(event.grain, counts.grain_bits or 0)
    return cursor


def _status(record: MceRecord) -> int | None:
    try:
        return int(record.status, 16) if record.status else None
    except ValueError:
        return None


def _address(record: MceRecord) -> int | None:
    if record.error_class != "memory" or not record.corrected or not record.address:
        return None
    status = _status(record)
    if status is not None and not status & ADDRV:
        return None  # MCi_ADDR does not hold this error's address
    try:
        address = int(record.address, 16)
    except ValueError:
        return None
    return address or None


def _not_physical(record: MceRecord) -> str | None:
    """Why the record's address is not certainly a system physical address of page granularity, or None."""
    if record.amd or (record.amd is None and any(word in record.message.lower() for word in _UMC_WORDS)):
        return "an AMD memory record's address is the UMC channel's normalised address, not a system physical address"
    status = _status(record)
    try:
        misc = int(record.misc, 16) if record.misc else None
    except ValueError:
        misc = None
    if status is None or not status & MISCV or misc is None:
        return "the machine check gives no valid MCi_MISC: the address's mode and granularity are unknown"
    lsb, mode = misc & 0x3F, (misc >> 6) & 0x7
    if lsb > PAGE_SHIFT:
        return f"MCi_MISC gives the address to 2^{lsb} bytes, more than a 4 KiB page"
    if mode != PHYSICAL_MODE:
        return f"MCi_MISC gives address mode {mode}, not a physical address"
    return None


def _mce_batch(obs: Observations) -> tuple[list[MceRecord], str, int | None]:
    ras = obs.rasdaemon
    if ras is not None and ras.mce_records is not None:
        return list(ras.mce_records), "rasdaemon mce_record", ras.last_ids.get("mce_record")
    records = list(obs.mce or [])
    return records, "rasdaemon mce_record" if any(r.id is not None for r in records) else "mcelog", None


def _mce_hits(
    obs: Observations, memory: PageMemory, now: dt.datetime, pages: dict[int, _Counts]
) -> tuple[int | None, dt.datetime | None]:
    records, source, reported = _mce_batch(obs)
    numbered = [r.id for r in records if r.id is not None]
    fresh, cursor = _new_by_id(numbered, memory.mce_record, reported)
    since = memory.mcelog_at
    newest = since
    oldest = _hour(now) - WINDOW_H + 1
    for record in records:
        if record.id is not None:
            if record.id not in fresh:
                continue
        elif record.timestamp is None or (since is not None and record.timestamp <= since):
            continue  # an undated record cannot be placed in the window; a dated one at or before the cursor is counted
        else:
            newest = record.timestamp if newest is None or record.timestamp > newest else newest
        address = _address(record)
        at = record.timestamp or now
        if address is None or _hour(at) < oldest or at > now + AHEAD:
            continue
        hour = _hour(at)
        counts = pages.setdefault(page_of(address), _Counts())
        counts.hours[MCE][hour] += 1
        counts.seen(at)
        if not counts.where or MC_EVENT not in counts.sources:
            channel = memory_channel(record)
            counts.address, counts.where = address, memory_location(record)[0]
            counts.about = {
                "mc": None,
                "label": "",
                "socket": record.socket,
                "location": f"channel {channel}" if channel is not None else None,
            }
        counts.sources.add(source)
        if _not_physical(record) is not None:
            counts.physical = False  # not certainly a system physical address of this page (the signal says why)
    return cursor, newest


def _window(hours: Sequence[_H], oldest: int) -> list[_H]:
    return [entry for entry in hours if entry[0] >= oldest]


def _with_new(hours: list[Bucket | TimedBucket], counts: _Counts) -> list[Bucket | TimedBucket]:
    """The page's hours with this report's errors added. An hour keeps its first and last error's times while
    every error in it came with them (an hour kept before they were, Bucket, stays without)."""
    merged: dict[int, Bucket | TimedBucket] = {entry[0]: entry for entry in hours}
    for hour, n in counts.merged().items():
        first, last = counts.times[hour]
        had = merged.get(hour)
        if had is None:
            merged[hour] = (hour, n, first, last)
        elif len(had) == 4:
            merged[hour] = (hour, had[1] + n, min(had[2], first), max(had[3], last))
        else:
            merged[hour] = (hour, had[1] + n)
    return [merged[hour] for hour in sorted(merged)]


def page_signals(
    obs: Observations, previous: PageMemory | None, *, now: dt.datetime
) -> tuple[list[SignalValue], PageMemory | None]:
    """`page_ce_count` for every page with new corrected errors in this report, and the memory to keep."""
    if obs.rasdaemon is None and obs.mce is None:
        return [], previous  # no address-bearing source ran: keep what was remembered
    memory = previous or PageMemory()
    pages: dict[int, _Counts] = {}
    mc_cursor = _mc_event_hits(obs, memory, now, pages)
    mce_cursor, mcelog_at = _mce_hits(obs, memory, now, pages)
    oldest = _hour(now) - WINDOW_H + 1
    tracked = {key: track.model_copy() for key, track in memory.pages.items()}
    for page, counts in pages.items():
        key = f"0x{page:x}"
        track = tracked.get(key) or PageTrack()
        hours = _with_new(list(track.hours), counts)
        better = MC_EVENT in counts.sources or not track.where  # EDAC's DIMM over a machine check's channel
        tracked[key] = PageTrack(
            hours=_window(hours, oldest)[-WINDOW_H:],
            where=counts.where if better else track.where,
            sources=sorted(set(track.sources) | counts.sources)[:2],
            grain_bits=max((g for g in (track.grain_bits, counts.grain_bits) if g is not None), default=None),
            physical=track.physical and counts.physical,
        )
    tracked = {k: t.model_copy(update={"hours": _window(t.hours, oldest)}) for k, t in tracked.items()}
    tracked = {k: t for k, t in tracked.items() if t.hours}  # no error within the window: forgotten
    evicted = _window(list(memory.evicted), oldest)
    if len(tracked) > MAX_PAGES:
        order = sorted(tracked, key=lambda k: (max(e[0] for e in tracked[k].hours), _total(tracked[k])))
        gone = order[: len(tracked) - MAX_PAGES]
        for key in gone:
            del tracked[key]
        evicted = _add(evicted, _hour(now), len(gone))
    places = {**memory.places, **{c.where: c.about for c in pages.values() if MC_EVENT in c.sources}}
    places.update({c.where: c.about for c in pages.values() if c.where not in places})
    places = {where: about for where, about in places.items() if any(t.where == where for t in tracked.values())}
    kept = PageMemory(
        pages=tracked,
        places=places,
        evicted=evicted,
        mc_event=mc_cursor,
        mce_record=mce_cursor,
        mcelog_at=mcelog_at,
    )
    if previous is None and not pages:
        return [], kept
    signals = [_signal(f"0x{page:x}", counts, kept) for page, counts in sorted(pages.items())]
    return [s for s in signals if s is not None], kept


def _total(track: PageTrack) -> int:
    return sum(entry[1] for entry in track.hours)


def _add(buckets: list[tuple[int, int]], hour: int, n: int) -> list[tuple[int, int]]:
    counts = dict(buckets)
    counts[hour] = counts.get(hour, 0) + n
    return sorted(counts.items())[-WINDOW_H:]


def _signal(key: str, counts: _Counts, memory: PageMemory) -> SignalValue | None:
    tracked = memory.pages
    track = tracked.get(key)
    if track is None:
        return None  # evicted at once: a spread too wide to track
    count = _total(track)
    same_place = [t for t in tracked.values() if t.where == track.where]
    location_ces = sum(_total(t) for t in same_place)
    evicted = sum(n for _, n in memory.evicted)  # errors of pages no longer tracked: the spread is unknown
    grain_bits = track.grain_bits
    why: list[str] = []
    if grain_bits is not None and grain_bits > PAGE_BITS:
        why.append(f"the error's grain is 2^{grain_bits} bytes, more than a 4 KiB page")
    if not track.physical and MC_EVENT not in track.sources:  # EDAC's decoded address, where it has one, decides
        why.append(
            "a machine check's address is not certainly this page's system physical address (an AMD UMC's"
            " normalised address, or MCi_MISC not saying a physical address of 4 KiB or finer)"
        )
    detail: dict[str, object] = {
        "page": key,
        "address": f"0x{counts.address:x}",
        "count_24h": count,
        "new": sum(counts.merged().values()),
        "dimm": track.where,
        **memory.places.get(track.where, {}),
        "sources": ", ".join(track.sources),
        "grain_bits": grain_bits,
        "page_certain": not why,
        "uncertain": "; ".join(why) or None,
        "concentrated": count * 2 >= location_ces and not evicted,
        "location_ces_24h": location_ces,
        "location_pages": len(same_place),
        "pages_tracked": len(tracked),
        "evicted_24h": evicted,
        "window_h": WINDOW_H,
        **counted_hours(track.hours),
    }
    return SignalValue("page_ce_count", key, float(count), detail)


def counted_hours(hours: Sequence[Sequence[int]], since_hour: int | None = None) -> dict[str, object]:
    """`since`, `counted` ([epoch seconds, CEs, first, last error's time] per event hour: its start) and
    `counted_s` (an hour), so a DIMM's ticket resolved after its swap is not reopened by the errors of before
    it (remediator.recount). `since` is the first counted error's own time: a page first seen after the
    resolve, even within the resolve's hour, is then judged on its whole count (review of the counted spans,
    finding 1: the hour's start made a new page's errors look older than the repair). An hour kept before its
    errors' times were ([hour, CEs]) counts from its start. `since_hour`: the count begins there (after a
    page's offline) when no error is counted yet."""
    entries = [[int(h[0]) * 3600, int(h[1]), *(int(t) for t in h[2:4])] for h in hours if len(h) in (2, 4)]
    starts = [e[2] if len(e) == 4 else e[0] for e in entries]
    first = min(starts) if starts else (since_hour * 3600 if since_hour is not None else None)
    if first is None:
        return {}
    since = dt.datetime.fromtimestamp(first, dt.UTC).isoformat()
    return {"since": since, "counted": entries, "counted_s": 3600}
