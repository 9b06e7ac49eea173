"""kernel_event_count: how many events of each kernel-log kind a host logged within that kind's window.

A report's kernel log is incremental (the agent keeps a /dev/kmsg cursor), and events already
counted are skipped again by sequence number within the same boot, so a redelivered or
re-read record is counted once. Counts live in memory as coarse buckets (window / BUCKETS
wide), so an event leaves the count between `window` and `window + window / BUCKETS` after
it happened, and memory stays bounded however many events a storm brings.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict

from checker.schemas import KernelEvent, KernelEventKind, KernelLogState
from remediator.derive.memory import Bucket, KernelMemory
from remediator.signals import SignalValue

K = KernelEventKind
DAY_S = 24 * 3600
DEFAULT_WINDOW_S = DAY_S
WINDOWS_S: dict[KernelEventKind, int] = {
    # A host that panics or locks up hard twice in a week is as suspect as one that does it twice a day.
    K.panic: 7 * DAY_S,
    K.hard_lockup: 7 * DAY_S,
    K.oops: 7 * DAY_S,
    # Throttling matters while it lasts (cooling, a failed fan); yesterday's heat wave does not.
    K.thermal_throttle: 3600,
}
# A link coming up is the recovery of nic_link_down, not a fault.
IGNORED_KINDS = frozenset({K.nic_link_up})
BUCKETS = 24
SAMPLE_LINES = 5
MAX_SUBJECTS = 5


def window_of(kind: KernelEventKind) -> int:
    return WINDOWS_S.get(kind, DEFAULT_WINDOW_S)


def _live(buckets: list[Bucket], now_s: float, window_s: int) -> list[Bucket]:
    width = max(1, window_s // BUCKETS)
    start = now_s - window_s
    return [(index, n) for index, n in buckets if (index + 1) * width > start and n > 0][-(BUCKETS + 1) :]


def _add(buckets: list[Bucket], at_s: float, window_s: int) -> list[Bucket]:
    index = int(at_s) // max(1, window_s // BUCKETS)
    merged = dict(buckets)
    merged[index] = merged.get(index, 0) + 1
    return sorted(merged.items())[-(BUCKETS + 1) :]


def _seqs(state: KernelLogState) -> list[int]:
    return [e.seq for e in state.events if e.seq is not None]


def kernel_signals(
    state: KernelLogState | None, previous: KernelMemory | None, *, now: dt.datetime, boot_id: str | None
) -> tuple[list[SignalValue], KernelMemory | None]:
    if state is None:
        return [], previous
    prev = previous or KernelMemory()
    boot = state.boot_id or boot_id
    last_seq = prev.seq if boot is not None and prev.boot == boot else None
    now_s = now.timestamp()

    fresh: dict[KernelEventKind, list[KernelEvent]] = defaultdict(list)
    for event in state.events:
        if event.seq is not None and last_seq is not None and event.seq <= last_seq:
            continue  # counted when it was first reported
        if event.kind not in IGNORED_KINDS:
            fresh[event.kind].append(event)
    # The cursor is the collector's (events recovered from a previous boot's pstore carry that
    # boot's numbers); without one, the newest event's number. It never moves back within a boot.
    high = state.last_seq if state.last_seq is not None else max(_seqs(state), default=None)
    if last_seq is not None:
        high = last_seq if high is None else max(high, last_seq)

    known = {kind.value: kind for kind in KernelEventKind}
    counts: dict[str, list[Bucket]] = {}
    for name, buckets in prev.counts.items():
        if name in known and (live := _live(buckets, now_s, window_of(known[name]))):
            counts[name] = live

    signals: list[SignalValue] = []
    for kind in KernelEventKind:
        events = fresh.get(kind)
        if not events:
            continue
        window_s = window_of(kind)
        buckets = counts.get(kind.value, [])
        for event in events:
            at = min(event.timestamp or now, now).timestamp()
            if at > now_s - window_s:  # an event older than its window (a replayed ring buffer) is old news
                buckets = _add(buckets, at, window_s)
        if buckets:
            counts[kind.value] = buckets
        value = sum(n for _, n in _live(buckets, now_s, window_s))
        if value <= 0:
            continue
        newest = events[-1]
        subjects = list(dict.fromkeys(e.subject for e in events if e.subject))[-MAX_SUBJECTS:]
        detail: dict[str, object] = {
            "window_s": window_s,
            "new": len(events),
            "errors": sum(e.count for e in events),
            "subject": newest.subject,
            "subjects": subjects,
            "lines": list(newest.lines[:SAMPLE_LINES]),
        }
        if state.lost_records:
            detail["lost_records"] = state.lost_records
        signals.append(SignalValue("kernel_event_count", kind.value, float(value), detail))
    return signals, KernelMemory(boot=boot, seq=high, counts=counts)
