"""EDAC sysfs, poll interval and edac-util parsing against real samples."""

from __future__ import annotations

import re

from bench.samples import listing_to_files, read_ttar, sample
from checker.parsers.edac import parse_edac_poll_msec, parse_edac_sysfs, parse_edac_util

EDAC_ROOT = "/sys/devices/system/edac/mc/"


def test_legacy_csrow_ttar_counts_and_labels() -> None:
    files = read_ttar(sample("edac-sysfs/node-exporter-legacy-csrow-layout.ttar"), "sys/devices/system/edac/mc/")
    assert files["mc0/ce_count"] == "1\n"
    parsed = parse_edac_sysfs(files)
    assert parsed.problems == []
    (mc,) = parsed.value.controllers
    assert (mc.mc, mc.ce_count, mc.ce_noinfo_count, mc.ue_count, mc.ue_noinfo_count) == (0, 1, 2, 5, 6)
    by_name = {d.name: d for d in mc.dimms}
    assert sorted(by_name) == [f"csrow{r}/ch{c}" for r in range(3) for c in range(2)]
    assert all(d.layout == "csrow" for d in mc.dimms)
    assert by_name["csrow0/ch0"].label == "mc0csrow0channel0"
    assert by_name["csrow2/ch1"].label == "mc0csrow2channel1"
    # The hand-made values: channel CE all 0, channel UE 2 on csrow0/1, none on csrow2.
    assert [by_name[f"csrow{r}/ch{c}"].ce_count for r in range(3) for c in range(2)] == [0] * 6
    assert [by_name[f"csrow{r}/ch{c}"].ue_count for r in range(3) for c in range(2)] == [2, 2, 2, 2, 0, 0]


def test_i10nm_dimm_layout_from_listing() -> None:
    files = listing_to_files(sample("edac-sysfs/i10nm-mc7-dimm0-ce4.txt"), EDAC_ROOT)
    parsed = parse_edac_sysfs(files)
    assert parsed.problems == []
    (mc,) = parsed.value.controllers
    assert mc.mc == 7
    (dimm,) = mc.dimms
    assert (dimm.name, dimm.layout, dimm.label, dimm.ce_count, dimm.ue_count) == (
        "dimm0",
        "dimm",
        "CPU_SrcID#1_MC#3_Chan#0_DIMM#0",
        4,
        0,
    )


def test_csrow_counts_of_two_servers_are_zero() -> None:
    text = sample("edac-sysfs/csrow-ce-ue-count-two-servers.txt")
    server_a, server_b = re.split(r"(?m)^# server B$", text)
    a = parse_edac_sysfs(listing_to_files(server_a, EDAC_ROOT))
    b = parse_edac_sysfs(listing_to_files(server_b, EDAC_ROOT))
    assert a.problems == b.problems == []
    assert [d.name for d in a.value.controllers[0].dimms] == ["csrow0"]
    assert [d.name for d in b.value.controllers[0].dimms] == ["csrow0", "csrow1", "csrow2", "csrow3"]
    for state in (a.value, b.value):
        (mc,) = state.controllers
        assert mc.ce_count == mc.ue_count == 0
        assert all(d.ce_count == d.ue_count == 0 for d in mc.dimms)


def test_dimm_and_rank_entries_hide_legacy_csrows() -> None:
    files = {
        "mc0/mc_name": "Skylake Socket#0 IMC#1\n",
        "mc0/ce_count": "9\n",
        "mc0/seconds_since_reset": "3600\n",
        "mc0/rank1/dimm_label": "CPU_SrcID#0_MC#1_Chan#0_DIMM#0\n",
        "mc0/rank1/dimm_ce_count": "9\n",
        "mc0/rank1/dimm_location": "channel 0 slot 0\n",
        "mc0/rank1/size": "16384\n",
        "mc0/rank1/dimm_mem_type": "Registered-DDR4\n",
        "mc0/csrow0/ch0_ce_count": "9\n",
    }
    (mc,) = parse_edac_sysfs(files).value.controllers
    assert mc.mc_name == "Skylake Socket#0 IMC#1"
    assert mc.seconds_since_reset == 3600
    (rank,) = mc.dimms
    assert (rank.name, rank.layout, rank.ce_count, rank.location, rank.size_mb, rank.mem_type) == (
        "rank1",
        "rank",
        9,
        "channel 0 slot 0",
        16384,
        "Registered-DDR4",
    )


def test_garbage_counter_is_a_problem_not_an_exception() -> None:
    parsed = parse_edac_sysfs({"mc0/dimm0/dimm_ce_count": "lots\n", "mc1/ce_count": "-3"})
    assert parsed.value.controllers[0].dimms[0].ce_count == 0
    assert len(parsed.problems) == 2
    assert "dimm_ce_count" in parsed.problems[0]
    assert "lots" in parsed.problems[0]


def test_poll_msec() -> None:
    assert parse_edac_poll_msec("1000\n").value == 1000
    bad = parse_edac_poll_msec("fast")
    assert bad.value is None
    assert bad.problems


def test_poll_msec_value_from_kernel_doc() -> None:
    doc = sample("edac-sysfs/kernel-doc-ras-rst-excerpts.txt")
    m = re.search(r'echo "(\d+)" > /sys/module/edac_core/parameters/edac_mc_poll_msec', doc)
    assert m is not None
    assert parse_edac_poll_msec(m.group(1)).value == 1000


def test_kernel_doc_dimm_tree_names_the_files_the_parser_reads() -> None:
    doc = sample("edac-sysfs/kernel-doc-ras-rst-excerpts.txt")
    for name in ("dimm_ce_count", "dimm_label", "dimm_location", "dimm_mem_type", "ce_noinfo_count", "mc_name"):
        assert name in doc
    files = {"mc0/dimm0/dimm_ce_count": "0", "mc1/dimm0/dimm_ce_count": "0"}
    assert [c.mc for c in parse_edac_sysfs(files).value.controllers] == [0, 1]


def test_edac_util_ghes_arm64_noinfo_only() -> None:
    parsed = parse_edac_util(sample("edac-util/edac-util-v-ghes-edac-arm64-13ce-noinfo.txt"))
    assert parsed.problems == []
    (mc,) = parsed.value.controllers
    assert (mc.ce_noinfo_count, mc.ue_noinfo_count, mc.ce_count) == (13, 0, 13)
    assert len(mc.dimms) == 16
    assert {d.label for d in mc.dimms} == {f"mc#0memory#{n}" for n in range(0, 32, 2)}
    assert all(d.ce_count == 0 for d in mc.dimms)


def test_edac_util_haswell_healthy() -> None:
    parsed = parse_edac_util(sample("edac-util/edac-util-v-ie31200-haswell-healthy-csrow.txt"))
    assert parsed.problems == []
    (mc,) = parsed.value.controllers
    assert [(d.name, d.label, d.ce_count) for d in mc.dimms] == [
        ("csrow0", "mc#0csrow#0channel#0", 0),
        ("csrow1", "mc#0csrow#1channel#0", 0),
    ]


def test_edac_util_noinfo_only_host() -> None:
    parsed = parse_edac_util(sample("edac-util/edac-util-v-w1290p-noinfo-only.txt"))
    assert parsed.problems == []
    (mc,) = parsed.value.controllers
    assert mc.dimms == []
    assert mc.ce_count == 0


def test_edac_util_report_full_four_controllers_all_zero() -> None:
    parsed = parse_edac_util(sample("edac-util/edac-util-report-full-misses-rank-ce.txt"))
    assert parsed.problems == []
    assert [c.mc for c in parsed.value.controllers] == [0, 1, 2, 3]
    assert all(c.ce_count == c.ue_count == 0 for c in parsed.value.controllers)


def test_edac_util_fatal_is_a_problem() -> None:
    parsed = parse_edac_util(sample("edac-util/edac-util-v-no-edac-sysfs-fatal.txt"))
    assert parsed.value.controllers == []
    assert len(parsed.problems) == 1
    assert "Unable to find EDAC data in sysfs" in parsed.problems[0]
