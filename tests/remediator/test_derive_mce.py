"""Machine checks judged: memory errors per socket/bank/channel and CPU errors per CPU, from rasdaemon's
mce_record rows and mcelog's records, each event counted once."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.samples import ZEN2_MCE_ADDR, ZEN2_MCE_ROWS, SnapshotBuilder, insert_zen2_mce_records, sample, signed64
from checker.collectors.context import CollectorState
from checker.parsers.mce import parse_mcelog
from checker.parsers.rasdaemon import parse_mce_record_rows
from checker.schemas import CollectorRun, MceRecord, Observations, RasdaemonState, Report
from remediator.derive import derive
from remediator.derive.mce import cache_level, cpu_subject, memory_channel
from remediator.derive.memory import MAX_MCE_KEYS
from tests.builders.observations import BASELINES, HOST, Deriver, at, by_subject, of, report

# Our own mce_record rows (rasdaemon's columns), each modelled on a real decoded machine check of the
# corpus; registers stored signed, as rasdaemon's sqlite3_bind_int64 leaves them.


def zen2_row(row_id: int, stamp: str, status: int, addr: int = ZEN2_MCE_ADDR, csrow: int = 2) -> dict[str, Any]:
    """AMD Zen2 UMC DRAM ECC, as rasdaemon/ras-mc-ctl-errors-amd-zen2-umc-dram-ecc-repeated.txt shows it."""
    return {
        "id": row_id,
        "timestamp": stamp,
        "status": signed64(status),
        "addr": addr,
        "cpu": 2,
        "bank": 17,
        "bank_name": "Unified Memory Controller (bank=17)",
        "error_msg": "DRAM ECC error.",
        "mcistatus_msg": "CECC",
        "mc_location": f"memory_channel=0,csrow={csrow}",
    }


def icelake_row(row_id: int, status: int = 0x8C00004200800090, addr: int = 0x1EFA4C7CC40) -> dict[str, Any]:
    """Ice Lake-SP RD_CHANNEL0_ERR, socket 1 bank 13, CPU 32: event 112 of
    rasdaemon/ras-mc-ctl-errors-icelake-mce-memctrl-sddc-wrapped.txt."""
    return {
        "id": row_id,
        "timestamp": "2023-05-31 10:06:19 -0400",
        "status": signed64(status),
        "addr": addr,
        "cpu": 32,
        "socketid": 1,
        "bank": 13,
        "error_msg": "MEMORY CONTROLLER RD_CHANNEL0_ERR Transaction: Memory read error",
        "mcistatus_msg": "Corrected_error" if not status & 1 << 61 else "Uncorrected_error",
    }


def skylake_l2_row(row_id: int) -> dict[str, Any]:
    """The uncorrected L2 error of mcelog/mcelog-skylake-sp-uncorrected-l2-architectural-only.txt as a row."""
    return {
        "id": row_id,
        "timestamp": "2016-03-23 12:20:06 -0400",
        "status": signed64(0xAE2000000003110A),
        "addr": 0xFFFC4B00,
        "cpu": 0,
        "socketid": 0,
        "bank": 11,
        "error_msg": "Generic CACHE Level-2 Generic Error",
        "mcistatus_msg": "Uncorrected_error",
    }


ZEN2 = [zen2_row(i, ts, status) for i, ts, status, _, _ in ZEN2_MCE_ROWS]  # ids 83-85
# ours: the Ice Lake error with MCi_STATUS.UC and EN set (an uncorrected read on channel 1)
ICELAKE_UE = 0xBC00004200800091


def records(rows: list[dict[str, Any]]) -> list[MceRecord]:
    parsed = parse_mce_record_rows(rows)
    assert parsed.problems == []
    return parsed.value


def ras(rows: list[dict[str, Any]], cursor: int | None = None, **extra: Any) -> RasdaemonState:
    top = cursor if cursor is not None else max((r["id"] for r in rows), default=0)
    return RasdaemonState(mce_records=records(rows), last_ids={"mce_record": top}, **extra)


def mcelog_records(*names: str) -> list[MceRecord]:
    found: list[MceRecord] = []
    for name in names:
        found += parse_mcelog(sample(f"mcelog/{name}")).value
    return found


def with_mce(when: dt.datetime, mce: list[MceRecord] | None, source: str = "mcelog-file", **sections: Any) -> Report:
    one = report(when, mce=mce, **sections)
    one.collectors["mce"] = CollectorRun(status="ok", duration_ms=1.0, source=source)
    return one


HASWELL = "mcelog-haswell-corrected-internal-parity.txt"
IVYBRIDGE = "mcelog-ivybridge-uncorrected-internal-unclassified.txt"
SKYLAKE = "mcelog-skylake-sp-uncorrected-l2-architectural-only.txt"
WESTMERE = "mcelog-syslog-westmere-ex-memctrl-corrected.log"


# -- rasdaemon's mce_record ------------------------------------------------------------------------


def test_first_sight_of_the_database_records_its_cursor_only() -> None:
    run = Deriver()
    assert run(report(at(0), rasdaemon=ras(ZEN2))) == []  # history over an unknown span
    assert run.memory["mce"]["last"] == 85
    signals = run(report(at(1), rasdaemon=ras([zen2_row(86, "2026-08-24 04:43:10 +0200", 0x9C2040000000011B)])))
    (signal,) = signals
    assert (signal.kind, signal.subject, signal.value) == ("mce_memory_corrected", "cpu2 bank17 channel0", 1.0)
    assert signal.detail["source"] == "rasdaemon mce_record"
    assert signal.detail["rate_per_s"] == round(1 / 60, 6)
    assert (signal.detail["first_id"], signal.detail["last_id"]) == (86, 86)


def test_memory_errors_per_socket_bank_and_channel_with_addresses_and_times() -> None:
    run = Deriver()
    run(report(at(0), rasdaemon=ras([], cursor=82)))
    rows = [*ZEN2, icelake_row(86), icelake_row(87, addr=0x1EFA4C7CC80), icelake_row(88, ICELAKE_UE)]
    signals = run(report(at(2), rasdaemon=ras(rows)))
    corrected = by_subject(signals, "mce_memory_corrected")
    assert sorted(corrected) == ["cpu2 bank17 channel0", "socket1 bank13 channel0"]
    zen2 = corrected["cpu2 bank17 channel0"]
    assert zen2.value == 3
    assert zen2.detail["addresses"] == ["0x27aad20c0"]  # a sticky cell: one address, three errors
    assert (zen2.detail["first"], zen2.detail["last"]) == ("2026-08-24T01:41:13+00:00", "2026-08-24T02:42:44+00:00")
    assert (zen2.detail["socket"], zen2.detail["bank"], zen2.detail["channel"], zen2.detail["cpu"]) == (None, 17, 0, 2)
    assert zen2.detail["rate_per_s"] == round(3 / 120, 6)
    icelake = corrected["socket1 bank13 channel0"]
    assert (icelake.value, icelake.detail["cpu"], icelake.detail["count"]) == (2, 32, 2)
    assert icelake.detail["addresses"] == ["0x1efa4c7cc40", "0x1efa4c7cc80"]
    assert icelake.detail["status"] == "0x8c00004200800090"
    (uncorrected,) = of(signals, "mce_memory_uncorrected")
    assert uncorrected.subject == "socket1 bank13 channel1"  # MCACOD 0x0091: channel 1
    assert uncorrected.detail["status"] == f"0x{ICELAKE_UE:016x}"
    assert of(signals, "mce_cpu_corrected") == of(signals, "mce_cpu_uncorrected") == []


def test_an_amd_deferred_error_is_not_corrected_though_its_uc_bit_is_clear() -> None:
    """MCA_STATUS[Deferred] (bit 44) on AMD: uncorrectable data not yet consumed. The same bit on Intel
    is part of the corrected-error count (bits 38-52), so an Intel record stays corrected."""
    deferred = 0x9C2010000000011B  # the Zen 2 UMC status with CECC (46) swapped for Deferred (44)
    amd = {**zen2_row(90, "2026-08-24 03:00:00 +0000", deferred), "cpuvendor": 2}
    intel = {**amd, "id": 91, "cpuvendor": 0}
    on_amd, on_intel = records([amd, intel])
    assert (on_amd.corrected, on_intel.corrected) == (False, True)
    run = Deriver()
    run(report(at(0), rasdaemon=ras([], cursor=89)))
    (signal,) = run(report(at(1), rasdaemon=ras([amd])))
    assert (signal.kind, signal.subject) == ("mce_memory_uncorrected", "cpu2 bank17 channel0")


def test_the_channel_comes_from_mcacod_then_the_decoders_words() -> None:
    westmere, *_ = mcelog_records(WESTMERE)
    assert memory_channel(westmere) is None  # 0x008f: channel 0xF, unspecified ("GEN_CHANNELunspecified_ERR")
    zen2, icelake = records([ZEN2[0], icelake_row(1)])
    assert memory_channel(icelake) == 0  # 0x0090
    assert memory_channel(zen2) == 0  # MCACOD 0x011b is not the memory form: rasdaemon's memory_channel=0


def test_a_shared_cache_error_belongs_to_its_socket_and_bank_not_the_cpu_that_logged_it() -> None:
    run = Deriver()
    run(report(at(0), rasdaemon=ras([], cursor=0)))
    (signal,) = run(report(at(1), rasdaemon=ras([skylake_l2_row(1)])))
    # Skylake-SP bank 11 (a CHA: the last-level cache) calls its error "Level-2": MCACOD 0x010a
    assert (signal.kind, signal.subject, signal.value) == ("mce_cpu_uncorrected", "socket0 bank11", 1.0)
    assert signal.detail["status"] == "0xae2000000003110a"  # stored negative, read back unsigned
    assert (signal.detail["scope"], signal.detail["levels"], signal.detail["banks"]) == ("shared", ["L2"], [11])
    assert signal.detail["classes"] == {"cache": 1}


def test_an_l1_error_belongs_to_the_core_that_logged_it() -> None:
    (haswell,) = mcelog_records(HASWELL)
    l1 = haswell.model_copy(update={"error_class": "cache", "status": "0x9000004000010151", "cpu": 5})
    assert cache_level(l1) == "L1"  # MCACOD 0x0151: a level-1 instruction-fetch error
    assert cpu_subject(l1) == ("cpu5", "core")
    assert cpu_subject(haswell) == ("socket0 bank0", "shared")  # internal parity: not a core's cache
    l2 = l1.model_copy(update={"status": "0x9000004000010152"})
    assert cpu_subject(l2) == ("socket0 bank0", "shared")  # L2: shared by a module on some parts


def test_rows_already_counted_are_not_counted_again() -> None:
    run = Deriver()
    run(report(at(0), rasdaemon=ras([], cursor=82)))
    first = run(report(at(1), rasdaemon=ras(ZEN2[:2])))
    assert by_subject(first, "mce_memory_corrected")["cpu2 bank17 channel0"].value == 2
    # the agent sent rows 83-84 again (its cursor had not moved) with the new 85
    again = run(report(at(2), rasdaemon=ras(ZEN2)))
    assert by_subject(again, "mce_memory_corrected")["cpu2 bank17 channel0"].value == 1
    assert run(report(at(3), rasdaemon=ras(ZEN2))) == []


def test_a_recreated_database_starts_its_ids_again() -> None:
    run = Deriver()
    run(report(at(0), rasdaemon=ras(ZEN2)))
    # rasdaemon/ras-mc-ctl-errors-nixos-zen2-umc-cecc-full-sections.txt: a new database, events 1-3
    nixos = [
        zen2_row(1, "2024-12-19 03:52:38 +0000", 0x9C2040000000011B, 0x319DEB440, csrow=1),
        zen2_row(2, "2024-12-20 09:33:01 +0000", 0x9C2040000000011B, 0x319DEB440, csrow=1),
        zen2_row(3, "2024-12-20 10:00:20 +0000", 0x9C2040000000011B, 0x319DEB440, csrow=1),
    ]
    (signal,) = run(report(at(1), rasdaemon=ras(nixos)))
    assert (signal.subject, signal.value, signal.detail["addresses"]) == ("cpu2 bank17 channel0", 3, ["0x319deb440"])


def test_rows_the_agent_could_not_carry_make_the_count_a_floor() -> None:
    run = Deriver()
    run(report(at(0), rasdaemon=ras([], cursor=82)))
    (signal,) = run(report(at(1), rasdaemon=ras(ZEN2, cursor=900, truncated=815)))
    assert signal.detail["truncated"] == 815


# -- mcelog ---------------------------------------------------------------------------------------


def test_mcelog_records_from_the_real_samples() -> None:
    run = Deriver()
    assert run(with_mce(at(0), mcelog_records(HASWELL))) == []  # the file's history at first sight
    signals = run(with_mce(at(1), mcelog_records(IVYBRIDGE, SKYLAKE, WESTMERE)))
    cpus = by_subject(signals, "mce_cpu_uncorrected")
    assert sorted(cpus) == ["socket0 bank11", "socket0 bank4"]
    llc, pcu = cpus["socket0 bank11"], cpus["socket0 bank4"]
    assert (llc.value, llc.detail["classes"], llc.detail["cpu"]) == (1, {"cache": 1}, 0)
    assert (pcu.value, pcu.detail["classes"], pcu.detail["scope"]) == (1, {"internal": 1}, "shared")
    assert llc.detail["source"] == "mcelog"
    assert "Generic CACHE Level-2" in llc.detail["message"]
    assert of(signals, "mce_cpu_corrected") == []
    (memory,) = of(signals, "mce_memory_corrected")
    # The westmere sample starts mid-record: its CPU and bank are in the cut-off record that follows.
    assert memory.subject == "socket2 bank- channel-"
    assert (memory.detail["status"], memory.detail["channel"]) == ("0x900000400009008f", None)


def test_mcelog_records_sent_again_are_not_counted_twice() -> None:
    run = Deriver()
    run(with_mce(at(0), []))
    first = run(with_mce(at(1), mcelog_records(HASWELL, IVYBRIDGE)))
    cpu_kinds = ("mce_cpu_corrected", "mce_cpu_uncorrected")
    assert {(s.kind, s.subject): s.value for s in first if s.kind in cpu_kinds} == {
        ("mce_cpu_corrected", "socket0 bank0"): 1,
        ("mce_cpu_uncorrected", "socket0 bank4"): 1,
    }
    # the agent died before it moved its cursor: the same records again, and one new one
    again = run(with_mce(at(2), mcelog_records(HASWELL, IVYBRIDGE, SKYLAKE)))
    assert {(s.kind, s.subject): s.value for s in again if s.kind in cpu_kinds} == {
        ("mce_cpu_uncorrected", "socket0 bank11"): 1
    }
    assert run(with_mce(at(3), mcelog_records(HASWELL, IVYBRIDGE, SKYLAKE))) == []


def test_mcelog_memory_stays_bounded() -> None:
    run = Deriver()
    run(with_mce(at(0), []))
    (haswell,) = mcelog_records(HASWELL)
    template = haswell.model_copy(update={"error_class": "cache", "status": "0x9000004000010151"})  # L1: per core
    for minute in range(1, 30):
        base = template.timestamp + dt.timedelta(minutes=minute)  # type: ignore[operator]
        batch = [
            template.model_copy(update={"timestamp": base, "cpu": n % 64, "address": f"0x{minute:x}{n:04x}"})
            for n in range(500)
        ]
        (signal,) = {s.subject: s for s in run(with_mce(at(minute), batch)) if s.subject == "cpu0"}.values()
        assert signal.value == 8  # 500 records over 64 CPUs: cpu0 has 8 of them
    memory = run.memory["mce"]
    assert len(memory["keys"]) <= MAX_MCE_KEYS
    assert len(json.dumps(memory)) < 2_000


# -- both sources ---------------------------------------------------------------------------------


def test_rasdaemon_is_preferred_and_the_same_events_are_counted_once() -> None:
    run = Deriver()
    run(with_mce(at(0), [], rasdaemon=ras([], cursor=0)))
    l2 = mcelog_records(SKYLAKE)  # mcelog saw the same L2 error that rasdaemon recorded
    (signal,) = run(with_mce(at(1), l2, rasdaemon=ras([skylake_l2_row(1)])))
    assert (signal.subject, signal.value) == ("socket0 bank11", 1)
    assert signal.detail["source"] == "rasdaemon mce_record"
    assert signal.detail["preferred_over"].startswith("mcelog (1 records")


def test_the_mce_collectors_copy_of_mce_record_is_not_counted_again(tmp_path: Path) -> None:
    """Both collectors read mce_record; one report carries the rows twice, the signal counts them once."""
    snap = SnapshotBuilder(tmp_path)
    conn = snap.rasdaemon()
    insert_zen2_mce_records(conn)
    conn.commit()
    conn.close()
    state = CollectorState(tmp_path / "cursors.json")
    run = Deriver()
    first = snap.cycle(state)
    assert first.observations.mce == first.observations.rasdaemon.mce_records  # type: ignore[union-attr]
    assert of(run(first.model_copy(update={"captured_at": at(0)})), "mce_memory_corrected") == []
    state.commit()
    conn = snap.rasdaemon()
    conn.executemany(
        "INSERT INTO mce_record (id, timestamp, status, addr, cpu, bank, bank_name, error_msg, mcistatus_msg,"
        " mc_location) VALUES (?, ?, ?, ?, 2, 17, 'Unified Memory Controller (bank=17)', 'DRAM ECC error.', 'CECC',"
        " 'memory_channel=0,csrow=2')",
        [(n, "2026-08-24 05:00:00 +0200", signed64(0x9C2040000000011B), ZEN2_MCE_ADDR) for n in (86, 87)],
    )
    conn.commit()
    conn.close()
    second = snap.cycle(state)
    assert len(second.observations.mce or []) == 2
    (signal,) = of(run(second.model_copy(update={"captured_at": at(1)})), "mce_memory_corrected")
    assert (signal.subject, signal.value) == ("cpu2 bank17 channel0", 2)
    assert "preferred_over" not in signal.detail  # the same rows, not another tool


def test_older_agents_rasdaemon_rows_through_the_mce_collector_alone() -> None:
    run = Deriver()
    run(with_mce(at(0), records(ZEN2[:1]), source="rasdaemon"))
    (signal,) = run(with_mce(at(1), records(ZEN2), source="rasdaemon"))
    assert (signal.value, signal.detail["source"]) == (2, "rasdaemon mce_record")


def test_a_report_without_a_machine_check_source_keeps_the_memory() -> None:
    run = Deriver()
    run(report(at(0), rasdaemon=ras([], cursor=82)))
    run(report(at(1)))
    (signal,) = run(report(at(2), rasdaemon=ras(ZEN2)))
    assert signal.value == 3
    assert signal.detail["rate_per_s"] == round(3 / 120, 6)


# -- fuzz ------------------------------------------------------------------------------------------

_records = st.builds(
    MceRecord,
    timestamp=st.none()
    | st.datetimes(min_value=dt.datetime(2010, 1, 1), max_value=dt.datetime(2030, 1, 1), timezones=st.just(dt.UTC)),
    cpu=st.none() | st.integers(0, 8),
    socket=st.none() | st.integers(0, 2),
    bank=st.none() | st.integers(0, 30),
    status=st.none() | st.sampled_from(["0x9c2040000000011b", "0x8c00004200800090", "0xae2000000003110a", "zz"]),
    address=st.none() | st.sampled_from(["0x27aad20c0", "0x1"]),
    error_class=st.sampled_from(["memory", "cache", "bus", "internal", "other"]),
    corrected=st.booleans(),
    message=st.sampled_from(["", "memory_channel=3", "RD_CHANNEL1_ERR", "x"]),
    id=st.none() | st.integers(0, 100),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    batches=st.lists(
        st.tuples(st.booleans(), st.lists(_records, max_size=8, unique_by=lambda r: r.id)), min_size=1, max_size=4
    ),
    memory=st.sampled_from([{}, {"mce": {"at": "garbage"}}, {"mce": {"at": "2026-03-01T11:00:00Z", "keys": [1]}}]),
)
def test_never_raises_and_a_batch_sent_again_counts_nothing(
    batches: list[tuple[bool, list[MceRecord]]], memory: dict[str, Any]
) -> None:
    state: dict[str, Any] = dict(memory)
    for n, (through_rasdaemon, batch) in enumerate(batches):
        dated = [r for r in batch if r.timestamp is not None]  # an undated record has nothing to tell it by
        rows = [r for r in batch if r.id is not None or r.timestamp is not None]
        obs = Observations(rasdaemon=RasdaemonState(mce_records=rows)) if through_rasdaemon else Observations(mce=dated)
        for repeat in range(2):
            one = Report.model_validate(
                {
                    "host": {"hostname": HOST.hostname},
                    "captured_at": at(2 * n + repeat),
                    "observations": obs.model_dump(),
                }
            )
            result = derive(one, state, HOST, baselines=BASELINES)
            assert json.loads(json.dumps(result.memory)) == result.memory
            json.dumps([s.detail for s in result.signals])
            state = result.memory
            if repeat:
                assert [s for s in result.signals if s.kind.startswith("mce_")] == []
