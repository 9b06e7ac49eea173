"""GPU signals from the real nvidia-smi samples (remediator/derive/gpu.py) and the GPU part a ticket names
(remediator/gpu_parts.py): N/A never gives a signal, growth of the aggregate uncorrected count does, and a
subject in nvidia-smi's or the kernel's PCI form finds the same GPU."""

from __future__ import annotations

import re

from bench.samples import sample
from checker.parsers.nvidia_smi import parse_nvidia_smi_xml
from checker.schemas import GpuState
from remediator.derive.gpu import gpu_signals, slowdown_margin
from remediator.gpu_parts import find_gpu, gpu_part, pci_address, same_device

A10G = "gpu/nvidia-smi-q-x-a10g-remapped-rows-histogram-v11.xml"
P100 = "gpu/nvidia-smi-q-x-tesla-p100-pcie-aggregate-sbe-3-retired-pages-passthrough.xml"
A100_MIG = "gpu/nvidia-smi-q-x-a100-sxm4-80gb-mig-enabled-remapped-na-v12.xml"
RTX_V13 = "gpu/nvidia-smi-q-x-rtx4000-ada-v13-ecc-disabled-repair-fields.xml"


def state(xml: str) -> GpuState:
    parsed = parse_nvidia_smi_xml(xml)
    assert parsed.value is not None
    return parsed.value


def with_field(xml: str, tag: str, value: str) -> str:
    return re.sub(rf"<{tag}>[^<]*</{tag}>", f"<{tag}>{value}</{tag}>", xml, count=1)


def test_healthy_and_na_samples_give_no_signal() -> None:
    for name in (A10G, P100, A100_MIG):
        signals, _ = gpu_signals(state(sample(name)), None)
        assert signals == [], name


def test_ecc_disabled_is_a_fact_signal_and_nothing_else() -> None:
    signals, memory = gpu_signals(state(sample(RTX_V13)), None)
    assert [(s.kind, s.subject) for s in signals] == [("gpu_ecc_disabled", "gpu0 00000000:06:00.0")]
    assert signals[0].detail["ecc_mode"] == "Disabled"
    assert memory is None  # N/A counters: nothing to remember


def test_remap_pending_names_the_gpu() -> None:
    xml = with_field(with_field(sample(A10G), "remapped_row_unc", "4"), "remapped_row_pending", "Yes")
    [signal], _ = gpu_signals(state(xml), None)
    assert (signal.kind, signal.subject, signal.value) == ("gpu_remap_pending", "gpu0 00000000:00:1E.0", 1.0)
    detail = signal.detail
    assert (detail["index"], detail["bdf"], detail["serial"]) == (0, "00000000:00:1E.0", "0000000000000")
    assert (detail["uuid"], detail["product"]) == ("GPU-9a9a6c50-2a47-2f51-a902-b82c3b127e94", "NVIDIA A10G")
    assert detail["remapped_uncorrected"] == 4


def test_remap_failure_and_retirement_pending() -> None:
    failure = with_field(sample(A10G), "remapped_row_failure", "Yes")
    assert [s.kind for s in gpu_signals(state(failure), None)[0]] == ["gpu_remap_failure"]
    pending = with_field(sample(P100), "pending_retirement", "Yes")
    assert [s.kind for s in gpu_signals(state(pending), None)[0]] == ["gpu_retired_pages_pending"]


def test_uncorrected_ecc_growth_only_after_the_first_sight() -> None:
    grown = re.sub(r"(<aggregate>.*?<double_bit>.*?<total>)0(</total>)", r"\g<1>2\g<2>", sample(P100), flags=re.S)
    first, memory = gpu_signals(state(grown), None)
    assert first == []  # a count seen for the first time is history
    assert memory == {"GPU-d3da8716-eaab-75db-efc1-60e88e1cd55e": 2}
    again, memory = gpu_signals(state(grown), memory)
    assert again == []
    more = re.sub(r"(<aggregate>.*?<double_bit>.*?<total>)0(</total>)", r"\g<1>5\g<2>", sample(P100), flags=re.S)
    [signal], memory = gpu_signals(state(more), memory)
    assert (signal.kind, signal.value, signal.detail["aggregate_uncorrected"]) == ("gpu_ecc_uncorrected", 3.0, 5)
    # a section absent this time (the collector timed out) keeps what was known
    assert gpu_signals(None, memory) == ([], memory)


def test_temperature_past_slowdown_and_hardware_slowdown() -> None:
    hot = with_field(sample(A10G), "gpu_temp", "97 C")
    [signal], _ = gpu_signals(state(hot), None)
    assert (signal.kind, signal.value, signal.detail["over_slowdown_c"]) == ("gpu_temperature", 97.0, 2.0)
    under = with_field(sample(A10G), "gpu_temp", "94 C")
    assert gpu_signals(state(under), None)[0] == []
    brake = with_field(sample(A10G), "clocks_throttle_reason_hw_thermal_slowdown", "Active")
    [slowdown], _ = gpu_signals(state(brake), None)
    assert (slowdown.kind, slowdown.detail["reasons"]) == ("gpu_clock_slowdown", ["hw_thermal_slowdown"])
    # the SW power cap and idleness are policy, not a fault
    capped = with_field(sample(A10G), "clocks_throttle_reason_sw_power_cap", "Active")
    assert gpu_signals(state(capped), None)[0] == []


def test_v13_tlimit_margin() -> None:
    [gpu] = state(sample(RTX_V13)).gpus
    assert slowdown_margin(gpu) == 51.0  # T.Limit 49 C, slowdown at -2 C
    hot = with_field(sample(RTX_V13), "gpu_temp_tlimit", "-3 C")
    signals, _ = gpu_signals(state(hot), None)
    assert "gpu_temperature" in [s.kind for s in signals]


def test_a_subject_in_either_pci_form_finds_the_gpu() -> None:
    gpus = [g.model_dump(mode="json") for g in state(sample(A10G)).gpus]
    assert same_device(pci_address("PCI:0000:00:1e"), pci_address("00000000:00:1E.0"))
    assert find_gpu("gpu0 00000000:00:1E.0", gpus) is gpus[0]
    assert find_gpu("PCI:0000:00:1e", gpus) is gpus[0]  # the kernel's Xid form, no function
    assert find_gpu("GPU-9a9a6c50-2a47-2f51-a902-b82c3b127e94", gpus) is gpus[0]
    assert find_gpu("PCI:0000:9b:00", gpus) is None  # another address is never this GPU by its index
    assert find_gpu("gpu0", gpus) is gpus[0]


def test_the_part_names_index_bdf_uuid_serial_product_vbios() -> None:
    observations = {"gpu": state(sample(P100)).model_dump(mode="json")}
    part = gpu_part("gpu0 00000000:00:04.0", observations)
    assert (part["index"], part["bdf"], part["serial"]) == (0, "00000000:00:04.0", "0324217145110")
    assert (part["uuid"], part["model"], part["vbios"]) == (
        "GPU-d3da8716-eaab-75db-efc1-60e88e1cd55e",
        "Tesla P100-PCIE-16GB",
        "86.00.52.00.02",
    )
    assert part["part_number"] == "900-2H400-6300-031"
    # without the section (nvidia-smi hung): what the signal's detail gave, and a note saying so
    bare = gpu_part("PCI:0000:9b:00", {}, {"uuid": "GPU-509665ad-b600-ac93-3616-d754b23d636d", "serial": "165"})
    assert (bare["bdf"], bare["uuid"], bare["serial"]) == (
        "0000:9b:00",
        "GPU-509665ad-b600-ac93-3616-d754b23d636d",
        "165",
    )
    assert "not in the report" in bare["note"]


def test_the_gpu_asking_for_a_reset_is_a_signal() -> None:
    """Review #6: reset_required / drain_and_reset_recommended (v12) and gpu_recovery_action (v13) gave no signal;
    under MIG (the A100 sample: remapped rows N/A) they are the only sign."""
    mig = sample(A100_MIG)
    for tag in ("reset_required", "drain_and_reset_recommended"):
        [signal], _ = gpu_signals(state(with_field(mig, tag, "Yes")), None)
        assert (signal.kind, signal.subject, signal.detail["recovery"]) == (
            "gpu_reset_required",
            "gpu0 00000000:01:00.0",
            "reset",
        )
        assert (signal.detail["index"], signal.detail["mig_mode"]) == (0, "Enabled")
    v13 = sample(RTX_V13)
    assert state(v13).gpus[0].recovery_action is None  # the sample says None: nothing asked
    for named, recovery in (
        ("GPU Reset Required", "reset"),
        ("Drain and Reset", "reset"),
        ("Node Reboot Required", "reboot"),
    ):
        signals, _ = gpu_signals(state(with_field(v13, "gpu_recovery_action", named)), None)
        [asks] = [s for s in signals if s.kind == "gpu_reset_required"]
        assert (asks.detail["recovery"], asks.detail["recovery_action"]) == (recovery, named)
    signals, _ = gpu_signals(state(with_field(v13, "gpu_recovery_action", "Drain P2P")), None)
    assert "gpu_reset_required" not in [s.kind for s in signals]


def test_v13_heat_title_words_name_the_margin_not_a_missing_threshold() -> None:
    """Review #8: on v13 the title read 'at 2 C, past its slowdown None C'."""
    signals, _ = gpu_signals(state(with_field(sample(RTX_V13), "gpu_temp_tlimit", "-4 C")), None)
    [hot] = [s for s in signals if s.kind == "gpu_temperature"]
    assert hot.detail["reading"] == "at 38 C, 2 C past its slowdown (T.Limit -4.0 C, slowdown at T.Limit -2.0 C)"
    assert (hot.detail["margin_c"], hot.detail["tlimit_c"], hot.detail["slowdown_tlimit_c"]) == (-2.0, -4.0, -2.0)
    [a10g], _ = gpu_signals(state(with_field(sample(A10G), "gpu_temp", "97 C")), None)
    assert a10g.detail["reading"] == "at 97 C, past its slowdown 95 C"


def test_one_part_name_for_a_gpu_whichever_source_names_it() -> None:
    """Review #10: Xid signals for a GPU nvidia-smi did not list used 0000:19:00.0, nvidia-smi's rules
    `gpu0 00000000:19:00.0`; the ticket's part (dedup key) split."""
    from remediator.gpu_parts import locator, ticket_part

    forms = ("gpu0 00000000:19:00.0", "0000:19:00.0", "PCI:0000:19:00", "gpu3 00000000:19:00.0")
    assert {locator(f) for f in forms} == {"0000:19:00.0"}
    assert ticket_part("gpu", "gpu0 00000000:4E:00.0") == "0000:4e:00.0"
    assert ticket_part("dimm", "CPU0_DIMM_A1") == "CPU0_DIMM_A1"
    observations = {"gpu": state(sample(P100)).model_dump(mode="json")}
    named = gpu_part("gpu0 00000000:00:04.0", observations)
    bare = gpu_part("0000:00:04.0", {}, {"serial": "0324217145110"})
    assert named["id"] == bare["id"] == "0000:00:04.0"


def test_a_gpu_on_the_bus_that_nvidia_smi_does_not_list_is_a_signal() -> None:
    """Review #11: it was only the collector's problem note."""
    from checker.sections.gpu import MissingGpu

    listed = state(sample(A10G))
    listed.missing = [MissingGpu(bdf="0000:00:1f.0", device_id="0x2237", driver="nvidia")]
    [signal], _ = gpu_signals(listed, None)
    assert (signal.kind, signal.subject, signal.value) == ("gpu_missing", "0000:00:1f.0", 1.0)
    assert signal.detail == {"bdf": "0000:00:1f.0", "device_id": "0x2237", "driver": "nvidia", "listed": 1}
