"""Id spaces and their gaps: ids below a space's cursor that no report derived so far carried.

A report whose first new row (kernel-log sequence number, SEL record id, rasdaemon row id) is past
the space's cursor + 1 leaves a gap: the rows of a report still on its way (remediator/derive/late.py
counts them when it comes). Pure; bounded (MAX_GAPS per space, MAX_GAP_SPACES spaces).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from checker.schemas import Report
from remediator.derive.memory import MAX_GAP_SPACES, MAX_GAPS, Gap, HostMemory

KLOG = "klog:"


@dataclass(frozen=True)
class Space:
    key: str
    ids: list[int]  # the ids of the rows the report carries
    cursor: int | None  # the agent's cursor in that space after reading them
    restarted: bool = False  # the collector saw the source start over (a cleared SEL)
    first: int | None = None  # the first id the agent read (kmsg: every record, not only the events)
    lost: int = 0  # ids before `first` that the source lost before the agent read them (kmsg's ring buffer)


def spaces(report: Report) -> list[Space]:
    """The id spaces a report carries rows of."""
    obs = report.observations
    found: list[Space] = []
    if (klog := obs.kernel_log) is not None and (boot := klog.boot_id or report.host.boot_id):
        seqs = [e.seq for e in klog.events if e.seq is not None]
        found.append(Space(KLOG + boot, seqs, klog.last_seq, first=klog.first_seq, lost=klog.lost_records))
    if (sel := obs.sel) is not None:
        found.append(Space("sel", [e.record_id for e in sel.entries], sel.last_record_id, sel.cleared))
    ras = obs.rasdaemon
    if ras is not None:
        cursors = [c for c in (ras.last_id, ras.last_ids.get("mc_event")) if c is not None]
        found.append(Space("mc_event", [e.id for e in ras.memory_events], max(cursors, default=None)))
        if "aer_event" in ras.last_ids:
            found.append(Space("aer_event", [e.id for e in ras.aer_events], ras.last_ids["aer_event"]))
    if ras is not None and ras.mce_records is not None:
        ids = [r.id for r in ras.mce_records if r.id is not None]
        found.append(Space("mce_record", ids, ras.last_ids.get("mce_record")))
    elif obs.mce and any(r.id is not None for r in obs.mce):
        found.append(Space("mce_record", [r.id for r in obs.mce if r.id is not None], None))
    return found


def cursor_of(key: str, memory: HostMemory) -> int | None:
    """Where the deriver's memory stands in a space (None: it has not counted any of it)."""
    if key.startswith(KLOG):
        klog = memory.klog
        return klog.seq if klog is not None and KLOG + str(klog.boot) == key else None
    if key == "sel":
        return memory.sel.last if memory.sel is not None else None
    if key == "mc_event":
        return memory.ras.last if memory.ras is not None else None
    if key == "aer_event":
        return memory.ras.aer if memory.ras is not None else None
    return memory.mce.last if memory.mce is not None else None


def note_gaps(report: Report, previous: HostMemory, new: HostMemory) -> dict[str, list[Gap]] | None:
    """The gaps after an on-time report: one more where its first new id is past the cursor + 1,
    a space's gaps dropped where its ids started again."""
    gaps = {key: list(kept) for key, kept in (previous.gaps or {}).items() if kept}
    for space in spaces(report):
        before, after = cursor_of(space.key, previous), cursor_of(space.key, new)
        if before is None or after is None:
            continue  # first sight: what lies below the cursor is history, not a gap
        if after < before or space.restarted:
            gaps.pop(space.key, None)  # the ids start again: the old gaps name other rows
            continue
        firsts = [i for i in [*space.ids, *([space.first] if space.first is not None else [])] if i > before]
        low = min(firsts, default=None)
        if low is None and space.cursor is not None and space.cursor > before:
            low = space.cursor + 1  # the agent moved past rows this report does not carry
        # the ids the source lost just before the first one read (overwritten) will never come
        high = None if low is None else low - 1 - space.lost
        if high is not None and high >= before + 1:
            gaps[space.key] = [*gaps.get(space.key, []), (before + 1, high)][-MAX_GAPS:]
    boots = {KLOG + str(m.klog.boot) for m in (previous, new) if m.klog is not None}
    for key in [key for key in gaps if key.startswith(KLOG) and key not in boots]:
        del gaps[key]  # the current boot's and the one before it are kept
    while len(gaps) > MAX_GAP_SPACES:
        del gaps[next(iter(gaps))]
    return gaps or None


def inside(gaps: list[Gap] | None, value: int) -> bool:
    return any(lo <= value <= hi for lo, hi in gaps or [])


def fill(
    gaps: dict[str, list[Gap]], key: str, ids: Iterable[int], cursor: int | None, first: int | None = None
) -> None:
    """The ids from the report's first row (or the first id it read) to its cursor are carried now: they
    leave the space's gaps. A report with no row in a gap leaves them as they are."""
    ids = list(ids)
    if not ids or key not in gaps:
        return
    lo = min(ids) if first is None else min(first, *ids)
    hi = max([*ids, *([cursor] if cursor is not None else [])])
    kept: list[Gap] = []
    for first, last in gaps[key]:
        if last < lo or first > hi:
            kept.append((first, last))
            continue
        if first < lo:
            kept.append((first, lo - 1))
        if last > hi:
            kept.append((hi + 1, last))
    if kept:
        gaps[key] = kept
    else:
        del gaps[key]
