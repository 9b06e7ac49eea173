"""State signals: EDAC polling, CPU errata on unpatched kernels, firmware baselines, CXL memory tiers."""

from __future__ import annotations

import pytest

from bench.samples import sample
from checker.parsers.identity import parse_cpuinfo
from checker.schemas import EdacController, EdacState, NicFirmware
from remediator.baselines import parse_baselines
from remediator.derive import HostFacts
from remediator.errata import AMD_298, ERRATA, Erratum
from tests.builders.observations import (
    OPTERON,
    Deriver,
    at,
    by_subject,
    cpu,
    edac,
    identity,
    of,
    report,
    tiers,
)

OPTERON_HOST = HostFacts("grid-001", "legacy-opteron-8356", "fra3")


def test_edac_poll_interval_is_reported_in_seconds_every_time() -> None:
    run = Deriver()
    for minute, msec in ((0, 1000), (1, 1000), (2, 37000)):
        (signal,) = run(report(at(minute), edac=edac(msec)))
        assert (signal.kind, signal.subject, signal.value) == ("edac_poll_interval", "edac", msec / 1000)
    assert run(report(at(3), edac=edac(None))) == []


@pytest.mark.parametrize(
    ("mc_names", "polls"),
    [
        (["ie31200"], True),  # a chipset driver with its own edac_check: polled every edac_mc_poll_msec
        (["Skylake Socket#0 IMC#0", "Skylake Socket#1 IMC#1"], False),  # skx logs from the MCE decode chain
        (["Intel_10nm Socket#0 IMC#0"], False),
        (["F17h_M30h"], False),  # amd64_edac
        (["Haswell Socket#0"], None),  # sb_edac: polled in older kernels only; sysfs cannot tell which
        (["Pondicherry2"], None),  # a name not on either list: unknown, never assumed to poll
        (["E7520"], True),  # e752x: a latching chipset driver
        ([], None),
    ],
)
def test_edac_poll_interval_says_whether_the_driver_polls(mc_names: list[str], polls: bool | None) -> None:
    state = EdacState(
        controllers=[EdacController(mc=i, mc_name=name) for i, name in enumerate(mc_names)], poll_msec=1000
    )
    (signal,) = Deriver()(report(at(0), edac=state))
    assert signal.detail["polls"] is polls
    assert signal.detail["controllers"] == sorted(mc_names)


# -- errata ---------------------------------------------------------------------------------


def test_amd_298_on_an_unpatched_kernel_fires_on_every_report() -> None:
    run = Deriver(OPTERON_HOST)
    stock = identity(kernel="2.6.16.60-0.21-smp", cpus=[cpu(**OPTERON)])
    for minute in (0, 1, 2):
        (signal,) = of(run(report(at(minute), identity=stock)), "errata_match")
        assert (signal.subject, signal.value) == ("AMD-298", 1)
        assert signal.detail["kernel"] == "2.6.16.60-0.21-smp"
        assert signal.detail["remediation"] == "patched_kernel"
        assert (signal.detail["cpu"]["family"], signal.detail["cpu"]["model"], signal.detail["cpu"]["stepping"]) == (
            16,
            2,
            2,
        )
        assert "INFN" in signal.detail["source"]
        # the class's configured build is the one to install (firmware_baselines.yaml), not a guess
        assert signal.detail["configured"] is True
        assert signal.detail["patched_kernel"] == {"release": "2.6.23.17-amdpatch2", "package": None}
        assert signal.detail["withdrawn"] is None


def test_the_first_patched_build_is_withdrawn_for_its_cputime_bug() -> None:
    """INFN Pisa's 2.6.23.17-amdpatch carried the fix and a cputime bug: a host on it is not patched."""
    run = Deriver(OPTERON_HOST)
    first = identity(kernel="2.6.23.17-amdpatch", cpus=[cpu(**OPTERON)])
    (signal,) = of(run(report(at(0), identity=first)), "errata_match")
    assert "cputime" in signal.detail["withdrawn"]
    assert signal.detail["patched_kernel"]["release"] == "2.6.23.17-amdpatch2"
    # a release that merely contains the old marker is not the configured build either
    lookalike = identity(kernel="2.6.23.17-amdpatch-debug", cpus=[cpu(**OPTERON)])
    assert of(run(report(at(1), identity=lookalike)), "errata_match")


def test_the_configured_build_and_other_steppings_are_not_affected() -> None:
    run = Deriver(OPTERON_HOST)
    assert (
        of(run(report(at(0), identity=identity(kernel="2.6.23.17-amdpatch2", cpus=[cpu(**OPTERON)]))), "errata_match")
        == []
    )
    b3 = {**OPTERON, "stepping": 3}  # the 2356/2360 of the paper: rev B3, not affected
    assert (
        of(run(report(at(1), identity=identity(kernel="2.6.16.60-0.21-smp", cpus=[cpu(**b3)]))), "errata_match") == []
    )
    # without a kernel release there is no telling: say nothing
    assert of(run(report(at(2), identity=identity(kernel=None, cpus=[cpu(**OPTERON)]))), "errata_match") == []


def test_an_erratum_host_of_a_class_without_a_configured_kernel_says_so() -> None:
    run = Deriver(HostFacts("grid-002", "unknown-opteron-class", "fra3"))
    (signal,) = of(
        run(report(at(0), identity=identity(kernel="2.6.23.17-amdpatch2", cpus=[cpu(**OPTERON)]))), "errata_match"
    )
    assert signal.detail["configured"] is False  # nothing to install, and nothing guessed from the name
    assert signal.detail["patched_kernel"] is None


def test_a_class_configuration_can_accept_other_builds() -> None:
    baselines = parse_baselines(
        'version: 1\nclasses:\n  legacy-opteron-8356:\n    kernels:\n      AMD-298: {release: "2.6.23.17-fix", '
        'accept: ["2.6.23.18-fix"]}\n'
    )
    run = Deriver(OPTERON_HOST, baselines=baselines)
    assert (
        of(run(report(at(0), identity=identity(kernel="2.6.23.18-fix", cpus=[cpu(**OPTERON)]))), "errata_match") == []
    )


def test_real_cpuinfo_samples_match_by_cpuid_not_by_name() -> None:
    opteron_2380 = parse_cpuinfo(sample("cpuinfo/amd-opteron-2380-family16-partial.txt")).value
    opteron_2356 = parse_cpuinfo(sample("cpuinfo/amd-opteron-2356-rhel4-i686-no-microcode.txt")).value  # rev B3
    intel = parse_cpuinfo(sample("cpuinfo/intel-i7-8650u-8thread-microcode-0xb4.txt")).value
    assert opteron_2380
    assert opteron_2356
    assert intel
    for cpus in (opteron_2380, opteron_2356, intel):
        assert not any(AMD_298.affects(c) for c in cpus)
        assert of(Deriver()(report(at(0), identity=identity(kernel="2.6.18", cpus=cpus))), "errata_match") == []


def test_microcode_bound_of_an_erratum() -> None:
    fixed_by_microcode = Erratum(
        id="TEST-1",
        vendor="GenuineIntel",
        family=6,
        model=85,
        stepping=None,
        max_microcode=0x2006E05,
        affected="a test erratum",
        remediation="microcode_update",
        source="test",
    )
    assert fixed_by_microcode.affects(cpu(microcode=0x2006E05))
    assert not fixed_by_microcode.affects(cpu(microcode=0x2007006))
    assert fixed_by_microcode.affects(cpu(microcode=None))  # unknown microcode: check rather than miss
    assert AMD_298 in ERRATA


# -- firmware -------------------------------------------------------------------------------


def test_firmware_below_baseline_per_component() -> None:
    run = Deriver()  # compute-skx-2s: bios 2.10.2, bmc 4.40.40.40, mlx5_core 16.35.2000, microcode 0x2007006
    nics = [
        NicFirmware(interface="ens1f0np0", driver="mlx5_core", firmware="16.28.4512 (DEL0000000015)"),
        NicFirmware(interface="ens1f1np1", driver="mlx5_core", firmware="16.35.2000 (DEL0000000015)"),
        NicFirmware(interface="eno1", driver="tg3", firmware="FFV21.80.8 bc 5720-v1.39"),  # no baseline for tg3
    ]
    stale = identity(bios="2.9.4", bmc="4.40.40.40", nics=nics, cpus=[cpu(microcode=0x2006E05)])
    found = by_subject(run(report(at(0), identity=stale)), "firmware_below_baseline")
    # microcode is not firmware a reflash can write: it is its own signal
    assert set(found) == {"bios", "nic:ens1f0np0"}
    assert found["bios"].detail == {
        "current": "2.9.4",
        "baseline": "2.10.2",
        "hardware_class": "compute-skx-2s",
        "source": "host",  # dmidecode's, not the BMC's FirmwareInventory (tests/remediator/test_derive_redfish.py)
    }
    current = identity(bios="2.10.2", bmc="4.40.40.40", nics=nics[1:], cpus=[cpu(microcode=0x2007006)])
    assert of(run(report(at(1), identity=current)), "firmware_below_baseline") == []


def test_microcode_below_baseline_names_its_package_and_defers_to_a_stale_bios() -> None:
    run = Deriver()
    with_old_bios = identity(bios="2.9.4", bmc="4.40.40.40", cpus=[cpu(microcode=0x2006E05)])
    (signal,) = of(run(report(at(0), identity=with_old_bios)), "microcode_below_baseline")
    assert signal.detail["current"] == "0x2006e05"
    assert signal.detail["baseline"] == "0x2007006"
    assert signal.detail["package"] == "intel-microcode"
    assert signal.detail["bios_below_baseline"] is True  # the BIOS update likely carries the microcode
    with_current_bios = identity(bios="2.10.2", bmc="4.40.40.40", cpus=[cpu(microcode=0x2006E05)])
    (signal,) = of(run(report(at(1), identity=with_current_bios)), "microcode_below_baseline")
    assert signal.detail["bios_below_baseline"] is False
    fixed = identity(bios="2.10.2", bmc="4.40.40.40", cpus=[cpu(microcode=0x2007006)])
    assert of(run(report(at(2), identity=fixed)), "microcode_below_baseline") == []


def test_unknown_class_and_unreadable_versions_say_nothing() -> None:
    unknown = Deriver(HostFacts("x-1", "unknown"))
    assert of(unknown(report(at(0), identity=identity(bios="0.1"))), "firmware_below_baseline") == []
    run = Deriver()
    odd = identity(bios="Not Specified", bmc=None)
    assert of(run(report(at(0), identity=odd)), "firmware_below_baseline") == []


def test_baselines_from_another_file() -> None:
    baselines = parse_baselines('version: 1\nclasses:\n  compute-skx-2s: {bmc: "4.40.40.40"}\n')
    run = Deriver(baselines=baselines)
    (signal,) = of(run(report(at(0), identity=identity(bios="0.1", bmc="3.21.26.22"))), "firmware_below_baseline")
    assert signal.subject == "bmc"


# -- memory tiers ---------------------------------------------------------------------------


def test_demotion_disabled_with_cxl_nodes() -> None:
    run = Deriver()
    signals = run(report(at(0), memory_tiers=tiers(2, demotion=False, weights={"0": 5, "1": 1, "2": 1})))
    assert {s.subject for s in of(signals, "cxl_demotion_disabled")} == {"node1", "node2"}
    assert of(run(report(at(1), memory_tiers=tiers(2, demotion=True))), "cxl_demotion_disabled") == []
    assert of(run(report(at(2), memory_tiers=tiers(2, demotion=None))), "cxl_demotion_disabled") == []  # unknown


def test_default_interleave_weights_with_cxl_nodes() -> None:
    run = Deriver()
    (signal,) = run(report(at(0), memory_tiers=tiers(1, weights={"0": 1, "1": 1})))
    assert signal.kind == "interleave_weights_default"
    assert signal.detail["weights"] == {"0": 1, "1": 1}
    assert run(report(at(1), memory_tiers=tiers(1, weights={"0": 5, "1": 1}))) == []
    assert run(report(at(2), memory_tiers=tiers(1, weights={}))) == []  # a kernel without weighted interleave


def test_no_cpuless_node_no_tier_signals() -> None:
    run = Deriver()
    assert run(report(at(0), memory_tiers=tiers(0, demotion=False, weights={"0": 1, "1": 1}))) == []
