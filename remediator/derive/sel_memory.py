"""`sel_memory_ce_rate`: the BMC's correctable-ECC log entries of one DIMM as a rate, by the entries' own times.

Why a rate and not "ten a day" (the review of the Redfish rules, finding 7): a BMC may log one entry per
corrected error (the Supermicro X10SDV sample: 64 entries for DIMMB1 within 12 minutes), so ten a day is
ten CEs a day, about 400 times below the EDAC path's lowest threshold (dimm-ce-ppr: 0.05 CE/s, some
4,300 a day). The entries are judged by the same number: CE_FLOOR entries a second over the CE_WINDOW_S
(30 minutes, the EDAC rules' `for: 30m`) before the newest entry, `held` once the DIMM's entries span at
least that window. Their own timestamps, not the report's: the first read of a log (a day of history at
once) or a read after a gap must not squeeze hours of entries into one report's minute.

- The same event in two of the BMC's logs (Dell serves one memory event in both its Sel and its Lclog
  service) is one: entries of one DIMM with the same time and message from another log service do not
  count again (`duplicates`).
- "Correctable ECC logging limit reached" (IPMI 2.0 table 42-3, sensor type 0Ch offset 05h; Dell's
  "Correctable memory error logging disabled": "the ECC error correction rate exceeds a predefined
  limit", Dell OpenManage SEL messages) means the firmware stopped logging: the count is a floor
  (`at_least`), and the firmware's own limit was crossed, so the signal is `held` at no less than
  CE_FLOOR.
Pure: the entries and the buckets kept in SelMemory.dimm_ce.
"""

from __future__ import annotations

import datetime as dt
import re

from checker.schemas import SelEntry
from remediator.derive.kernel import BUCKETS, add_to_bucket, live_buckets
from remediator.derive.memory import Bucket
from remediator.signals import SignalValue

CE_WINDOW_S = 1800  # the EDAC rate rules' `for: 30m` (remediator/default_rules.yaml dimm-ce-ppr)
CE_MEMORY_S = 3600  # buckets of CE_MEMORY_S / BUCKETS (150 s) kept per DIMM
CE_FLOOR = 0.05  # CE/s: the lowest EDAC DIMM rate a rule acts on (dimm-ce-ppr)
MAX_WATCHED_DIMMS = 16
_LIMIT = re.compile(r"logging limit reached|logging disabled", re.IGNORECASE)


def is_limit(entry: SelEntry) -> bool:
    """The firmware says it stopped logging the DIMM's correctable errors."""
    return bool(_LIMIT.search(entry.event))


def unique(entries: list[SelEntry]) -> list[SelEntry]:
    """The entries less the same event served again by another log service (Dell's Sel and Lclog): per
    (time, message), the entries of the one service that has the most of them. Entries of one service with
    the same time and message stay: a BMC logging every error logs several a second (the X10SDV sample)."""
    by_key: dict[tuple[str, str], dict[str, list[SelEntry]]] = {}
    for entry in entries:
        key = (entry.timestamp.isoformat() if entry.timestamp else f"#{entry.record_id}", entry.event.strip().lower())
        by_key.setdefault(key, {}).setdefault(entry.log_service or "", []).append(entry)
    kept = [e for services in by_key.values() for e in max(services.values(), key=len)]
    return sorted(kept, key=lambda e: (e.timestamp is None, e.timestamp or dt.datetime.min, e.record_id))


def ce_rate_signals(
    fresh: dict[str, list[SelEntry]], previous: dict[str, list[Bucket]], now: dt.datetime
) -> tuple[list[SignalValue], dict[str, list[Bucket]]]:
    """`fresh`: each DIMM's new correctable-ECC entries (the log's name for it). The rate signals, and the
    buckets to keep (the DIMMs with the newest entries, MAX_WATCHED_DIMMS)."""
    width = CE_MEMORY_S // BUCKETS
    kept = {d: live for d, b in previous.items() if (live := live_buckets(b, now.timestamp(), CE_MEMORY_S))}
    signals = []
    for dimm, entries in fresh.items():
        once = unique(entries)
        buckets = kept.get(dimm, [])
        for entry in once:
            at = min(entry.timestamp or now, now).timestamp()
            buckets = add_to_bucket(buckets, at, CE_MEMORY_S)
        kept[dimm] = buckets
        newest = max(index for index, _ in buckets) * width + width
        in_window = sum(n for index, n in buckets if (index + 1) * width > newest - CE_WINDOW_S)
        first = min(index for index, n in buckets if n > 0) * width
        limit = any(is_limit(e) for e in once)
        dated = [e.timestamp for e in once if e.timestamp is not None]
        rate = in_window / CE_WINDOW_S
        held = newest - first >= CE_WINDOW_S or limit
        detail = {
            "entries": in_window,
            "window_s": CE_WINDOW_S,
            "span_s": newest - first,
            "held": held,
            "at_least": limit,
            "duplicates": len(entries) - len(once),
            "log_services": sorted({e.log_service for e in entries if e.log_service})[:4],
            "events": list(dict.fromkeys(e.event for e in once))[:10],
            "record_ids": [e.record_id for e in once][-10:],
            # the new entries' first time: EDAC's count is compared from there (derive/edac_counted.py)
            "first_timestamp": min(dated).isoformat() if dated else None,
            # the rate's window: EDAC counting half as many of the DIMM's in it is not silence (third review, finding 1;
            # fourth, finding 1: a small share of them is)
            "window_start": dt.datetime.fromtimestamp(newest - CE_WINDOW_S, dt.UTC).isoformat(),
            # the new entries: EDAC at host scope is judged against these, never the window (fourth review, 1)
            "new_entries": len(once),
        }
        signals.append(SignalValue("sel_memory_ce_rate", dimm, max(rate, CE_FLOOR) if limit else rate, detail))
    newest_first = sorted(kept.items(), key=lambda kv: -max(i for i, _ in kv[1]))
    return signals, dict(newest_first[:MAX_WATCHED_DIMMS])
