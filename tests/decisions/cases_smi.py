"""The SMI and error-reporting-mode scenarios (rules smi-firmware-first-left and smi-storm-no-errors),
registered into tests/decisions/cases.py's CASES.

The host is our two-socket Intel tree (tests/checker/fixtures/sysfs-smi-two-socket.ttar) with the
corpus's Intel /proc/cpuinfo; its SMI counter moves between cycles as MSR_SMI_COUNT would. The
firmware-first errors are the corpus's real GHES records (kernel-log/ghes-apei-memory-ce-…log),
written to the kernel log again each cycle as a host left in firmware-first logs every CE.
"""

from __future__ import annotations

from pathlib import Path

from bench.samples import sample
from checker.schemas import Report
from tests.checker.smi_tree import install
from tests.decisions.cases import I10NM, case
from tests.decisions.harness import Expect, SnapHost

GHES_LOG = "kernel-log/ghes-apei-memory-ce-ghes-edac-hisilicon-arm64.log"
AMD_CPUINFO = "cpuinfo/amd-opteron-2380-family16-partial.txt"
SMI_RULES = frozenset({"smi-firmware-first-left", "smi-storm-no-errors"})


def smi_host(tmp: Path, *, hardware_class: str = "compute-icx-2s") -> SnapHost:
    host = SnapHost(tmp, hardware_class=hardware_class)
    install(host.snap)
    return host


def smis(host: SnapHost, count: int) -> None:
    install(host.snap, counts={0: count, 4: count})


@case("a host left firmware-first: GHES records, 5 SMI/s, class expects CMCI: back to CMCI", "smi-firmware-first-left")
def firmware_first_left(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = smi_host(tmp)
    reports = []
    for minute in range(0, 30, 10):
        smis(host, 1234 + 5 * 60 * minute)
        host.kernel_log(sample(GHES_LOG))
        reports.append(host.cycle(minute))
    return host, reports, Expect("smi-firmware-first-left", "restore_cmci", never=frozenset({"smi-storm-no-errors"}))


@case("SMIs at 5/s with no error source for 40 minutes: a firmware ticket", "smi-storm-no-errors")
def smi_storm(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = smi_host(tmp)
    reports = []
    for minute in range(0, 50, 10):
        smis(host, 1234 + 5 * 60 * minute)
        reports.append(host.cycle(minute))
    return host, reports, Expect("smi-storm-no-errors", "ticket", title="SMI storm", part_type="host")


@case("high SMIs in CMCI mode while a DIMM's CEs arrive natively: the DIMM path, not a mode problem", None)
def smi_with_native_errors(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = smi_host(tmp)
    reports = []
    for minute in range(0, 50, 10):
        smis(host, 1234 + 5 * 60 * minute)
        host.real_edac(I10NM, mc7__dimm0__dimm_ce_count=4 + 30 * minute, mc7__dimm0__dimm_mem_type="DDR4")
        reports.append(host.cycle(minute))
    return host, reports, Expect("dimm-ce-ppr", "hard_ppr", never=SMI_RULES)


@case("GHES records and fast SMIs on a class with no configured mode: not judged", None)
def unconfigured_class(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = smi_host(tmp, hardware_class="x9drt-lab")
    reports = []
    for minute in range(0, 30, 10):
        smis(host, 1234 + 5 * 60 * minute)
        host.kernel_log(sample(GHES_LOG))
        reports.append(host.cycle(minute))
    return host, reports, Expect(None, never=SMI_RULES)


@case("an AMD host: no SMI counter, no SMI signal, no SMI rule", None)
def amd_host(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = smi_host(tmp, hardware_class="x9drt-lab")
    host.file("/proc/cpuinfo", sample(AMD_CPUINFO))
    reports = []
    for minute in range(0, 50, 10):
        smis(host, 1234 + 5 * 60 * minute)  # the files are there; the collector never reads them on AMD
        reports.append(host.cycle(minute))
    assert all(r.observations.smi is None for r in reports)
    assert reports[-1].collectors["smi"].reason == "no MSR_SMI_COUNT on AMD: the SMI counter (MSR 0x34) is Intel's"
    return host, reports, Expect(None, never=SMI_RULES)
