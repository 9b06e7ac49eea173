"""Parsers never raise: arbitrary text, truncated real samples, and odd sysfs snapshots.

Every result must also still be a valid report model (re-validated here, because parsers fill
some fields after construction) and every problem must stay short.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from checker.parsers.common import INTERNAL_ERROR, Parsed, parse_cpu_list
from checker.parsers.dmi import parse_dmi_id, parse_dmidecode_firmware, parse_dmidecode_memory
from checker.parsers.edac import parse_edac_poll_msec, parse_edac_sysfs, parse_edac_util
from checker.parsers.firmware import parse_ethtool_driver, parse_fwupd_devices
from checker.parsers.identity import parse_cmdline, parse_cpuinfo
from checker.parsers.interrupts import parse_interrupts, parse_irq_affinities
from checker.parsers.ipmi import parse_mc_info, parse_sdr, parse_sel_info
from checker.parsers.ipmi_sel import parse_freeipmi_sel, parse_ipmitool_sel, parse_sel
from checker.parsers.kernel_events import parse_kernel_log
from checker.parsers.kernel_log import parse_journal_json, parse_kmsg, parse_log_lines
from checker.parsers.mce import parse_mcelog, parse_mcelog_client_memory, parse_ras_mc_ctl_errors
from checker.parsers.memory_tiers import parse_memory_tiers
from checker.parsers.rasdaemon import (
    parse_aer_event_rows,
    parse_dimm_total_rows,
    parse_mc_event_rows,
    parse_mce_record_rows,
    parse_memory_failure_rows,
    parse_ras_error_count,
    parse_ras_summary,
)
from checker.parsers.smart import parse_scan_open_json, parse_scan_open_text, parse_smartctl_json
from checker.parsers.smart_text import parse_nvme_smart_log, parse_smartctl_text
from checker.parsers.task_stat import parse_task_stat
from tests.checker.helpers import sample, sample_names

TextParser = Callable[[str], Parsed[Any]]

# parser name -> (parser, sample folders whose files it reads)
TEXT_PARSERS: dict[str, tuple[TextParser, tuple[str, ...]]] = {
    "edac_util": (parse_edac_util, ("edac-util",)),
    "edac_poll_msec": (parse_edac_poll_msec, ()),
    "kmsg": (parse_kmsg, ()),
    "log_lines": (parse_log_lines, ("kernel-log",)),
    "kernel_log_file": (lambda t: parse_kernel_log(t, "file"), ("kernel-log", "edac-sysfs")),
    "kernel_log_kmsg": (lambda t: parse_kernel_log(t, "kmsg"), ()),
    "journal_json": (parse_journal_json, ()),
    "kernel_log_journal": (lambda t: parse_kernel_log(t, "journal"), ("kernel-log",)),
    "sel": (parse_sel, ("ipmi-sel",)),
    "ipmitool_sel": (parse_ipmitool_sel, ("ipmi-sel",)),
    "freeipmi_sel": (parse_freeipmi_sel, ("ipmi-sel",)),
    "sel_info": (parse_sel_info, ("ipmi-sel",)),
    "sdr": (parse_sdr, ("ipmi-sdr",)),
    "mc_info": (parse_mc_info, ("ipmi-mc",)),
    "smartctl_json": (parse_smartctl_json, ("smartctl-json",)),
    "scan_open_json": (parse_scan_open_json, ()),
    "scan_open_text": (parse_scan_open_text, ()),
    "smartctl_text": (parse_smartctl_text, ("smartctl-text",)),
    "nvme_smart_log": (parse_nvme_smart_log, ("nvme-cli",)),
    "mcelog": (parse_mcelog, ("mcelog",)),
    "mcelog_client_memory": (parse_mcelog_client_memory, ("mcelog",)),
    "ras_errors": (parse_ras_mc_ctl_errors, ("rasdaemon",)),
    "ras_error_count": (parse_ras_error_count, ("rasdaemon",)),
    "ras_summary": (parse_ras_summary, ("rasdaemon",)),
    "cpuinfo": (parse_cpuinfo, ("cpuinfo",)),
    "cmdline": (parse_cmdline, ()),
    "cpu_list": (parse_cpu_list, ()),
    "dmidecode_memory": (parse_dmidecode_memory, ("dmi",)),
    "dmidecode_firmware": (parse_dmidecode_firmware, ("dmi",)),
    "ethtool_driver": (lambda t: parse_ethtool_driver(t, "eth0"), ("firmware",)),
    "fwupd": (parse_fwupd_devices, ("firmware",)),
    "interrupts": (parse_interrupts, ("proc-interrupts",)),
    "task_stat": (parse_task_stat, ()),
}
CUTS = 24


def revalidate(value: object) -> None:
    """Fail if a model in the result no longer satisfies its own schema."""
    if isinstance(value, BaseModel):
        type(value).model_validate(value.model_dump())
    elif isinstance(value, list | tuple):
        for item in value:
            revalidate(item)
    elif isinstance(value, dict):
        for item in value.values():
            revalidate(item)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            revalidate(getattr(value, f.name))


def check(result: Parsed[Any]) -> None:
    assert isinstance(result, Parsed)
    revalidate(result.value)
    for p in result.problems:
        assert isinstance(p, str)
        assert len(p) <= 420, p
        assert INTERNAL_ERROR not in p, p


@pytest.mark.parametrize("name", sorted(TEXT_PARSERS))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text())
def test_arbitrary_text_never_raises(name: str, text: str) -> None:
    check(TEXT_PARSERS[name][0](text))


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
    check(TEXT_PARSERS[name][0](text))


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
]


@pytest.mark.parametrize("name", sorted(TEXT_PARSERS))
def test_nasty_inputs_never_raise(name: str) -> None:
    for text in NASTY:
        check(TEXT_PARSERS[name][0](text))


def _truncation_cases() -> list[tuple[str, str]]:
    return [
        (name, path) for name, (_, folders) in sorted(TEXT_PARSERS.items()) for f in folders for path in sample_names(f)
    ]


@pytest.mark.parametrize(("name", "path"), _truncation_cases())
def test_truncated_real_samples_never_raise(name: str, path: str) -> None:
    text = sample(path)
    parser = TEXT_PARSERS[name][0]
    cuts = {len(text) * n // CUTS for n in range(CUTS)} | {len(text) - 1, len(text)}
    for cut in sorted(c for c in cuts if c >= 0):
        check(parser(text[:cut]))


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
