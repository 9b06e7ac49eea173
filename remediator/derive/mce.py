"""Machine checks judged: memory errors per location, and cache, interconnect and internal errors per CPU.

The records come from rasdaemon's `mce_record` table (the `mce:mce_record` trace event, raised for
every machine check ahead of the decoders: since Linux 5.7 the kernel's CE collector, RAS_CEC, only
marks the corrected memory errors it takes, and EDAC's decoders and /dev/mcelog skip those, so this
is the one source that still sees them) or from mcelog. The two are alternatives on a host, and a
report may carry the same events twice (rasdaemon's collector and the mce collector both read
`mce_record`, or mcelog runs beside rasdaemon): rasdaemon's records are taken and the others are
not counted again; the detail says so (`preferred_over`).

- `mce_memory_corrected` / `mce_memory_uncorrected`: memory-controller records grouped by socket,
  bank and channel (MCACOD 0000 0000 1MMM CCCC: the channel is CCCC, 0xF unspecified; AMD's UMC
  names it in rasdaemon's `memory_channel=`). The value is the count in this report; the detail has
  the rate per second since the previous report when there was one. The address is not decoded to a
  DIMM here: that needs the platform's address decoder (EDAC and ras-mc-ctl do it); the records'
  addresses travel in the detail for whoever attributes them.
- `mce_cpu_corrected` / `mce_cpu_uncorrected`: cache, bus/interconnect and internal errors, per core
  where the error is in the core's own L0/L1 cache or TLB (`cpuN`, scope `core`), else per bank of
  a socket (`socketS bankB`, scope `shared`: a shared cache, the interconnect, the uncore). Records
  of class `other` are not judged.

New records only: rasdaemon's by row id (the first sight of a database records its last id; ids
below it mean the database was recreated), mcelog's by time and content (the first sight records
what it saw; records more than RECENT_S older than the newest one counted are history; a record sent
again, by an agent killed before it moved its cursor, is known by its key and not counted twice). Pure.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from checker.schemas import MceRecord, Observations
from remediator.derive.memory import MAX_MCE_KEYS, MceMemory
from remediator.signals import MAX_GAP_S, SignalValue

RASDAEMON = "rasdaemon mce_record"
MCELOG = "mcelog"
CPU_CLASSES = frozenset({"cache", "bus", "internal"})
MAX_ADDRESSES = 5
MAX_MESSAGE_CHARS = 200
MAX_LISTED = 8
RECENT_S = 3600  # mcelog records older than this behind the newest one counted are history
_CHANNEL_WORDS = re.compile(r"memory_channel=(\d{1,3})\b|CHANNEL(\d{1,2})_ERR\b")


@dataclass(frozen=True)
class _Batch:
    records: list[MceRecord]
    source: str
    cursor: int | None  # rasdaemon's last mce_record id, when its collector read the table
    truncated: int
    preferred_over: str | None


def _mce_from_rasdaemon(obs: Observations, mce_source: str | None) -> bool:
    return (mce_source or "").startswith("rasdaemon") or any(r.id is not None for r in obs.mce or [])


def _batch(obs: Observations, mce_source: str | None) -> _Batch | None:
    """This report's machine checks, each event once: rasdaemon's when it has them."""
    ras = obs.rasdaemon
    if ras is not None and ras.mce_records is not None:
        others = obs.mce or []
        over = None
        if others and not _mce_from_rasdaemon(obs, mce_source):
            over = f"mcelog ({len(others)} records in this report, the same events: not counted again)"
        return _Batch(list(ras.mce_records), RASDAEMON, ras.last_ids.get("mce_record"), ras.truncated, over)
    if obs.mce is None:
        return None
    source = RASDAEMON if _mce_from_rasdaemon(obs, mce_source) else MCELOG
    return _Batch(list(obs.mce), source, None, 0, None)


def _key(record: MceRecord, stamp: dt.datetime, occurrence: int) -> str:
    """Seconds since the epoch and a short digest of what the record says, and which of the report's
    identical records within that second it is (a sticky cell repeats itself): a record sent again matches."""
    text = "|".join(str(x) for x in (record.cpu, record.socket, record.bank, record.status, record.address))
    digest = hashlib.blake2b(f"{text}|{record.message}|{occurrence}".encode(), digest_size=6).hexdigest()
    return f"{int(stamp.timestamp())}:{digest}"


def _new_by_id(batch: _Batch, previous: MceMemory | None) -> tuple[list[MceRecord], int]:
    """(new records, the id cursor to keep). The first sight of a database records its cursor only."""
    numbered = [r for r in batch.records if r.id is not None]
    ids = [r.id for r in numbered if r.id is not None]
    reported = max([*ids, *([batch.cursor] if batch.cursor is not None else [])], default=None)
    last = previous.last if previous is not None else None
    if last is None:
        return [], reported if reported is not None else 0
    if reported is None:
        return [], last
    if reported < last:  # the database was recreated: its ids start again
        return numbered, reported
    return [r for r in numbered if r.id is not None and r.id > last], max(last, reported)


def _new_by_time(records: list[MceRecord], previous: MceMemory | None) -> tuple[list[MceRecord], dict[str, Any]]:
    """(new records, the memory's `since`, `keys`, `ue_since` and `ue_keys` to keep) for records without an
    id. Records at or before their track's `since` are history; later ones are new unless their key was
    counted already. Corrected and uncorrected records keep separate tracks, so a storm of corrected errors,
    which fills the corrected track's keys, never pushes an uncorrected record out of its own. The first
    sight counts nothing and remembers what it saw."""
    first = previous is None or not previous.logged
    fresh: list[MceRecord] = []
    occurrences: Counter[str] = Counter()
    last = None if first else previous
    tracks = {  # corrected: the track's since and its known keys
        True: (last.since if last else None, set(last.keys) if last else set()),
        False: (last.ue_since if last else None, set(last.ue_keys) if last else set()),
    }
    for record in records:
        if record.timestamp is None:
            fresh.append(record)  # undated (a cut-off syslog record): nothing to tell it by
            continue
        key = _key(record, record.timestamp, 0)
        occurrences[key] += 1
        if occurrences[key] > 1:
            key = _key(record, record.timestamp, occurrences[key] - 1)
        since, known = tracks[record.corrected]
        if (since is not None and record.timestamp <= since) or key in known:
            continue
        known.add(key)
        fresh.append(record)
    ce_since, ce_keys = _window(*tracks[True])
    ue_since, ue_keys = _window(*tracks[False])
    kept = {"since": ce_since, "keys": ce_keys, "ue_since": ue_since, "ue_keys": ue_keys}
    return ([] if first else fresh), kept


def _window(since: dt.datetime | None, known: set[str]) -> tuple[dt.datetime | None, list[str]]:
    """One track's `since` and keys to keep: the hour before its newest key, and at most MAX_MCE_KEYS of them
    (past that, the newest key that does not fit and everything before it are history)."""
    keys = sorted(known, key=_key_time, reverse=True)
    if keys:
        window = dt.datetime.fromtimestamp(_key_time(keys[0]) - RECENT_S, dt.UTC)
        since = window if since is None or window > since else since
    if len(keys) > MAX_MCE_KEYS:
        dropped = dt.datetime.fromtimestamp(_key_time(keys[MAX_MCE_KEYS]), dt.UTC)
        since = dropped if since is None or dropped > since else since
    floor = since.timestamp() if since is not None else None
    return since, [k for k in keys if floor is None or _key_time(k) > floor][:MAX_MCE_KEYS]


def _key_time(key: str) -> int:
    return int(key.split(":", 1)[0])


def mce_signals(
    obs: Observations, mce_source: str | None, previous: MceMemory | None, *, now: dt.datetime
) -> tuple[list[SignalValue], MceMemory | None]:
    """Signals from this report's new machine checks, and the memory to keep. `mce_source` is the mce
    collector's `source` (which tool its records came from)."""
    batch = _batch(obs, mce_source)
    if batch is None:
        return [], previous  # no machine-check source ran: keep what was remembered
    memory = MceMemory(at=now) if previous is None else previous.model_copy(update={"at": now})
    fresh: list[MceRecord] = []
    if batch.source == RASDAEMON:
        found, last = _new_by_id(batch, previous)
        fresh += found
        memory = memory.model_copy(update={"last": last})
    unnumbered = [r for r in batch.records if r.id is None]
    if unnumbered or batch.source == MCELOG:
        found, kept = _new_by_time(unnumbered, previous)
        fresh += found
        memory = memory.model_copy(update={"logged": True, **kept})
    if previous is None or not fresh:
        return [], memory
    elapsed = (now - previous.at).total_seconds()
    timing: dict[str, object] = {"elapsed_s": round(elapsed, 3)} if 0 < elapsed <= MAX_GAP_S else {}
    extra: dict[str, object] = {"source": batch.source}
    if batch.preferred_over:
        extra["preferred_over"] = batch.preferred_over
    if batch.truncated:
        extra["truncated"] = batch.truncated  # rows the report did not carry: the counts are floors
    return _memory_signals(fresh, timing, extra) + _cpu_signals(fresh, timing, extra), memory


# -- memory controllers -------------------------------------------------------------------------


def _status(record: MceRecord) -> int | None:
    try:
        return int(record.status, 16) if record.status else None
    except ValueError:
        return None


def memory_channel(record: MceRecord) -> int | None:
    """The channel of a memory-controller error: MCACOD 0000 0000 1MMM CCCC (Intel SDM vol. 3B, compound
    error codes), CCCC = 0xF unspecified; else the decoder's words (`memory_channel=N` from rasdaemon for
    AMD's UMC, `RD_CHANNELn_ERR`)."""
    status = _status(record)
    if status is not None:
        code = status & 0xFFFF & ~0x1000  # bit 12: corrected-error filtering, not part of the code
        if 0x0080 <= code <= 0x00FF and code & 0xF != 0xF:
            return code & 0xF
    m = _CHANNEL_WORDS.search(record.message)
    if m is None:
        return None
    return int(m.group(1) or m.group(2))


def memory_location(record: MceRecord) -> tuple[str, tuple[object, ...]]:
    """The subject (`socket1 bank13 channel2`; `cpuN` stands in for an unknown socket, `-` for an unknown
    bank or channel) and the grouping key."""
    channel = memory_channel(record)
    if record.socket is not None:
        where = f"socket{record.socket}"
    else:
        where = f"cpu{record.cpu}" if record.cpu is not None else "socket-"
    bank = "-" if record.bank is None else str(record.bank)
    subject = f"{where} bank{bank} channel{'-' if channel is None else channel}"
    return subject, (where, record.bank, channel)


def _when(records: Sequence[MceRecord]) -> dict[str, object]:
    stamps = sorted(r.timestamp for r in records if r.timestamp is not None)
    return {
        "first": stamps[0].isoformat() if stamps else None,
        "last": stamps[-1].isoformat() if stamps else None,
    }


def _rate(count: int, timing: dict[str, object]) -> dict[str, object]:
    elapsed = timing.get("elapsed_s")
    if not isinstance(elapsed, float | int) or elapsed <= 0:
        return {}
    return {"elapsed_s": elapsed, "rate_per_s": round(count / elapsed, 6)}


def _records_about(group: Sequence[MceRecord], timing: dict[str, object], example: MceRecord) -> dict[str, object]:
    """What every machine-check signal says of its records: when, how fast, the telling one, which rows."""
    about: dict[str, object] = {
        **_when(group),
        **_rate(len(group), timing),
        "status": example.status,
        "message": example.message[:MAX_MESSAGE_CHARS],
    }
    ids = [r.id for r in group if r.id is not None]
    if ids:
        about["first_id"], about["last_id"] = min(ids), max(ids)
    return about


def _example(records: Sequence[MceRecord]) -> MceRecord:
    """The newest uncorrected record if any (the one that matters most), else the newest."""
    uncorrected = [r for r in records if not r.corrected]
    return (uncorrected or list(records))[-1]


def _memory_signals(records: list[MceRecord], timing: dict[str, object], extra: dict[str, object]) -> list[SignalValue]:
    groups: dict[tuple[str, tuple[object, ...], bool], list[MceRecord]] = defaultdict(list)
    for record in records:
        if record.error_class == "memory":
            subject, key = memory_location(record)
            groups[(subject, key, record.corrected)].append(record)
    signals: list[SignalValue] = []
    for (subject, _, corrected), group in sorted(groups.items(), key=lambda item: (item[0][0], not item[0][2])):
        newest = group[-1]
        addresses = list(dict.fromkeys(r.address for r in group if r.address))[:MAX_ADDRESSES]
        cpus = sorted({r.cpu for r in group if r.cpu is not None})
        example = _example(group)
        detail: dict[str, object] = {
            **extra,
            "socket": newest.socket,
            "bank": newest.bank,
            "channel": memory_channel(newest),
            "cpu": newest.cpu,
            "cpus": cpus[:MAX_LISTED],
            "count": len(group),
            "addresses": addresses,
            **_records_about(group, timing, example),
        }
        kind = "mce_memory_corrected" if corrected else "mce_memory_uncorrected"
        signals.append(SignalValue(kind, subject, float(len(group)), detail))
    return signals


# -- CPUs ------------------------------------------------------------------------------------------


CORE_LEVELS = frozenset({"L0", "L1"})  # caches and TLBs private to one core on every x86 since the P6 and K8


def cache_level(record: MceRecord) -> str | None:
    """The cache level of a TLB or memory-hierarchy error, from MCACOD (Intel SDM vol. 3B, compound error
    codes: TLB 0000 0000 0001 TTLL, cache 0000 0001 RRRR TTLL; LL 00 L0, 01 L1, 10 L2, 11 generic)."""
    status = _status(record)
    if status is None:
        return None
    code = status & 0xFFFF & ~0x1000
    if code & 0xFFF0 == 0x0010 or code & 0xFF00 == 0x0100:
        return ("L0", "L1", "L2", "generic")[code & 0x3]
    return None


def cpu_subject(record: MceRecord) -> tuple[str, str]:
    """Where a CPU machine check belongs, and its scope. `core` (subject `cpuN`): an L0/L1 cache or TLB
    error, private to the core that logged it. `shared` (subject `socketS bankB`, `cpuN bankB` when the
    socket is unknown, else `host`): everything else, since a shared cache's, the interconnect's or the
    uncore's bank is logged by whichever CPU saw it (Skylake-SP's bank 11 reports last-level cache errors
    as 'Level-2'), and grouping those by CPU would spread one fault over many."""
    if record.cpu is not None and record.error_class == "cache" and cache_level(record) in CORE_LEVELS:
        return f"cpu{record.cpu}", "core"
    bank = "-" if record.bank is None else str(record.bank)
    if record.socket is not None:
        return f"socket{record.socket} bank{bank}", "shared"
    if record.cpu is not None:
        return f"cpu{record.cpu} bank{bank}", "shared"
    return "host", "shared"


def _cpu_signals(records: list[MceRecord], timing: dict[str, object], extra: dict[str, object]) -> list[SignalValue]:
    groups: dict[tuple[str, str, bool], list[MceRecord]] = defaultdict(list)
    for record in records:
        if record.error_class in CPU_CLASSES:
            subject, scope = cpu_subject(record)
            groups[(subject, scope, record.corrected)].append(record)
    signals: list[SignalValue] = []
    for (subject, scope, corrected), group in sorted(groups.items(), key=lambda item: (item[0][0], not item[0][2])):
        example = _example(group)
        sockets = sorted({r.socket for r in group if r.socket is not None})
        cpus = sorted({r.cpu for r in group if r.cpu is not None})
        detail: dict[str, object] = {
            **extra,
            "scope": scope,
            "cpu": cpus[0] if len(cpus) == 1 else None,
            "cpus": cpus[:MAX_LISTED],
            "socket": sockets[0] if len(sockets) == 1 else None,
            "count": len(group),
            "classes": dict(sorted(Counter(r.error_class for r in group).items())),
            "levels": sorted({level for r in group if (level := cache_level(r))}),
            "banks": sorted({r.bank for r in group if r.bank is not None})[:MAX_LISTED],
            **_records_about(group, timing, example),
        }
        kind = "mce_cpu_corrected" if corrected else "mce_cpu_uncorrected"
        signals.append(SignalValue(kind, subject, float(len(group)), detail))
    return signals
