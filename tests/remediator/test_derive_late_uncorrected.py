"""A late uncorrected machine check from mcelog is not lost in a storm of corrected ones.

mcelog's records carry no id: the deriver tells a late record from one already counted by the keys (time and
content) it keeps for the last hour, at most 64. A storm of corrected errors fills those keys and moves the
history line past them; before uncorrected records had a track of their own, a late uncorrected record
older than the newest 64 corrected ones fell behind that line and was dropped — the one record that says
memory failed. Corrected records past the 64 still are (the counts are floors, docs/signals.md)."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from checker.schemas import CollectorRun, MceRecord, Report
from remediator.derive import derive, derive_late
from tests.builders.observations import BASELINES, HOST, at, of, report


def record(when: dt.datetime, *, corrected: bool, text: str) -> MceRecord:
    return MceRecord(
        timestamp=when, cpu=2, socket=1, bank=8, status="0x9c00004000010091" if corrected else "0xbe00000000800090",
        error_class="memory", corrected=corrected, message=f"memory read error channel 1 ({text})",
    )  # fmt: skip


def mcelog(when: dt.datetime, records: list[MceRecord]) -> Report:
    one = report(when, mce=records)
    one.collectors["mce"] = CollectorRun(status="ok", duration_ms=1.0, source="mcelog-file")
    return one


def stormed() -> dict[str, Any]:
    """The deriver's memory after a first sight and then a report of 80 corrected errors, one a second up to
    at(3)."""
    first = derive(mcelog(at(1), [record(at(1), corrected=True, text="first")]), {}, HOST, baselines=BASELINES)
    storm = [record(at(3) + dt.timedelta(seconds=i - 80), corrected=True, text=f"storm {i}") for i in range(80)]
    derived = derive(mcelog(at(3), storm), json.loads(json.dumps(first.memory)), HOST, baselines=BASELINES)
    assert sum(s.value for s in of(derived.signals, "mce_memory_corrected")) == 80
    return json.loads(json.dumps(derived.memory))


def test_a_late_uncorrected_record_behind_a_corrected_storm_is_counted_once() -> None:
    memory = stormed()
    when = at(1.5) - dt.timedelta(seconds=5)  # before the storm's newest 64 corrected records
    late = mcelog(
        at(1.5), [record(when, corrected=False, text="late UE"), record(when, corrected=True, text="late CE")]
    )
    derived = derive_late(late, memory)
    [ue] = of(derived.signals, "mce_memory_uncorrected")
    assert ue.value == 1
    assert ue.detail["late"] is True
    assert of(derived.signals, "mce_memory_corrected") == []  # behind the corrected track's line: a floor
    again = derive_late(late, json.loads(json.dumps(derived.memory)))
    assert of(again.signals, "mce_memory_uncorrected") == []  # delivered twice, counted once


def test_an_uncorrected_record_older_than_its_own_hour_is_history() -> None:
    """The negative case: the uncorrected track keeps an hour behind its newest record, as the corrected one
    does; a late record older than that is not told from one counted long ago, and is not counted."""
    memory = stormed()
    newest = at(4)
    derived = derive(mcelog(newest, [record(newest, corrected=False, text="now")]), memory, HOST, baselines=BASELINES)
    assert of(derived.signals, "mce_memory_uncorrected")[0].value == 1
    memory = json.loads(json.dumps(derived.memory))
    old = newest - dt.timedelta(hours=2)
    late = derive_late(mcelog(at(3.5), [record(old, corrected=False, text="long ago")]), memory)
    assert of(late.signals, "mce_memory_uncorrected") == []


def test_memory_kept_before_the_tracks_were_split_keeps_its_uncorrected_records_counted() -> None:
    """Memory from before has one `since` and one set of keys for both classes, and no `ue_keys`: the
    uncorrected track starts from them. An agent that lost its mcelog cursor reads its log from the start
    again; an uncorrected record counted then is not counted twice (it would drain the host and ask for a
    DIMM, perhaps one already swapped)."""
    seen = at(2) - dt.timedelta(seconds=30)
    ue = record(seen, corrected=False, text="counted before")
    first = derive(mcelog(at(1), [record(at(1), corrected=True, text="first")]), {}, HOST, baselines=BASELINES)
    counted = derive(mcelog(at(2), [ue]), json.loads(json.dumps(first.memory)), HOST, baselines=BASELINES)
    assert of(counted.signals, "mce_memory_uncorrected")[0].value == 1
    old = json.loads(json.dumps(counted.memory))
    mce = old["mce"]
    mce["keys"] = sorted({*mce.pop("keys", []), *mce.pop("ue_keys", [])})  # as the memory was kept before
    mce["since"] = mce.pop("ue_since", mce.get("since"))
    reread = derive(mcelog(at(3), [record(at(1), corrected=True, text="first"), ue]), old, HOST, baselines=BASELINES)
    assert of(reread.signals, "mce_memory_uncorrected") == []
