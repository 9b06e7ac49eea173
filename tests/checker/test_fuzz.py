"""Parsers never raise: arbitrary text, truncated real samples, and odd sysfs snapshots.

Every result must also still be a valid report model (re-validated here, because parsers fill
some fields after construction) and every problem must stay short.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.samples import read_ttar, sample, sample_names
from checker.parsers.catalog import TEXT_PARSERS, contract_violation, files_from_ttar, rows_from_sqlite_lines
from checker.parsers.dmi import parse_dmi_id
from checker.parsers.edac import parse_edac_sysfs
from checker.parsers.interrupts import parse_irq_affinities
from checker.parsers.memory_tiers import parse_memory_tiers
from checker.parsers.rasdaemon import (
    parse_aer_event_rows,
    parse_dimm_total_rows,
    parse_mc_event_rows,
    parse_mce_record_rows,
    parse_memory_failure_rows,
)

CUTS = 24


def check(result: object) -> None:
    """The parsers' contract (checker.parsers.catalog.contract_violation) as an assertion."""
    violation = contract_violation(result)
    assert violation is None, violation


@pytest.mark.parametrize("name", sorted(TEXT_PARSERS))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text())
def test_arbitrary_text_never_raises(name: str, text: str) -> None:
    check(TEXT_PARSERS[name].parse(text))


LINEISH = st.lists(
    st.one_of(
        st.text(alphabet="0123456789abcdefx:;,.|[]{}()#=-+ \t", max_size=40),
        st.sampled_from(
            [
                "[  593.024485] ",
                "6,1204,5000000,-;",
                " SUBSYSTEM=pci",
                "EDAC MC0: 1 CE ",
                "{3}[Hardware Error]: ",
                "Hardware event. This is not a software error.",
                "STATUS 90000040000f0005 MCGSTATUS 0",
                "Handle 0x0001, DMI type 17, 40 bytes",
                "Memory Device",
                "\tSize: 32 GB",
                "ID | Date | Time | Name | Type | Event",
                "   1 | 06/03/2014 | 17:38:05 | Fan #0x0c | Fully Redundant | Asserted",
                "           CPU0       CPU1",
                "MCE:          0          0   Machine check exceptions",
                "Label\tCE\tUE",
                "processor : 0",
                "vendor_id : GenuineIntel",
                "Call Trace:",
                "9" * 5000,
                "[ 9" + "9" * 30 + ".5] x",
                "May  7 06:45:12 host kernel: ",
                "2019-08-19T04:18:38.274652-04:00 host kernel: ",
                "[  +9999999999999999999.000001] x",
                "isolcpus=nohz,0-99999999",
                '{"MESSAGE": "EDAC MC0: 1 CE on x", "__CURSOR": "s=1", "_SOURCE_MONOTONIC_TIMESTAMP": "9"}',
                '{"MESSAGE": [69, 68, 65, 67, 255], "__REALTIME_TIMESTAMP": "99999999999999999999"}',
            ]
        ),
    ),
    max_size=12,
).map(lambda parts: "\n".join(parts))


@pytest.mark.parametrize("name", sorted(TEXT_PARSERS))
@settings(max_examples=40, deadline=None)
@given(text=LINEISH)
def test_line_shaped_noise_never_raises(name: str, text: str) -> None:
    check(TEXT_PARSERS[name].parse(text))


HUGE = "9" * 5000  # int() refuses more than 4300 digits; parsers must not pass such runs to it
NASTY = [
    HUGE,
    f"mc0: {HUGE} Corrected Errors with no DIMM info",
    f"6,{HUGE},1,-;x",
    f"[ {HUGE}.5] EDAC MC0: 1 CE on x",
    f"processor : 0\nvendor_id : X\ncpu family : {HUGE}\nmodel : 1",
    f"isolcpus={HUGE}",
    f"  CPU0\n 1: {HUGE} x",
    "  CPU0\n 1: \u00b2 x",  # a digit to str.isdigit() but not to int()
    f"Label CE UE\nx {HUGE} 0",
    f"EDAC MC{'9' * 30}: 5 CE on x",
    f"Entries : {HUGE}",
    f"ID | Date\n{HUGE} | a | b | c",
    f"ID# ATTRIBUTE_NAME\n  5 Reallocated 0x0033 100 100 010 Pre-fail Always - {HUGE}",
    f"Smart Log for NVME device:nvme0\ncritical_warning : {HUGE}",
    "Hardware event. This is not a software error.\nCPU 1 BANK 2\nSTATUS " + "f" * 5000,
    f"1 2024-01-01 00:00:00 +0000 error: Corrected, status=0x{'f' * 400}, addr={HUGE}",
    f"Memory Device\n\tSize: {HUGE} MB\n\tLocator: A",
    f"SOCKET 1 CHANNEL 2 DIMM 3\ncorrected memory errors:\n {HUGE} total",
    "[Feb22 04:01] a\n[  +99999999999999999999.000001] b",
    '{"devices": [{"name": 1}], "smartctl": {"exit_status": -1}, "temperature": {"current": 1e999}}',
    "[" * 5000,
    # found by bench/parser_fuzz.py: numbers past 64 bits that int() takes but the schema refuses,
    # times outside 1970-2100 (or outside the calendar once moved to UTC), and mangled blocks
    f"mc{2**64}: 0 Corrected Errors with no DIMM info\nmc0: csrow0: x: {2**64} Corrected Errors",
    f"mc0:noinfo:all:CE:{2**64}",
    "   1 | 08/11/1015 | 10:33:01 | System Event | Timestamp Clock Sync | Asserted",
    "1 | Jan-01-0001 | 00:00:00 | x | System Event | Nominal | Timestamp Clock Sync",
    f"Smart Log for NVME device:nvme0\navailable_spare_threshold : {10**29}%\ncritical_warning : 0x{'f' * 20}",
    f"Hardware event. This is not a software error.\nCPU 1 BANK {2**64}\nTIME 4294967296\nSOCKETID {2**64}",
    "SOCKET 1 CHANNEL any DIMM any\ncorrected memory errors:\n 1 total\n 1 total\n 1 in 24h\n 1 in 24h",
    f"SOCKET {HUGE} CHANNEL 1 DIMM 1\ncorrected memory errors:\n 1 total\n 1 in 24h",
    "1 2024-01-01 00:00:00 +0000 error: Corrected, status=0x1, bank=0077, cpu=0012",
    "1 0001-01-01 00:00:00 +0000 error: Corrected, status=0x1",
    f"1 2024-01-01 00:00:00 +0000 1 Corrected error(s): x at y location: 0:0:0:0, addr {10**20 - 1}",
    f"processor : 0\nvendor_id : X\nstepping : {2**64}\nmicrocode : 0x{'f' * 20}\nphysical id : {2**64}",
    f"  CPU0\n 1: {2**64} x",
    f"6,{2**64},1,-;x\n4,1,1,-;EDAC MC0: {2**64} CE on x",
    "[Mon Jan 27 19:27:15 0020] mce: [Hardware Error]: Machine check events logged",
    "[Mon Jan  1 00:00:00 0001] x\n[Fri Dec 31 23:59:59 9999] y",
    "0017-05-05T08:57:16+02:00 host mcelog: Hardware event. This is not a software error.",
    "0001-01-01T00:00:00+02:00 host kernel: x\n9999-12-31T23:59:59-05:00 host kernel: y",
    f"Path: sys/devices/system/edac/mc/mc{2**64}/ce_count\nLines: 1\n1\nPath: node{2**64}/cpulist\nLines: 1\n0",
    "id = 1\ntimestamp = 0001-01-01 00:00:00 +0000\nstatus = 1",
    f"Handle 0x0045, DMI type 17, 34 bytes\nMemory Device\n\tSize: {2**64} GB\n\tLocator: P2-DIMMF2",
]


@pytest.mark.parametrize("name", sorted(TEXT_PARSERS))
def test_nasty_inputs_never_raise(name: str) -> None:
    for text in NASTY:
        check(TEXT_PARSERS[name].parse(text))


def _truncation_cases() -> list[tuple[str, str]]:
    return [
        (name, path) for name, entry in sorted(TEXT_PARSERS.items()) for f in entry.folders for path in sample_names(f)
    ]


@pytest.mark.parametrize(("name", "path"), _truncation_cases())
def test_truncated_real_samples_never_raise(name: str, path: str) -> None:
    text = sample(path)
    parser = TEXT_PARSERS[name].parse
    cuts = {len(text) * n // CUTS for n in range(CUTS)} | {len(text) - 1, len(text)}
    for cut in sorted(c for c in cuts if c >= 0):
        check(parser(text[:cut]))


@pytest.mark.parametrize("name", sorted(name for name, entry in TEXT_PARSERS.items() if entry.seeds))
def test_seeds_parse_cleanly_and_survive_truncation(name: str) -> None:
    """The catalog's seed texts are in the real format: read without problems, cut anywhere without raising."""
    entry = TEXT_PARSERS[name]
    for seed in entry.seeds:
        parsed = entry.parse(seed)
        assert parsed.problems == [], parsed.problems
        assert parsed.value
        for cut in range(0, len(seed), max(1, len(seed) // CUTS)):
            check(entry.parse(seed[:cut]))


def test_adapters_read_the_real_containers() -> None:
    text = sample("edac-sysfs/node-exporter-legacy-csrow-layout.ttar")
    assert files_from_ttar(text) == read_ttar(text)
    rows = rows_from_sqlite_lines("id = 1\nmc = -2\nlabel = A1\naddress = 1.5\npfn = \n\n\nid = 99999999999999999999\n")
    assert rows == [{"id": 1, "mc": -2, "label": "A1", "address": 1.5, "pfn": None}, {"id": "99999999999999999999"}]
    assert files_from_ttar("Path: a\nLines: 5\nx") == {"a": "x\n"}
    assert files_from_ttar("Path: a\nLines: 1\nxEOF\nPath: b\nLines: -1\n") == {"a": "x"}


# -- mapping parsers (sysfs snapshots) -----------------------------------------------------------

EDAC_PATHS = st.sampled_from(
    [
        "mc0/ce_count",
        "mc0/mc_name",
        "mc1/ue_noinfo_count",
        "mc0/seconds_since_reset",
        "mc0/dimm0/dimm_ce_count",
        "mc0/dimm0/dimm_label",
        "mc0/dimm0/size",
        "mc0/rank3/dimm_ue_count",
        "mc0/csrow0/ch0_ce_count",
        "mc0/csrow0/ch1_dimm_label",
        "mc0/csrow1/ue_count",
        "mc99999/csrow99999/ch99999_ce_count",
    ]
)
SYSFS_VALUES = st.one_of(st.text(max_size=30), st.integers(-5, 2**70).map(lambda n: f"{n}\n"))


@settings(max_examples=150, deadline=None)
@given(files=st.dictionaries(st.one_of(EDAC_PATHS, st.text(max_size=20)), SYSFS_VALUES, max_size=12))
def test_edac_sysfs_snapshot_never_raises(files: Mapping[str, str]) -> None:
    check(parse_edac_sysfs(files))


@settings(max_examples=100, deadline=None)
@given(
    nodes=st.dictionaries(
        st.sampled_from(["node0/cpulist", "node0/meminfo", "node1/cpulist", "node1/meminfo", "x"]), SYSFS_VALUES
    ),
    demotion=st.one_of(st.none(), st.text(max_size=8)),
    balancing=st.one_of(st.none(), st.text(max_size=8)),
    weights=st.dictionaries(st.sampled_from(["node0", "node1", "nodeX", ""]), SYSFS_VALUES),
)
def test_memory_tiers_never_raise(
    nodes: Mapping[str, str], demotion: str | None, balancing: str | None, weights: Mapping[str, str]
) -> None:
    check(parse_memory_tiers(nodes, demotion, balancing, weights))


@settings(max_examples=100, deadline=None)
@given(files=st.dictionaries(st.text(max_size=30), st.text(max_size=30), max_size=8))
def test_dmi_id_and_irq_affinities_never_raise(files: Mapping[str, str]) -> None:
    check(parse_dmi_id(files))
    check(parse_irq_affinities(files))
    check(parse_irq_affinities({f"{k[:3]}/smp_affinity_list": v for k, v in files.items()}))


# -- rows of rasdaemon's database -----------------------------------------------------------------

ROW_VALUES = st.one_of(
    st.none(),
    st.integers(-(2**63), 2**63 - 1),
    st.text(max_size=40),
    st.binary(max_size=8),
    st.floats(allow_nan=True),
    st.sampled_from(["2023-10-27 10:00:00 +0200", "2023-13-45 99:00:00 +9999", "Corrected", "Uncorrected"]),
)
ROW_KEYS = st.sampled_from(
    [
        "id", "timestamp", "err_count", "err_type", "err_msg", "label", "mc", "top_layer", "middle_layer",
        "lower_layer", "address", "dev_name", "pfn", "page_type", "action_result", "status", "addr", "cpu",
        "socketid", "bank", "bank_name", "error_msg", "mcistatus_msg", "mc_location",
    ]
)  # fmt: skip
ROWS = st.lists(st.dictionaries(ROW_KEYS, ROW_VALUES, max_size=12), max_size=5)


@settings(max_examples=150, deadline=None)
@given(rows=ROWS)
def test_rasdaemon_rows_never_raise(rows: list[dict[str, object]]) -> None:
    for parser in (
        parse_mc_event_rows,
        parse_aer_event_rows,
        parse_memory_failure_rows,
        parse_mce_record_rows,
        parse_dimm_total_rows,
    ):
        check(parser(rows))
