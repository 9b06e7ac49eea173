"""Machine checks (mcelog, ras-mc-ctl --errors) and rasdaemon's --error-count / --summary."""

from __future__ import annotations

import datetime as dt

import pytest

from bench.samples import sample
from checker.parsers.mce import (
    error_class_from_status,
    parse_mcelog,
    parse_mcelog_client_memory,
    parse_ras_mc_ctl_errors,
)
from checker.parsers.rasdaemon import parse_ras_error_count, parse_ras_summary

UTC = dt.UTC


def test_an_amd_deferred_error_in_mcelog_is_not_corrected() -> None:
    """The real Haswell record as an AMD host would log a deferred error: STATUS with bit 44 (Deferred)
    and UC clear, vendor AMD. The same STATUS from an Intel CPU keeps its verdict (bit 44 is part of the
    corrected-error count there)."""
    text = sample("mcelog/mcelog-haswell-corrected-internal-parity.txt")
    amd = text.replace("STATUS 90000040000f0005", "STATUS 9000104000000005").replace(
        "CPUID Vendor Intel Family 6 Model 60", "CPUID Vendor AMD Family 23 Model 49"
    )
    assert "Vendor AMD" in amd
    assert "9000104000000005" in amd
    (deferred,) = parse_mcelog(amd).value
    assert deferred.corrected is False
    intel = text.replace("STATUS 90000040000f0005", "STATUS 9000104000000005")
    (counted,) = parse_mcelog(intel).value
    assert counted.corrected is True


def test_haswell_corrected_internal_parity() -> None:
    parsed = parse_mcelog(sample("mcelog/mcelog-haswell-corrected-internal-parity.txt"))
    assert parsed.problems == []
    (r,) = parsed.value
    assert (r.cpu, r.bank, r.socket, r.status, r.error_class, r.corrected) == (
        3,
        0,
        0,
        "0x90000040000f0005",
        "internal",
        True,
    )
    assert r.timestamp == dt.datetime.fromtimestamp(1397455091, UTC)
    assert r.message == "MCA: Internal parity error"


def test_ivybridge_uncorrected_internal_unclassified() -> None:
    (r,) = parse_mcelog(sample("mcelog/mcelog-ivybridge-uncorrected-internal-unclassified.txt")).value
    assert (r.cpu, r.bank, r.status, r.error_class, r.corrected) == (0, 4, "0xb200000000100402", "internal", False)
    assert "Internal unclassified error: 402" in r.message


def test_skylake_uncorrected_l2_cache_with_address() -> None:
    (r,) = parse_mcelog(sample("mcelog/mcelog-skylake-sp-uncorrected-l2-architectural-only.txt")).value
    assert (r.cpu, r.bank, r.address, r.error_class, r.corrected) == (0, 11, "0xfffc4b00", "cache", False)
    assert r.timestamp == dt.datetime.fromtimestamp(1458750006, UTC)


def test_mcelog_syslog_westmere_memory_controller_and_cut_record() -> None:
    parsed = parse_mcelog(sample("mcelog/mcelog-syslog-westmere-ex-memctrl-corrected.log"))
    (r,) = parsed.value
    assert (r.socket, r.status, r.error_class, r.corrected) == (2, "0x900000400009008f", "memory", True)
    assert "MEMORY CONTROLLER GEN_CHANNELunspecified_ERR" in r.message
    assert r.timestamp == dt.datetime(2017, 5, 5, 6, 57, 16, tzinfo=UTC)
    # The next record (MCE 15, CPU 2 BANK 9) is cut off before its STATUS: reported, not invented.
    assert len(parsed.problems) == 1
    assert "CPU 2 BANK 9" in parsed.problems[0]


def test_mcelog_client_memory_counters() -> None:
    parsed = parse_mcelog_client_memory(sample("mcelog/mcelog-client-memory-errors-socket-channel-dimm.txt"))
    assert parsed.problems == []
    assert [
        (c.socket, c.channel, c.dimm, c.corrected_total, c.corrected_24h, c.uncorrected_total) for c in parsed.value
    ] == [
        (1, None, None, 2654, 100, 0),
        (1, 3, None, 1003, 10, 0),
        (1, 3, 0, 1651, 10, 0),
    ]


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (0x90000040000F0005, "internal"),
        (0xB200000000100402, "internal"),
        (0xAE2000000003110A, "cache"),
        (0x900000400009008F, "memory"),
        (0x8C00004200800090, "memory"),
        (0x0000000000000E0B, "bus"),
        (0x0000000000000014, "cache"),
        (0x0000000000000000, "other"),
    ],
)
def test_error_class_from_mca_code(status: int, kind: str) -> None:
    assert error_class_from_status(status) == kind


def test_ras_errors_amd_zen2_repeated_dram_ecc() -> None:
    parsed = parse_ras_mc_ctl_errors(sample("rasdaemon/ras-mc-ctl-errors-amd-zen2-umc-dram-ecc-repeated.txt"))
    assert parsed.problems == []
    records = parsed.value.mce
    assert len(records) == 3
    assert {(r.cpu, r.bank, r.address, r.error_class, r.corrected) for r in records} == {
        (2, 17, "0x27aad20c0", "memory", True)
    }
    assert records[0].status == "0x9c2041000000011b"
    assert records[0].timestamp == dt.datetime(2026, 8, 24, 1, 41, 13, tzinfo=UTC)
    assert "DRAM ECC error" in records[0].message


def test_ras_errors_icelake_wrapped_sddc_record() -> None:
    parsed = parse_ras_mc_ctl_errors(sample("rasdaemon/ras-mc-ctl-errors-icelake-mce-memctrl-sddc-wrapped.txt"))
    assert parsed.problems == []
    (r,) = parsed.value.mce
    assert (r.cpu, r.socket, r.bank, r.status, r.address) == (32, 1, 13, "0x8c00004200800090", "0x1efa4c7cc40")
    assert (r.error_class, r.corrected) == ("memory", True)
    assert r.timestamp == dt.datetime(2023, 5, 31, 14, 6, 19, tzinfo=UTC)
    assert "ecc mode:  SDDC" in r.message


def test_ras_errors_full_sections_nixos() -> None:
    parsed = parse_ras_mc_ctl_errors(sample("rasdaemon/ras-mc-ctl-errors-nixos-zen2-umc-cecc-full-sections.txt"))
    assert parsed.problems == []
    assert parsed.value.memory_events == []
    assert [(r.cpu, r.bank, r.address, r.corrected) for r in parsed.value.mce] == [(2, 17, "0x319deb440", True)] * 3


def test_ras_errors_memory_controller_events() -> None:
    text = (
        "Memory controller events:\n"
        "1 2024-01-02 03:04:05 +0000 1 Corrected error(s): memory read error at CPU_SrcID#0_Ha#0_Chan#2_DIMM#0 "
        "location: 0:0:2:-1, addr 35576553344, grain 32, syndrome 0  area:DRAM err_code:0001:0092\n"
    )
    parsed = parse_ras_mc_ctl_errors(text)
    assert parsed.problems == []
    (event,) = parsed.value.memory_events
    assert (event.id, event.err_count, event.err_type, event.label) == (
        1,
        1,
        "Corrected",
        "CPU_SrcID#0_Ha#0_Chan#2_DIMM#0",
    )
    assert (event.mc, event.top_layer, event.middle_layer, event.lower_layer, event.address) == (
        0,
        0,
        2,
        -1,
        35576553344,
    )


def test_ras_error_count_one_dimm_with_5539_ce() -> None:
    parsed = parse_ras_error_count(sample("rasdaemon/ras-mc-ctl-error-count-intel-s2600kpr-5539-ce.txt"))
    assert parsed.problems == []
    rows = parsed.value
    assert len(rows) == 8
    bad = [r for r in rows if r.ce]
    assert [(r.label, r.ce, r.ue) for r in bad] == [("CPU_SrcID#1_Ha#0_Chan#0_DIMM#0", 5539, 0)]


def test_ras_error_count_amd_all_zero() -> None:
    parsed = parse_ras_error_count(sample("rasdaemon/ras-mc-ctl-error-count-amd-zen4-csrow-zero.txt"))
    assert parsed.problems == []
    assert [r.label for r in parsed.value] == [
        "mc#0csrow#3channel#0",
        "mc#0csrow#2channel#1",
        "mc#0csrow#2channel#0",
        "mc#0csrow#3channel#1",
    ]
    assert all(r.ce == r.ue == 0 for r in parsed.value)


def test_ras_summary_healthy() -> None:
    parsed = parse_ras_summary(sample("rasdaemon/ras-mc-ctl-summary-healthy-v08.txt"))
    assert parsed.problems == []
    assert parsed.value.clean == ["Memory", "PCIe AER", "ARM processor", "Extlog", "devlink", "disk", "MCE"]
    assert not parsed.value.has_errors


def test_ras_summary_mce_only() -> None:
    parsed = parse_ras_summary(sample("rasdaemon/ras-mc-ctl-summary-amd-zen4-mce-only.txt"))
    assert parsed.problems == []
    assert "Memory" in parsed.value.clean
    assert parsed.value.mce == [(1, "Corrected error, no action required.")]
    assert parsed.value.has_errors


def test_ras_summary_missing_table_is_a_problem_not_healthy() -> None:
    parsed = parse_ras_summary(sample("rasdaemon/ras-mc-ctl-summary-devlink-table-missing-error.txt"))
    assert len(parsed.problems) == 2
    assert "no such table: devlink_event" in parsed.problems[0]
    assert "MCE" not in parsed.value.clean  # the sections after the failure were never printed


def test_ras_summary_memory_rows() -> None:
    text = (
        "Memory controller events summary:\n"
        "\tCorrected on DIMM Label(s): 'CPU_SrcID#1_Ha#0_Chan#0_DIMM#0' location: 1:0:0:-1 errors: 5539\n"
        "\nNo PCIe AER errors.\n"
    )
    parsed = parse_ras_summary(text)
    assert parsed.problems == []
    (row,) = parsed.value.memory
    assert (row.err_type, row.label, row.location, row.count) == (
        "Corrected",
        "CPU_SrcID#1_Ha#0_Chan#0_DIMM#0",
        "1:0:0:-1",
        5539,
    )


def test_ras_status_sample_is_not_a_summary() -> None:
    assert parse_ras_summary(sample("rasdaemon/ras-mc-ctl-status-loaded.txt")).problems
