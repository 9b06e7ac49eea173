"""EDAC sysfs, rasdaemon's database and machine-check collectors, fed from the real samples through snapshots."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

from bench.samples import (
    EDAC_ROOT,
    RAS_DB,
    ZEN2_MCE_ROWS,
    SnapshotBuilder,
    insert_zen2_mce_records,
    listing_to_files,
    read_ttar,
    sample,
    signed64,
)
from checker.collectors import edac, mce, rasdaemon
from checker.collectors.context import CollectorState
from checker.schemas import Report

ONLY_EDAC = {"edac": edac.collect}
ONLY_RAS = {"rasdaemon": rasdaemon.collect}
ONLY_MCE = {"mce": mce.collect}


def test_legacy_csrow_layout_from_the_ttar(tmp_path: Path) -> None:
    files = read_ttar(sample("edac-sysfs/node-exporter-legacy-csrow-layout.ttar"), "sys/devices/system/edac/mc/")
    report = SnapshotBuilder(tmp_path).files(EDAC_ROOT, files).cycle(collectors=ONLY_EDAC)
    assert report.collectors["edac"].status == "ok"
    assert report.observations.edac is not None
    (mc,) = report.observations.edac.controllers
    assert (mc.ce_count, mc.ce_noinfo_count, mc.ue_count, mc.ue_noinfo_count) == (1, 2, 5, 6)
    by_name = {d.name: d for d in mc.dimms}
    assert sorted(by_name) == [f"csrow{r}/ch{c}" for r in range(3) for c in range(2)]
    assert by_name["csrow0/ch0"].label == "mc0csrow0channel0"
    assert [by_name[f"csrow{r}/ch{c}"].ue_count for r in range(3) for c in range(2)] == [2, 2, 2, 2, 0, 0]
    assert report.observations.edac.poll_msec is None  # no edac_core parameter in this snapshot


def test_i10nm_dimm_with_four_corrected_errors(tmp_path: Path) -> None:
    files = listing_to_files(sample("edac-sysfs/i10nm-mc7-dimm0-ce4.txt"), EDAC_ROOT)
    snap = SnapshotBuilder(tmp_path).files(EDAC_ROOT, files)
    snap.file("/sys/module/edac_core/parameters/edac_mc_poll_msec", "37000\n")
    state = snap.cycle(collectors=ONLY_EDAC).observations.edac
    assert state is not None
    assert state.poll_msec == 37000
    (dimm,) = state.controllers[0].dimms
    assert (dimm.mc, dimm.name, dimm.label, dimm.ce_count) == (7, "dimm0", "CPU_SrcID#1_MC#3_Chan#0_DIMM#0", 4)


def test_two_servers_with_zero_counts_in_csrows(tmp_path: Path) -> None:
    server_a, server_b = re.split(r"(?m)^# server B$", sample("edac-sysfs/csrow-ce-ue-count-two-servers.txt"))
    for n, listing in enumerate((server_a, server_b)):
        snap = SnapshotBuilder(tmp_path / str(n)).files(EDAC_ROOT, listing_to_files(listing, EDAC_ROOT))
        state = snap.cycle(collectors=ONLY_EDAC).observations.edac
        assert state is not None
        (mc,) = state.controllers
        assert len(mc.dimms) == (1 if n == 0 else 4)
        assert (mc.ce_count, mc.ue_count) == (0, 0)


def test_no_edac_driver_is_unavailable_and_says_so(tmp_path: Path) -> None:
    run = SnapshotBuilder(tmp_path).cycle(collectors=ONLY_EDAC).collectors["edac"]
    assert (run.status, run.reason) == (
        "unavailable",
        "no EDAC on this host: /sys/devices/system/edac/mc does not exist (no EDAC driver loaded)",
    )
    snap = SnapshotBuilder(tmp_path / "empty").directory_only(EDAC_ROOT)
    run = snap.cycle(collectors=ONLY_EDAC).collectors["edac"]
    assert run.status == "unavailable"
    assert "no memory controller registered" in (run.reason or "")


def test_unreadable_counters_are_an_error_with_the_input(tmp_path: Path) -> None:
    snap = SnapshotBuilder(tmp_path).files(EDAC_ROOT, {"mc0/ce_count": "lots\n", "mc0/dimm0/dimm_ce_count": "x\n"})
    run = snap.cycle(collectors=ONLY_EDAC).collectors["edac"]
    assert run.status == "ok"  # the controller is there; its unreadable counters are named
    assert any("mc0/ce_count: not a counter" in p for p in run.problems)


def s2600_rasdaemon(snap: SnapshotBuilder, rows: list[tuple[int, int]]) -> None:
    """mc_event rows for the S2600KPR host of rasdaemon/ras-mc-ctl-error-count-intel-s2600kpr-5539-ce.txt."""
    conn = snap.rasdaemon()
    conn.executemany(
        "INSERT INTO mc_event (id, timestamp, err_count, err_type, err_msg, label, mc, top_layer, middle_layer,"
        " lower_layer, address, grain, syndrome, driver_detail) VALUES (?, '2022-06-22 10:00:00 +0200', ?,"
        " 'Corrected', 'memory read error', 'CPU_SrcID#1_Ha#0_Chan#0_DIMM#0', 1, 0, 0, -1, ?, 32, 0, '')",
        [(row_id, count, signed64(0xFFFF_8000_0000_1000 + row_id)) for row_id, count in rows],
    )
    conn.execute(
        "INSERT INTO aer_event VALUES (1, '2022-06-22 11:00:00 +0200', '0000:00:1d.0', 'Corrected', 'Receiver Error')"
    )
    conn.execute("INSERT INTO memory_failure_event VALUES (1, '2022-06-22 12:00:00 +0200', '0xe16677', "
                 "'dirty LRU page', 'Recovered')")  # fmt: skip
    conn.commit()
    conn.close()


def test_rasdaemon_records_and_totals_read_only(tmp_path: Path) -> None:
    snap = SnapshotBuilder(tmp_path)
    s2600_rasdaemon(snap, [(1, 5000), (2, 500), (3, 39)])
    db = snap.path(RAS_DB)
    before = db.read_bytes()
    report = snap.cycle(collectors=ONLY_RAS)
    assert report.collectors["rasdaemon"].status == "ok"
    ras = report.observations.rasdaemon
    assert ras is not None
    (total,) = ras.dimm_totals
    assert (total.label, total.err_type, total.err_count) == ("CPU_SrcID#1_Ha#0_Chan#0_DIMM#0", "Corrected", 5539)
    assert [(e.id, e.err_count, e.lower_layer) for e in ras.memory_events] == [(1, 5000, -1), (2, 500, -1), (3, 39, -1)]
    assert ras.memory_events[0].address == 0xFFFF_8000_0000_1001  # unsigned again
    assert [(a.dev_name, a.err_type, a.err_msg) for a in ras.aer_events] == [
        ("0000:00:1d.0", "Corrected", "Receiver Error")
    ]
    assert [(m.pfn, m.action_result) for m in ras.memory_failures] == [("0xe16677", "Recovered")]
    assert ras.last_ids == {"mc_event": 3, "aer_event": 1, "memory_failure_event": 1, "mce_record": 0}
    assert ras.mce_records == []  # the table is there, with nothing in it
    assert db.read_bytes() == before  # opened with mode=ro


def test_rasdaemon_is_incremental_by_id_and_notices_a_new_database(tmp_path: Path) -> None:
    snap = SnapshotBuilder(tmp_path)
    s2600_rasdaemon(snap, [(1, 5000)])
    state = CollectorState(tmp_path / "cursors.json")
    snap.cycle(state, collectors=ONLY_RAS)
    state.commit()
    conn = snap.rasdaemon()
    conn.execute(
        "INSERT INTO mc_event (id, err_count, err_type, label, mc, top_layer, middle_layer, lower_layer)"
        " VALUES (2, 7, 'Corrected', 'CPU_SrcID#1_Ha#0_Chan#0_DIMM#0', 1, 0, 0, -1)"
    )
    conn.commit()
    conn.close()
    ras = snap.cycle(state, collectors=ONLY_RAS).observations.rasdaemon
    assert ras is not None
    assert [e.id for e in ras.memory_events] == [2]
    assert (ras.aer_events, ras.memory_failures) == ([], [])
    assert ras.dimm_totals[0].err_count == 5007  # the totals are over the whole table
    state.commit()
    snap.path(RAS_DB).unlink()  # rasdaemon's database was removed and started again
    s2600_rasdaemon(snap, [(1, 3)])
    ras = snap.cycle(state, collectors=ONLY_RAS).observations.rasdaemon
    assert ras is not None
    assert [e.id for e in ras.memory_events] == [1]


def test_rasdaemon_keeps_the_newest_rows_and_counts_the_rest(tmp_path: Path) -> None:
    snap = SnapshotBuilder(tmp_path)
    s2600_rasdaemon(snap, [(n, 1) for n in range(1, 601)])
    ras = snap.cycle(collectors=ONLY_RAS).observations.rasdaemon
    assert ras is not None
    assert (ras.memory_events[0].id, ras.memory_events[-1].id, ras.truncated) == (101, 600, 100)


def test_no_rasdaemon_is_unavailable(tmp_path: Path) -> None:
    run = SnapshotBuilder(tmp_path).cycle(collectors=ONLY_RAS).collectors["rasdaemon"]
    assert run.status == "unavailable"
    assert "no /var/lib/rasdaemon/ras-mc_event.db" in (run.reason or "")


def test_a_corrupt_rasdaemon_database_is_an_error(tmp_path: Path) -> None:
    snap = SnapshotBuilder(tmp_path).file(RAS_DB, "this is not an SQLite database, it is text " * 50)
    run = snap.cycle(collectors=ONLY_RAS).collectors["rasdaemon"]
    assert run.status == "error"
    assert "not a database" in (run.reason or "")


def test_mce_records_from_rasdaemon(tmp_path: Path) -> None:
    snap = SnapshotBuilder(tmp_path)
    conn = snap.rasdaemon()
    insert_zen2_mce_records(conn)
    conn.commit()
    conn.close()
    state = CollectorState()
    report = snap.cycle(state, collectors=ONLY_MCE)
    assert report.collectors["mce"].source == "rasdaemon"
    records = report.observations.mce
    assert records is not None
    assert [r.status for r in records] == [f"0x{row[2]:016x}" for row in ZEN2_MCE_ROWS]
    first = records[0]
    assert (first.cpu, first.bank, first.error_class, first.corrected) == (2, 17, "memory", True)
    assert first.timestamp == dt.datetime(2026, 8, 24, 1, 41, 13, tzinfo=dt.UTC)
    assert "Unified Memory Controller" in first.message
    state.commit()
    assert snap.cycle(state, collectors=ONLY_MCE).observations.mce == []  # incremental by id


def mcelog_snapshot(tmp_path: Path, text: str) -> SnapshotBuilder:
    return SnapshotBuilder(tmp_path).file("/var/log/mcelog", text)


def test_mcelog_file_records_and_classes(tmp_path: Path) -> None:
    cases = {
        "mcelog/mcelog-skylake-sp-uncorrected-l2-architectural-only.txt": (11, "cache", False),
        "mcelog/mcelog-haswell-corrected-internal-parity.txt": (0, "internal", True),
        "mcelog/mcelog-ivybridge-uncorrected-internal-unclassified.txt": (4, "internal", False),
        "mcelog/mcelog-syslog-westmere-ex-memctrl-corrected.log": (None, "memory", True),  # starts mid-record
    }
    for n, (name, (bank, error_class, corrected)) in enumerate(cases.items()):
        report = mcelog_snapshot(tmp_path / str(n), sample(name)).cycle(collectors=ONLY_MCE)
        assert report.collectors["mce"].source == "mcelog-file", name
        records = report.observations.mce
        assert records, name
        assert (records[0].bank, records[0].error_class, records[0].corrected) == (bank, error_class, corrected), name
    westmere = mcelog_snapshot(tmp_path / "w", sample("mcelog/mcelog-syslog-westmere-ex-memctrl-corrected.log"))
    report = westmere.cycle(collectors=ONLY_MCE)
    (record,) = report.observations.mce or []
    assert (record.socket, record.status) == (2, "0x900000400009008f")
    # The record cut off after 'CPU 2 BANK 9' is named, not invented.
    assert any("CPU 2 BANK 9" in p for p in report.collectors["mce"].problems)


def test_mcelog_file_is_read_from_where_the_last_cycle_stopped(tmp_path: Path) -> None:
    first = sample("mcelog/mcelog-skylake-sp-uncorrected-l2-architectural-only.txt")
    snap = mcelog_snapshot(tmp_path, first)
    state = CollectorState()
    assert len(snap.cycle(state, collectors=ONLY_MCE).observations.mce or []) == 1
    state.commit()
    assert snap.cycle(state, collectors=ONLY_MCE).observations.mce == []
    state.commit()
    with snap.path("/var/log/mcelog").open("a") as log:  # mcelog appends a record
        log.write(sample("mcelog/mcelog-haswell-corrected-internal-parity.txt"))
    records = snap.cycle(state, collectors=ONLY_MCE).observations.mce or []
    assert [(r.bank, r.corrected) for r in records] == [(0, True)]


def test_mcelog_client_memory_counters(tmp_path: Path) -> None:
    text = sample("mcelog/mcelog-client-memory-errors-socket-channel-dimm.txt")
    report = SnapshotBuilder(tmp_path).command(["mcelog", "--client"], text).cycle(collectors=ONLY_MCE)
    run = report.collectors["mce"]
    assert (run.status, run.source) == ("ok", "mcelog-client")
    counters = report.observations.mce_memory
    assert counters is not None
    assert [(c.socket, c.channel, c.dimm, c.corrected_total, c.corrected_24h) for c in counters] == [
        (1, None, None, 2654, 100),
        (1, 3, None, 1003, 10),
        (1, 3, 0, 1651, 10),
    ]
    assert report.observations.mce is None  # no record source on this host


def test_no_mce_source_is_unavailable(tmp_path: Path) -> None:
    report: Report = SnapshotBuilder(tmp_path).cycle(collectors=ONLY_MCE)
    run = report.collectors["mce"]
    assert run.status == "unavailable"
    assert "no machine-check source" in (run.reason or "")
