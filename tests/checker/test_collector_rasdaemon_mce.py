"""rasdaemon's mce_record table read by the rasdaemon collector: incremental by row id, bounded, truncation
counted. The rows are ours, written in rasdaemon's schema and modelled on the real decoded machine checks of
the corpus (registers stored as signed 64-bit integers, as rasdaemon's sqlite3_bind_int64 leaves them)."""

from __future__ import annotations

import datetime as dt
import sqlite3
from pathlib import Path

from bench.samples import RAS_DB, ZEN2_MCE_ROWS, SnapshotBuilder, insert_zen2_mce_records
from checker.collectors import rasdaemon
from checker.collectors.base import SnapshotHost
from checker.collectors.context import CollectorState
from checker.cycle import bound_report, report_size, run_cycle
from checker.schemas import MceRecord, RasdaemonState
from tests.builders.rasdaemon import MCE_INSERT, icelake_row, skylake_l2_row

ONLY_RAS = {"rasdaemon": rasdaemon.collect}


def database(snap: SnapshotBuilder, *rows: tuple[object, ...], zen2: bool = True) -> None:
    conn = snap.rasdaemon()
    if zen2:
        insert_zen2_mce_records(conn)  # ids 83-85
    conn.executemany(MCE_INSERT, rows)
    conn.commit()
    conn.close()


def test_mce_record_rows_are_read_with_their_ids_and_unsigned_registers(tmp_path: Path) -> None:
    snap = SnapshotBuilder(tmp_path)
    database(snap, icelake_row(86), skylake_l2_row(87))
    report = snap.cycle(collectors=ONLY_RAS)
    assert report.collectors["rasdaemon"].status == "ok"
    ras = report.observations.rasdaemon
    assert ras is not None
    assert ras.mce_records is not None
    assert [r.id for r in ras.mce_records] == [83, 84, 85, 86, 87]
    assert [r.status for r in ras.mce_records[:3]] == [f"0x{row[2]:016x}" for row in ZEN2_MCE_ROWS]
    zen2, icelake, l2 = ras.mce_records[0], ras.mce_records[3], ras.mce_records[4]
    assert (zen2.cpu, zen2.bank, zen2.error_class, zen2.corrected) == (2, 17, "memory", True)
    assert zen2.address == "0x27aad20c0"
    assert zen2.timestamp == dt.datetime(2026, 8, 24, 1, 41, 13, tzinfo=dt.UTC)
    assert (icelake.cpu, icelake.socket, icelake.bank, icelake.error_class) == (32, 1, 13, "memory")
    assert (l2.status, l2.error_class, l2.corrected) == ("0xae2000000003110a", "cache", False)
    assert ras.last_ids["mce_record"] == 87
    assert ras.truncated == 0


def test_mce_record_is_incremental_by_id_and_notices_a_new_database(tmp_path: Path) -> None:
    snap = SnapshotBuilder(tmp_path)
    database(snap)
    state = CollectorState(tmp_path / "cursors.json")
    snap.cycle(state, collectors=ONLY_RAS)
    state.commit()
    ras = snap.cycle(state, collectors=ONLY_RAS).observations.rasdaemon
    assert ras is not None
    assert (ras.mce_records, ras.last_ids["mce_record"]) == ([], 85)
    state.commit()
    database(snap, icelake_row(86), zen2=False)
    ras = snap.cycle(state, collectors=ONLY_RAS).observations.rasdaemon
    assert ras is not None
    assert [r.id for r in ras.mce_records or []] == [86]
    state.commit()
    snap.path(RAS_DB).unlink()  # rasdaemon's database removed and started again
    database(snap, icelake_row(1), zen2=False)
    ras = snap.cycle(state, collectors=ONLY_RAS).observations.rasdaemon
    assert ras is not None
    assert [r.id for r in ras.mce_records or []] == [1]


def test_mce_record_keeps_the_newest_rows_and_counts_the_rest(tmp_path: Path) -> None:
    snap = SnapshotBuilder(tmp_path)
    database(snap, *(icelake_row(n) for n in range(1, 601)), zen2=False)
    ras = snap.cycle(collectors=ONLY_RAS).observations.rasdaemon
    assert ras is not None
    records = ras.mce_records or []
    assert (len(records), records[0].id, records[-1].id, ras.truncated) == (500, 101, 600, 100)


def test_a_database_without_mce_record_says_none(tmp_path: Path) -> None:
    snap = SnapshotBuilder(tmp_path)
    path = snap.path(RAS_DB)
    path.parent.mkdir(parents=True)
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE mc_event (id INTEGER PRIMARY KEY, timestamp TEXT, err_count INTEGER, err_type TEXT)")
    conn.commit()
    conn.close()
    ras = snap.cycle(collectors=ONLY_RAS).observations.rasdaemon
    assert ras is not None
    assert ras.mce_records is None  # not read, which is not "nothing new"
    assert "mce_record" not in ras.last_ids


def test_a_report_too_large_halves_rasdaemons_machine_checks_and_counts_them() -> None:
    template = MceRecord(error_class="memory", corrected=True, message="MEMORY CONTROLLER RD_CHANNEL0_ERR " + "x" * 900)
    report = run_cycle(SnapshotHost(Path("/nonexistent")), hostname="big", collectors={})
    report.observations.rasdaemon = RasdaemonState(
        mce_records=[template.model_copy(update={"id": n}) for n in range(500)], last_ids={"mce_record": 499}
    )
    assert report_size(report) > 400_000
    bounded = bound_report(report, 100_000)
    assert report_size(bounded) <= 100_000
    ras = bounded.observations.rasdaemon
    assert ras is not None
    kept = ras.mce_records or []
    assert len(kept) + ras.truncated == 500
    assert kept[-1].id == 499  # the newest are kept
