"""The nvidia-smi GPU scenarios (rules gpu-*), registered into tests/decisions/cases.py's CASES.

The host's tools answer with the corpus's real `nvidia-smi -q -x` documents (gpu/): the A10G (v11,
Ampere SRAM/DRAM counters, remapped rows populated), the Tesla P100 (v11, legacy single/double-bit
counters, page retirement), the A100 under MIG (v12, remapped rows N/A) and the RTX 4000 Ada (v13, ECC
disabled: every counter N/A). Where a scenario needs a fault the samples do not show (a remap pending in
the XML, a retirement pending, a hot GPU), the one field is changed in the real document, as the tool
would print it; everything else is as captured. sysfs lists the GPU as an NVIDIA 3D controller.
"""

from __future__ import annotations

import re
from pathlib import Path

from bench.samples import sample
from checker.collectors import gpu as gpu_collector
from checker.schemas import Report
from tests.decisions.cases import case
from tests.decisions.harness import Expect, SnapHost

A10G = "gpu/nvidia-smi-q-x-a10g-remapped-rows-histogram-v11.xml"  # 00000000:00:1E.0, serial 0000000000000
P100 = "gpu/nvidia-smi-q-x-tesla-p100-pcie-aggregate-sbe-3-retired-pages-passthrough.xml"  # 00000000:00:04.0
A100_MIG = "gpu/nvidia-smi-q-x-a100-sxm4-80gb-mig-enabled-remapped-na-v12.xml"  # 00000000:01:00.0
RTX_V13 = "gpu/nvidia-smi-q-x-rtx4000-ada-v13-ecc-disabled-repair-fields.xml"  # 00000000:06:00.0
GPU_RULES = frozenset(
    {
        "gpu-row-remap-pending",
        "gpu-retired-pages-pending",
        "gpu-row-remap-failure",
        "gpu-ecc-uncorrected",
        "gpu-temperature-slowdown",
        "gpu-hardware-slowdown",
        "gpu-ecc-disabled",
        "gpu-reset-required",
        "gpu-reboot-required",
        "gpu-missing",
    }
)
GPU_CLASS = "gpu-a100-8x"  # the simulated GPU class: the one the pack expects ECC on for


def gpu_host(tmp: Path, bdf: str, *, hardware_class: str = "x9drt-lab", hostname: str = "dt-host-01") -> SnapHost:
    """A host whose PCI bus holds one NVIDIA 3D controller at `bdf` (sysfs form, 0000:00:1e.0)."""
    host = SnapHost(tmp, hostname=hostname, hardware_class=hardware_class)
    if hardware_class == GPU_CLASS:  # the class as configured, less its microcode (the harness's CPU is a laptop's)
        host.baselines = f"version: 1\nclasses:\n  {GPU_CLASS}: {{error_reporting: cmci}}\n"
    host.file(f"/sys/bus/pci/devices/{bdf}/vendor", "0x10de\n")
    host.file(f"/sys/bus/pci/devices/{bdf}/class", "0x030200\n")
    return host


def nvidia_smi(host: SnapHost, xml: str) -> None:
    host.snap.command(gpu_collector.NVIDIA_SMI, xml)


def field(xml: str, tag: str, value: str) -> str:
    """The document with the first <tag>'s text set to value (the rest as captured)."""
    changed, count = re.subn(rf"<{tag}>[^<]*</{tag}>", f"<{tag}>{value}</{tag}>", xml, count=1)
    assert count == 1, tag
    return changed


def cycles(host: SnapHost, xml: str, minutes: range) -> list[Report]:
    reports = []
    for minute in minutes:
        nvidia_smi(host, xml)
        reports.append(host.cycle(minute))
    assert all(r.observations.gpu is not None for r in reports), reports[-1].collectors["gpu"]
    return reports


@case("an A10G with 4 uncorrectable rows remapped and the remap pending: reset that GPU", "gpu-row-remap-pending")
def remap_pending(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = gpu_host(tmp, "0000:00:1e.0")
    xml = field(field(sample(A10G), "remapped_row_unc", "4"), "remapped_row_pending", "Yes")
    reports = cycles(host, xml, range(0, 10, 5))
    gpu = reports[-1].observations.gpu
    assert gpu is not None
    assert gpu.gpus[0].memory_repair.remap_pending is True
    return host, reports, Expect("gpu-row-remap-pending", "reset_gpu", never=GPU_RULES - {"gpu-row-remap-pending"})


@case("an A10G whose row remapping failed (no spare rows): drain and a ticket to replace it", "gpu-row-remap-failure")
def remap_failure(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = gpu_host(tmp, "0000:00:1e.0")
    xml = field(sample(A10G), "remapped_row_failure", "Yes")
    xml = field(field(xml, "row_remapper_histogram_max", "191 bank(s)"), "row_remapper_histogram_none", "1 bank(s)")
    reports = cycles(host, xml, range(0, 10, 5))
    expect = Expect(
        "gpu-row-remap-failure",
        "drain",
        title=r"Replace GPU gpu0 00000000:00:1E\.0 .*serial 0000000000000.*no spare rows",
        part_type="gpu",
        serial="0000000000000",
        never=frozenset({"gpu-row-remap-pending"}),
        also=lambda _s, _r, ticket: _names_the_gpu(ticket),
    )
    return host, reports, expect


def _names_the_gpu(ticket: object) -> None:
    part = (getattr(ticket, "evidence", None) or {}).get("part") or {}
    assert part["bdf"] == "00000000:00:1E.0", part
    assert part["uuid"] == "GPU-9a9a6c50-2a47-2f51-a902-b82c3b127e94", part
    assert (part["index"], part["model"], part["vbios"]) == (0, "NVIDIA A10G", "94.02.75.00.01"), part


@case("a P100 whose aggregate double-bit count grows from 0 to 2: a ticket, host in service", "gpu-ecc-uncorrected")
def ecc_growth(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = gpu_host(tmp, "0000:00:04.0")
    xml = sample(P100)
    reports = cycles(host, xml, range(0, 10, 5))
    # the aggregate block's double_bit total (the second <total> after <aggregate>): 2 new DBEs
    head, _, tail = xml.partition("<aggregate>")
    tail = re.sub(r"(<double_bit>.*?<total>)0(</total>)", r"\g<1>2\g<2>", tail, count=1, flags=re.S)
    reports += cycles(host, head + "<aggregate>" + tail, range(10, 15, 5))
    gpu = reports[-1].observations.gpu
    assert gpu is not None
    assert gpu.gpus[0].ecc.aggregate_uncorrected == 2
    expect = Expect(
        "gpu-ecc-uncorrected",
        "ticket",
        title=r"GPU gpu0 00000000:00:04\.0 .*serial 0324217145110.*2 new uncorrectable",
        part_type="gpu",
        serial="0324217145110",
    )
    return host, reports, expect


@case(
    "an RTX 4000 Ada (v13) at T.Limit -3 C, a degree past its slowdown: the title says so in v13's terms",
    "gpu-temperature-slowdown",
)
def hot_gpu_v13(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    """Review #8: the title read "at 2 C, past its slowdown None C" (v13 gives a T.Limit margin, no threshold)."""
    host = gpu_host(tmp, "0000:06:00.0")
    reports = cycles(host, field(sample(RTX_V13), "gpu_temp_tlimit", "-3 C"), range(0, 20, 5))
    title = r"GPU gpu0 00000000:06:00\.0 on dt-host-01 at 38 C, 1 C past its slowdown \(T\.Limit -3\.0 C"

    def _no_none(session: object, remediation: object, ticket: object) -> None:
        assert "None" not in getattr(ticket, "title", "None"), getattr(ticket, "title", None)

    return host, reports, Expect("gpu-temperature-slowdown", "ticket", title=title, also=_no_none)  # type: ignore[arg-type]


def reset_status(xml: str, *, required: str = "No", drain: str = "No") -> str:
    return field(field(xml, "reset_required", required), "drain_and_reset_recommended", drain)


@case("an A100 under MIG that asks for a reset (Reset Required: Yes): reset that GPU", "gpu-reset-required")
def mig_reset_required(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    """Review #6: under MIG the remapped rows read N/A, and the driver's reset flags were parsed and never used."""
    host = gpu_host(tmp, "0000:01:00.0", hardware_class=GPU_CLASS)
    reports = cycles(host, reset_status(sample(A100_MIG), required="Yes"), range(0, 10, 5))
    return host, reports, Expect("gpu-reset-required", "reset_gpu", never=GPU_RULES - {"gpu-reset-required"})


@case("an RTX 4000 Ada (v13) whose recovery action is Node Reboot Required: drain and reboot", "gpu-reboot-required")
def v13_reboot_required(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = gpu_host(tmp, "0000:06:00.0")
    reports = cycles(host, field(sample(RTX_V13), "gpu_recovery_action", "Node Reboot Required"), range(0, 10, 5))
    return host, reports, Expect("gpu-reboot-required", "drain", never=frozenset({"gpu-reset-required"}))


def second_gpu(host: SnapHost, bdf: str, driver: str | None) -> None:
    host.file(f"/sys/bus/pci/devices/{bdf}/vendor", "0x10de\n")
    host.file(f"/sys/bus/pci/devices/{bdf}/class", "0x030200\n")
    host.file(f"/sys/bus/pci/devices/{bdf}/device", "0x2237\n")
    uevent = (f"DRIVER={driver}\n" if driver else "") + f"PCI_ID=10DE:2237\nPCI_SLOT_NAME={bdf}\n"
    host.file(f"/sys/bus/pci/devices/{bdf}/uevent", uevent)


@case("a second A10G on the PCI bus that nvidia-smi does not list: a ticket naming its address", "gpu-missing")
def gpu_missing(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    """Review #11: it was only a problem note of the collector, and after a reboot nothing else is left of it."""
    host = gpu_host(tmp, "0000:00:1e.0")
    second_gpu(host, "0000:00:1f.0", "nvidia")
    reports = cycles(host, sample(A10G), range(0, 20, 5))
    expect = Expect(
        "gpu-missing",
        "ticket",
        title=r"GPU 0000:00:1f\.0 \(0x2237\) on dt-host-01 is on the PCI bus but nvidia-smi does not list it",
        part_type="gpu",
        part="0000:00:1f.0",
        never_actions=frozenset({"drain", "reset_gpu", "reboot"}),
    )
    return host, reports, expect


@case("a second NVIDIA GPU bound to vfio-pci (given to a VM): nvidia-smi does not list it, and that is right", None)
def gpu_passed_through(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = gpu_host(tmp, "0000:00:1e.0")
    second_gpu(host, "0000:00:1f.0", "vfio-pci")
    reports = cycles(host, sample(A10G), range(0, 20, 5))
    assert reports[-1].observations.gpu is not None
    assert reports[-1].observations.gpu.missing == []
    return host, reports, Expect(None, never=GPU_RULES)


@case("a P100 with 3 aggregate single-bit errors, nothing growing, nothing pending: nothing to do", None)
def p100_history_only(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = gpu_host(tmp, "0000:00:04.0")
    reports = cycles(host, sample(P100), range(0, 30, 10))
    return host, reports, Expect(None, never=GPU_RULES)


@case("a P100 with a page retirement pending: reset that GPU", "gpu-retired-pages-pending")
def retirement_pending(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = gpu_host(tmp, "0000:00:04.0")
    xml = field(sample(P100), "pending_retirement", "Yes")
    reports = cycles(host, xml, range(0, 10, 5))
    return host, reports, Expect("gpu-retired-pages-pending", "reset_gpu")


@case("an A100 under MIG with remapped rows and retired pages N/A: unknown, never a signal", None)
def mig_not_available(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = gpu_host(tmp, "0000:01:00.0", hardware_class=GPU_CLASS)
    reports = cycles(host, sample(A100_MIG), range(0, 30, 10))
    repair = reports[-1].observations.gpu.gpus[0].memory_repair  # type: ignore[union-attr]
    assert (repair.remap_pending, repair.remap_failure, repair.remapped_uncorrected) == (None, None, None)
    return host, reports, Expect(None, never=GPU_RULES)


@case("an A10G at 96 C, past its 95 C slowdown, for 15 minutes: an airflow ticket", "gpu-temperature-slowdown")
def hot_gpu(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = gpu_host(tmp, "0000:00:1e.0")
    xml = field(sample(A10G), "gpu_temp", "96 C")
    reports = cycles(host, xml, range(0, 20, 5))
    return (
        host,
        reports,
        Expect("gpu-temperature-slowdown", "ticket", title=r"at 96 C, past its slowdown 95", part_type="gpu"),
    )


@case("an A10G at 94 C, a degree under its slowdown: no ticket", None)
def warm_gpu(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = gpu_host(tmp, "0000:00:1e.0")
    reports = cycles(host, field(sample(A10G), "gpu_temp", "94 C"), range(0, 30, 5))
    return host, reports, Expect(None, never=GPU_RULES)


@case("an A10G held down by the power brake for 40 minutes: a ticket naming the reason", "gpu-hardware-slowdown")
def power_brake(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = gpu_host(tmp, "0000:00:1e.0")
    xml = field(sample(A10G), "clocks_throttle_reason_hw_power_brake_slowdown", "Active")
    reports = cycles(host, xml, range(0, 45, 5))
    return host, reports, Expect("gpu-hardware-slowdown", "ticket", title=r"hw_power_brake_slowdown", part_type="gpu")


@case(
    "the RTX 4000 Ada (v13) with ECC disabled on a class that expects ECC on: a configuration ticket",
    "gpu-ecc-disabled",
)
def ecc_off_where_expected(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = gpu_host(tmp, "0000:06:00.0", hardware_class=GPU_CLASS)
    reports = cycles(host, sample(RTX_V13), range(0, 10, 5))
    return host, reports, Expect("gpu-ecc-disabled", "ticket", title=r"ECC is Disabled", part_type="gpu")


@case("the RTX 4000 Ada (v13) with ECC disabled and every counter N/A on a class with no ECC policy: nothing", None)
def ecc_off_elsewhere(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = gpu_host(tmp, "0000:06:00.0")
    reports = cycles(host, sample(RTX_V13), range(0, 30, 10))
    ecc = reports[-1].observations.gpu.gpus[0].ecc  # type: ignore[union-attr]
    assert (ecc.aggregate_uncorrected, ecc.volatile_uncorrected) == (None, None)  # N/A: unknown, not 0
    return host, reports, Expect(None, never=GPU_RULES)


@case("a host with no NVIDIA device: the collector says so, nvidia-smi never runs, no GPU rule", None)
def no_gpu(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    host.snap.command(gpu_collector.NVIDIA_SMI, field(sample(A10G), "remapped_row_pending", "Yes"))
    reports = [host.cycle(minute) for minute in range(0, 10, 5)]
    run = reports[-1].collectors["gpu"]
    assert (run.status, reports[-1].observations.gpu) == ("unavailable", None), run
    assert "no NVIDIA GPU" in (run.reason or "")
    return host, reports, Expect(None, never=GPU_RULES)
