"""nvidia-smi: the XML parser on every real `nvidia-smi -q -x` sample (v11 legacy and Ampere layouts, v12
under MIG, v13 with ECC off), the text parser on the real A10 `nvidia-smi -q`, and the `gpu` collector
through snapshots (no NVIDIA device, no nvidia-smi, a hang, a GPU the driver lost)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.samples import SnapshotBuilder, sample, sample_names
from checker.collectors import gpu as collector
from checker.parsers.nvidia_smi import parse_nvidia_smi_text, parse_nvidia_smi_xml
from checker.schemas import Gpu, GpuState

P100 = "gpu/nvidia-smi-q-x-tesla-p100-pcie-aggregate-sbe-3-retired-pages-passthrough.xml"
A10G = "gpu/nvidia-smi-q-x-a10g-remapped-rows-histogram-v11.xml"
A100_MIG = "gpu/nvidia-smi-q-x-a100-sxm4-80gb-mig-enabled-remapped-na-v12.xml"
RTX_V13 = "gpu/nvidia-smi-q-x-rtx4000-ada-v13-ecc-disabled-repair-fields.xml"
A10_TEXT = "gpu/nvidia-smi-q-a10-remapped-rows-uncorrectable-4-pending-yes.txt"
ONLY_GPU = {"gpu": collector.collect}


def only_gpu(name: str) -> Gpu:
    parsed = parse_nvidia_smi_xml(sample(name))
    assert parsed.value is not None, parsed.problems
    [gpu] = parsed.value.gpus
    return gpu


def test_every_xml_sample_parses() -> None:
    names = [n for n in sample_names("gpu") if n.endswith(".xml")]
    assert len(names) == 4
    for name in names:
        parsed = parse_nvidia_smi_xml(sample(name))
        assert parsed.value is not None
        assert len(parsed.value.gpus) == 1, name


def test_p100_legacy_single_double_bit_layout_and_page_retirement() -> None:
    gpu = only_gpu(P100)
    assert (gpu.index, gpu.bdf, gpu.serial) == (0, "00000000:00:04.0", "0324217145110")
    assert (gpu.uuid, gpu.product, gpu.vbios) == (
        "GPU-d3da8716-eaab-75db-efc1-60e88e1cd55e",
        "Tesla P100-PCIE-16GB",
        "86.00.52.00.02",
    )
    ecc = gpu.ecc
    assert (ecc.mode, ecc.layout) == ("Enabled", "legacy")
    assert (ecc.volatile_corrected, ecc.volatile_uncorrected) == (0, 0)
    assert (ecc.aggregate_corrected, ecc.aggregate_uncorrected) == (3, 0)  # the 3 SBEs the sample carries
    repair = gpu.memory_repair
    assert (repair.retired_single_bit, repair.retired_double_bit, repair.retirement_pending) == (0, 0, False)
    assert (repair.remap_pending, repair.remap_failure, repair.remapped_uncorrected) == (None, None, None)  # N/A
    assert (gpu.temperature_c, gpu.slowdown_c, gpu.shutdown_c) == (38.0, 82.0, 85.0)
    assert (gpu.power_draw_w, gpu.power_limit_w) == (26.16, 250.0)
    assert gpu.clock_event_reasons == ["gpu_idle"]


def test_a10g_ampere_layout_with_remapped_rows_and_retired_pages_na() -> None:
    gpu = only_gpu(A10G)
    assert gpu.ecc.layout == "sram_dram"
    assert (gpu.ecc.aggregate_uncorrected, gpu.ecc.aggregate_dram_uncorrected) == (0, 0)
    repair = gpu.memory_repair
    assert (repair.remapped_corrected, repair.remapped_uncorrected) == (0, 0)
    assert (repair.remap_pending, repair.remap_failure, repair.banks_without_spare) == (False, False, 0)
    assert (repair.retired_single_bit, repair.retirement_pending) == (None, None)  # N/A on Ampere
    assert (gpu.slowdown_c, gpu.shutdown_c) == (95.0, 98.0)


def test_a100_under_mig_remapped_rows_na_is_unknown_not_healthy() -> None:
    parsed = parse_nvidia_smi_xml(sample(A100_MIG))
    assert parsed.value is not None
    assert parsed.problems == ["attached_gpus says 4, the document lists 1"]  # the sample kept one of four
    [gpu] = parsed.value.gpus
    assert (gpu.mig_mode, gpu.module_id, gpu.minor_number) == ("Enabled", 4, 1)
    assert gpu.memory_repair.model_dump() == dict.fromkeys(gpu.memory_repair.model_dump())
    assert (gpu.reset_required, gpu.drain_and_reset_recommended) == (False, False)
    assert (gpu.power_draw_w, gpu.power_limit_w) == (67.03, 500.0)  # v12's gpu_power_readings
    assert (gpu.memory_temperature_c, gpu.memory_max_c) == (44.0, 95.0)


def test_v13_ecc_disabled_every_counter_na_and_tlimit_temperatures() -> None:
    gpu = only_gpu(RTX_V13)
    assert (gpu.ecc.mode, gpu.ecc.pending_mode) == ("Disabled", "Disabled")
    counters = ("volatile_corrected", "volatile_uncorrected", "aggregate_corrected", "aggregate_uncorrected")
    assert [getattr(gpu.ecc, c) for c in counters] == [None, None, None, None]
    assert gpu.serial is None  # REDACTED in the sample: no serial, never a made-up one
    assert (gpu.temperature_c, gpu.tlimit_c, gpu.slowdown_tlimit_c, gpu.slowdown_c) == (38.0, 49.0, -2.0, None)
    assert gpu.clock_event_reasons == ["gpu_idle"]  # v13's clocks_event_reasons
    assert (gpu.power_draw_w, gpu.power_limit_w) == (8.81, 70.0)  # v13: average_power_draw


def test_the_a10_text_report_reads_as_the_xml_would() -> None:
    parsed = parse_nvidia_smi_text(sample(A10_TEXT))
    assert parsed.problems == []
    state = parsed.value
    assert state is not None
    assert (state.driver_version, state.attached_gpus) == ("535.129.03", 1)
    [gpu] = state.gpus
    assert (gpu.bdf, gpu.serial, gpu.product, gpu.vbios) == (
        "00000000:07:00.0",
        "1324521052681",
        "NVIDIA A10",
        "94.02.5C.00.04",
    )
    assert gpu.uuid == "GPU-73d12ef7-f589-f867-4259-c7090ab44736"
    repair = gpu.memory_repair
    assert (repair.remapped_corrected, repair.remapped_uncorrected, repair.remap_pending) == (0, 4, True)
    assert repair.remap_failure is False
    assert (gpu.ecc.mode, gpu.ecc.aggregate_uncorrected) == ("Enabled", 0)  # as captured (see MANIFEST)
    assert (gpu.temperature_c, gpu.slowdown_c, gpu.shutdown_c) == (33.0, 98.0, 101.0)
    assert (gpu.reset_required, gpu.drain_and_reset_recommended) == (False, None)
    assert gpu.clock_event_reasons == ["gpu_idle"]
    assert (gpu.power_draw_w, gpu.power_limit_w) == (43.89, 150.0)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "not nvidia-smi XML"),
        ("<html><body/></html>", "root element is <html>"),
        ('<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "b">]><nvidia_smi_log/>', "declares entities"),
        (sample(A10G)[:900], "not nvidia-smi XML"),
    ],
)
def test_what_is_not_nvidia_smi_xml_is_said(text: str, problem: str) -> None:
    parsed = parse_nvidia_smi_xml(text)
    assert parsed.value is None
    assert problem in parsed.problems[0]


def test_the_text_parser_refuses_other_text() -> None:
    parsed = parse_nvidia_smi_text(sample(A10G))
    assert parsed.value is None
    assert "NVSMI LOG" in parsed.problems[0]


# -- the collector --------------------------------------------------------------------------------


def gpu_snapshot(tmp: Path, *, bdf: str = "0000:00:1e.0", pci_class: str = "0x030200") -> SnapshotBuilder:
    snap = SnapshotBuilder(tmp)
    snap.file(f"/sys/bus/pci/devices/{bdf}/vendor", "0x10de\n")
    snap.file(f"/sys/bus/pci/devices/{bdf}/class", f"{pci_class}\n")
    snap.file("/sys/bus/pci/devices/0000:00:00.0/vendor", "0x8086\n")
    return snap


def test_the_collector_reads_nvidia_smi_on_a_host_with_an_nvidia_gpu(tmp_path: Path) -> None:
    snap = gpu_snapshot(tmp_path).command(collector.NVIDIA_SMI, sample(A10G))
    report = snap.cycle(collectors=ONLY_GPU)
    run = report.collectors["gpu"]
    assert (run.status, run.source, run.problems) == ("ok", "nvidia-smi", [])
    assert isinstance(report.observations.gpu, GpuState)
    assert report.observations.gpu.gpus[0].bdf == "00000000:00:1E.0"


def test_no_nvidia_device_no_process(tmp_path: Path) -> None:
    snap = SnapshotBuilder(tmp_path)
    snap.file("/sys/bus/pci/devices/0000:00:00.0/vendor", "0x8086\n")
    snap.file("/sys/bus/pci/devices/0000:3b:00.0/vendor", "0x10de\n")  # an NVSwitch or bridge, not a GPU
    snap.file("/sys/bus/pci/devices/0000:3b:00.0/class", "0x068000\n")
    report = snap.cycle(collectors=ONLY_GPU)
    run = report.collectors["gpu"]
    assert run.status == "unavailable"
    assert run.reason == "no NVIDIA GPU (0x10de display controller) in /sys/bus/pci/devices"
    assert report.observations.gpu is None


def test_an_nvidia_gpu_without_nvidia_smi(tmp_path: Path) -> None:
    report = gpu_snapshot(tmp_path).cycle(collectors=ONLY_GPU)
    run = report.collectors["gpu"]
    assert run.status == "unavailable"
    assert run.reason == "1 NVIDIA GPU(s) on the PCI bus but nvidia-smi is not installed"


def test_a_hung_nvidia_smi_is_the_collectors_timeout(tmp_path: Path) -> None:
    snap = gpu_snapshot(tmp_path).command(collector.NVIDIA_SMI, "", rc=-9, timed_out=True, stderr="timed out")
    run = snap.cycle(collectors=ONLY_GPU).collectors["gpu"]
    assert run.status == "timeout"
    assert "nvidia-smi -q -x" in (run.reason or "")


def test_a_driver_that_cannot_talk_to_the_gpu_is_an_error_with_its_words(tmp_path: Path) -> None:
    said = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
    snap = gpu_snapshot(tmp_path).command(collector.NVIDIA_SMI, "", rc=9, stderr=said)
    run = snap.cycle(collectors=ONLY_GPU).collectors["gpu"]
    assert run.status == "error"
    assert said in (run.reason or "")


def test_a_gpu_on_the_bus_that_nvidia_smi_no_longer_lists_is_a_problem(tmp_path: Path) -> None:
    snap = gpu_snapshot(tmp_path).command(collector.NVIDIA_SMI, sample(A10G))
    snap.file("/sys/bus/pci/devices/0000:9b:00.0/vendor", "0x10de\n")  # fallen off: sysfs still lists it
    snap.file("/sys/bus/pci/devices/0000:9b:00.0/class", "0x030200\n")
    run = snap.cycle(collectors=ONLY_GPU).collectors["gpu"]
    assert run.status == "ok"
    assert run.problems == ["on the PCI bus but not in nvidia-smi: 0000:9b:00.0"]


def test_recovery_action_and_the_remapper_histogram_are_read() -> None:
    """Review #4 and #6: the bank histogram for the reset's record, v13's gpu_recovery_action for the signal."""
    from bench.samples import sample as read
    from checker.parsers.nvidia_smi import parse_nvidia_smi_xml as parse

    a10g = parse(read("gpu/nvidia-smi-q-x-a10g-remapped-rows-histogram-v11.xml")).value
    assert a10g is not None
    histogram = a10g.gpus[0].memory_repair.bank_histogram
    assert histogram == {"max": 192, "high": 0, "partial": 0, "low": 0, "none": 0}
    v13 = read("gpu/nvidia-smi-q-x-rtx4000-ada-v13-ecc-disabled-repair-fields.xml")
    parsed = parse(v13.replace("<gpu_recovery_action>None<", "<gpu_recovery_action>Drain and Reset<")).value
    assert parsed is not None
    assert parsed.gpus[0].recovery_action == "Drain and Reset"
