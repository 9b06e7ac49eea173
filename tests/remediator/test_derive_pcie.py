"""PCIe signals: links judged against both ends (the real sysfs and lspci samples), AER counter deltas with
resets and reboots, and one source counting a host's AER errors."""

from __future__ import annotations

from bench.samples import read_ttar, sample
from checker.parsers.pcie import device_from_sysfs, parse_lspci_vvv
from checker.schemas import PcieDevice, PcieState, RasAerEvent, RasdaemonState
from remediator.derive.pcie import bandwidth, link_signals
from tests.builders.observations import Deriver, at, event, kernel_log, of, report

TTAR = "pcie/sysfs-pci-current-max-link-speed-width-aer-counters-extract.ttar"
LSPCI = "pcie/lspci-vvv-dell-h100-server-downgraded-speed-and-width-extract.txt"
NVME = "0000:01:00.0"


def real_tree(**overrides: dict[str, str]) -> PcieState:
    """The real ttar's four functions, with some of their files replaced."""
    files = read_ttar(sample(TTAR), "fixtures/sys/devices/")
    functions: dict[str, dict[str, str]] = {}
    parents: dict[str, str | None] = {}
    for path, text in files.items():
        parts = path.split("/")
        functions.setdefault(parts[-2], {})[parts[-1]] = text
        parents[parts[-2]] = parts[-3] if parts[-3].startswith("0000:") else None
    devices = []
    for bdf, own in functions.items():
        device = device_from_sysfs(bdf, {**own, **overrides.get(bdf, {})}, parent=parents[bdf]).value
        assert device is not None
        devices.append(device)
    return PcieState(source="sysfs", aer_counters=True, devices=devices)


def counters(total: int) -> dict[str, dict[str, str]]:
    return {NVME: {"aer_dev_correctable": f"RxErr {total}\nTOTAL_ERR_COR {total}\n"}}


def test_the_real_tree_trains_to_the_lesser_end_everywhere() -> None:
    """Root port 00:02.1 (x8) at x4 to a x4 NVMe, 00:03.0 (x16) at x8 to a x8 HBA: no fault."""
    assert link_signals(real_tree()) == []


def test_a_narrower_nvme_link_is_downtrained_with_its_names() -> None:
    narrow = {"current_link_width": "2\n"}
    (signal,) = link_signals(real_tree(**{NVME: narrow, "0000:00:02.1": narrow}))
    assert (signal.kind, signal.subject, signal.value) == ("pcie_link_downtrained", NVME, 50.0)
    detail = signal.detail
    assert (detail["device"], detail["vendor_device"], detail["port"]) == ("NVMe", "c0a9:540a", "0000:00:02.1")
    assert (detail["width"], detail["capable_width"], detail["port_max_width"]) == (2, 4, 8)
    assert (detail["narrower"], detail["slower"]) == (True, False)


def test_lspci_alone_does_not_judge_a_link_without_its_partner() -> None:
    """The extract's (downgraded) annotations compare with the function's own LnkCap only: the Gen5 switch
    port at 16 GT/s feeds a Gen4 card; the BCM5720 and the root port have no partner in the output."""
    assert link_signals(PcieState(source="lspci", devices=parse_lspci_vvv(sample(LSPCI)).value)) == []


def test_a_gen5_port_feeding_a_gen4_card_is_no_fault_but_a_gen4_card_at_gen3_is() -> None:
    devices = parse_lspci_vvv(sample(LSPCI)).value
    port = next(d for d in devices if d.bdf == "0000:17:03.0")
    card = PcieDevice(
        bdf="0000:1b:00.0", parent=port.bdf, class_code="020000", speed_gts=16.0, max_speed_gts=16.0, width=16,
        max_width=16,
    )  # fmt: skip
    assert link_signals(PcieState(source="lspci", devices=[port, card])) == []
    slow = card.model_copy(update={"speed_gts": 8.0})
    (signal,) = link_signals(PcieState(source="lspci", devices=[port, slow]))
    assert signal.detail["slot"] == "40"  # the port's slot: the card sits in it
    assert signal.value == round(100 * (1 - bandwidth(8.0, 16) / bandwidth(16.0, 16)), 1)


def test_an_idle_gpu_at_a_lower_speed_is_not_downtrained_but_a_narrower_one_is() -> None:
    port = PcieDevice(
        bdf="0000:18:00.0", class_code="060400", speed_gts=2.5, max_speed_gts=32.0, width=16, max_width=16
    )
    gpu = PcieDevice(
        bdf="0000:19:00.0", parent=port.bdf, class_code="030200", speed_gts=2.5, max_speed_gts=32.0, width=16,
        max_width=16,
    )  # fmt: skip
    assert link_signals(PcieState(source="sysfs", devices=[port, gpu])) == []
    narrow = gpu.model_copy(update={"width": 8})
    (signal,) = link_signals(PcieState(source="sysfs", devices=[port, narrow]))
    assert signal.detail["device"] == "GPU"


def test_counter_deltas_reset_and_reboot() -> None:
    run = Deriver()
    assert of(run(report(at(0), pcie=real_tree(**counters(40)))), "device_event_count") == []  # the baseline
    (first,) = of(run(report(at(10), pcie=real_tree(**counters(70)))), "device_event_count")
    assert (first.subject, first.value, first.detail["new"], first.detail["source"]) == (
        NVME,
        30,
        30,
        "sysfs aer_dev_*",
    )
    assert first.detail["types"] == {"correctable:RxErr": 70}
    assert of(run(report(at(20), pcie=real_tree(**counters(70)))), "device_event_count") == []  # nothing new
    (reset,) = of(run(report(at(30), pcie=real_tree(**counters(5)))), "device_event_count")  # went down: a reset
    assert (reset.detail["new"], reset.value) == (5, 35)
    (rebooted,) = of(run(report(at(40), boot="boot-2", pcie=real_tree(**counters(8)))), "device_event_count")
    assert (rebooted.detail["new"], rebooted.value) == (8, 43)  # since the new boot: all new


def test_with_a_baseline_the_counters_count_and_the_kernel_log_does_not() -> None:
    aer = [f"pcieport {NVME}: AER: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)"]
    run = Deriver()
    first = run(
        report(at(0), pcie=real_tree(), kernel_log=kernel_log(event("pcie_aer_corrected", 1, at(0), NVME, aer)))
    )
    (logged,) = of(first, "device_event_count")  # no baseline yet: the kernel log counts
    assert "source" not in logged.detail
    second = run(
        report(
            at(10),
            pcie=real_tree(**counters(1)),
            kernel_log=kernel_log(event("pcie_aer_corrected", 2, at(9), NVME, aer)),
        )
    )
    (counted,) = of(second, "device_event_count")
    # the counter's one error, not again the logged one ; the error the log counted before the baseline joins
    # the counters' count: one count per link, not two each below the threshold (review S9)
    assert (counted.detail["source"], counted.value, counted.detail["new"]) == ("sysfs aer_dev_*", 2, 1)
    assert counted.detail["lines"] == aer  # the logged record as evidence


def test_with_a_baseline_rasdaemons_rows_are_not_counted_again() -> None:
    """rasdaemon records the same errors the counters count: its rows move their cursor, the counters count."""
    rows = [
        RasAerEvent(id=n, timestamp=None, dev_name=NVME, err_type="Corrected", err_msg="Receiver Error")
        for n in (1, 2, 3)
    ]
    run = Deriver()
    run(report(at(0), pcie=real_tree(), rasdaemon=RasdaemonState(aer_events=rows[:1], last_ids={"aer_event": 1})))
    signals = run(
        report(
            at(10),
            pcie=real_tree(**counters(2)),
            rasdaemon=RasdaemonState(aer_events=rows[1:], last_ids={"aer_event": 3}),
        )
    )
    (counted,) = of(signals, "device_event_count")
    assert (counted.detail["source"], counted.value) == ("sysfs aer_dev_*", 2)
    assert run.memory["ras"]["aer"] == 3  # the rows' cursor moved on all the same
