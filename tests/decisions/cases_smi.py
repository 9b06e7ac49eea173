"""The SMI and error-reporting-mode scenarios (rules smi-firmware-first-left and smi-storm-no-errors),
registered into tests/decisions/cases.py's CASES.

The host is our two-socket Intel tree (tests/checker/fixtures/sysfs-smi-two-socket.ttar) with the
corpus's Intel /proc/cpuinfo; its SMI counter moves between cycles as MSR_SMI_COUNT would. The
firmware-first errors are the corpus's real x86 GHES memory record (kernel-log/syslog-ghes-recoverable-
memory-fru-text-…log, its [Hardware Error] lines), written to the kernel log again each cycle as a
host left in firmware-first logs every CE. The PCIe GHES record is ours (tests/decisions/fixtures).
"""

from __future__ import annotations

from pathlib import Path

from bench.samples import sample
from checker.schemas import Report
from tests.checker.smi_tree import install
from tests.decisions.cases import I10NM, case, csrow_files
from tests.decisions.harness import Expect, SnapHost

GHES_LOG = "kernel-log/syslog-ghes-recoverable-memory-fru-text-already-poisoned.log"  # x86 (SUSE)
AMD_CPUINFO = "cpuinfo/amd-opteron-2380-family16-partial.txt"
SEL_CE = "ipmi-sel/ipmitool-sel-list-correctable-ecc-cpu0-dimm8-chassis-intrusion.txt"
PCIE_GHES = Path(__file__).parent / "fixtures" / "ghes-pcie-corrected-root-port.log"
SMI_RULES = frozenset({"smi-firmware-first-left", "smi-storm-no-errors"})
ONLY_MODE = "version: 1\nclasses:\n  compute-icx-2s: {error_reporting: cmci}\n"  # no microcode baseline


def ghes_memory() -> str:
    """The real record's [Hardware Error] lines (not the memory_failure line after it)."""
    return "".join(line + "\n" for line in sample(GHES_LOG).splitlines() if "[Hardware Error]" in line)


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
        host.kernel_log(ghes_memory())
        reports.append(host.cycle(minute))
    return host, reports, Expect("smi-firmware-first-left", "restore_cmci", never=frozenset({"smi-storm-no-errors"}))


@case("SMIs at 5/s with no error source for 40 minutes: a firmware ticket", "smi-storm-no-errors")
def smi_storm(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = smi_host(tmp)
    host.real_edac(I10NM)  # a native EDAC driver that would count CEs: their absence means something
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
        host.kernel_log(ghes_memory())
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


@case("SMIs at 5/s while only the BMC SEL logs a DIMM's CEs: no SMI-storm ticket", None)
def smi_with_sel_only_errors(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = smi_host(tmp)
    host.real_edac(I10NM)
    host.baselines = ONLY_MODE
    ces = [line for line in sample(SEL_CE).splitlines() if "Correctable ECC" in line]
    reports = []
    for n, minute in enumerate(range(0, 50, 10)):
        smis(host, 1234 + 5 * 60 * minute)
        host.sel(ces[n])
        reports.append(host.cycle(minute))
    assert all(r.observations.smi is not None for r in reports)
    assert sum(len(r.observations.sel.entries) for r in reports if r.observations.sel) >= 4  # the CEs came
    return host, reports, Expect(None, never=SMI_RULES)


@case(
    "ignore_ce=1 and SMIs at 5/s: CEs may go unseen; a ticket for ignore_ce, no SMI storm",
    "corrected-errors-ignored",
)
def ignore_ce_set(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = smi_host(tmp)
    host.real_edac(I10NM)
    host.baselines = ONLY_MODE
    reports = []
    for minute in range(0, 50, 10):
        install(
            host.snap, counts={0: 1234 + 5 * 60 * minute, 4: 1234 + 5 * 60 * minute}, machinecheck0__ignore_ce="1\n"
        )
        reports.append(host.cycle(minute))
    assert all(r.observations.error_reporting and r.observations.error_reporting.ignore_ce for r in reports)
    return (
        host,
        reports,
        Expect("corrected-errors-ignored", "ticket", title="corrected memory errors switched off", never=SMI_RULES),
    )


@case("a PCIe GHES record and 5 SMI/s on a CMCI class: not firmware-first for memory, no restore_cmci", None)
def pcie_ghes_only(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = smi_host(tmp)
    host.real_edac(I10NM)
    host.baselines = ONLY_MODE
    reports = []
    for minute in range(0, 50, 10):
        smis(host, 1234 + 5 * 60 * minute)
        host.kernel_log(PCIE_GHES.read_text(encoding="utf-8"))
        reports.append(host.cycle(minute))
    assert all(
        any(e.kind == "ghes_error" for e in r.observations.kernel_log.events)
        for r in reports
        if r.observations.kernel_log
    )
    return host, reports, Expect(None, never=SMI_RULES | {"error-reporting-mode-mismatch"})


@case(
    "GHES memory records hourly for 7 hours, few SMIs (below 1/s): the mode mismatch is ticketed",
    "error-reporting-mode-mismatch",
)
def persistent_mode_mismatch(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = smi_host(tmp)
    host.baselines = ONLY_MODE
    reports = []
    for minute in range(0, 7 * 60 + 1, 30):
        smis(host, 1234 + minute)  # 1 SMI a minute: smi-firmware-first-left stays quiet
        if minute % 60 == 0:
            host.kernel_log(ghes_memory())
        reports.append(host.cycle(minute))
    return (
        host,
        reports,
        Expect("error-reporting-mode-mismatch", "ticket", title="reported firmware_first", never=SMI_RULES),
    )


@case("GHES memory records for two hours only: not yet a persistent mismatch", None)
def short_mode_mismatch(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = smi_host(tmp)
    host.baselines = ONLY_MODE
    reports = []
    for minute in range(0, 2 * 60 + 1, 30):
        smis(host, 1234 + minute)
        if minute % 60 == 0:
            host.kernel_log(ghes_memory())
        reports.append(host.cycle(minute))
    return host, reports, Expect(None, never=SMI_RULES | {"error-reporting-mode-mismatch"})


@case(
    "a DDR4 DIMM at 3 CE/s: too fast for the firmware-first capture, a ticket and no hard PPR",
    "dimm-ce-too-fast-for-ppr",
)
def dimm_too_fast_for_ppr(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    reports = []
    for minute in range(0, 50, 10):
        host.real_edac(I10NM, mc7__dimm0__dimm_ce_count=4 + 180 * minute, mc7__dimm0__dimm_mem_type="DDR4")
        reports.append(host.cycle(minute))
    return (
        host,
        reports,
        Expect(
            "dimm-ce-too-fast-for-ppr", "ticket", title="too fast for hard PPR", never_actions=frozenset({"hard_ppr"})
        ),
    )


@case(
    "ghes_edac loaded on a CMCI class, no errors, for seven hours: a ticket, a reboot is needed",
    "ghes-edac-expects-cmci",
)
def ghes_edac_left_loaded(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = smi_host(tmp)
    host.baselines = ONLY_MODE
    host.edac(csrow_files(mc_name="ghes_edac"))
    reports = []
    for minute in range(0, 7 * 60 + 1, 30):
        smis(host, 1234 + minute)
        reports.append(host.cycle(minute))
    return (
        host,
        reports,
        Expect(
            "ghes-edac-expects-cmci",
            "ticket",
            title="native EDAC driver not loaded",
            never=SMI_RULES | {"error-reporting-mode-mismatch"},
        ),
    )
