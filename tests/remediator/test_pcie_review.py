"""The fixes from the sceptical review of the PCIe class (M1-M4, S1-S9, the minors). Each test named after a
review item failed on the code before the fix; the last one is a negative test the review found missing
(re-enumeration at zero), which the code before passed too.

The trees are the corpus's real sysfs extract (tests/remediator/test_derive_pcie.py `real_tree`: root port
00:02.1 above the Micron NVMe 01:00.0, root port 00:03.0 above the LSI HBA 03:00.0), the kernel logs the
corpus's real AER records (pcie/, kernel-log/), read through the real parser.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from bench.samples import SnapshotBuilder, read_ttar, sample
from checker.collectors import pcie
from checker.parsers.kernel_events import parse_kernel_log
from checker.parsers.pcie import parse_lspci_vvv, target_speed_from_config, worth_reporting
from checker.schemas import (
    Firmware,
    Identity,
    KernelLogState,
    PcieDevice,
    PcieState,
)
from remediator.derive.pcie import link_keys, link_signals
from remediator.pcie_evidence import pcie_part
from tests.builders.observations import Deriver, at, event, kernel_log, of, report
from tests.remediator.test_derive_pcie import LSPCI, NVME, TTAR, counters, real_tree

HBA = "0000:03:00.0"
HBA_PORT = "0000:00:03.0"
NEWEST = "pcie/journal-aer-ratelimit-multiple-correctable-headerof-uncorrectable-acsviol-kernel7-pve.log"
ENDPOINT = "kernel-log/dmesg-pcie-aer-nvme-endpoint-rxerr.log"
FATAL = [
    "pcieport 0000:00:1c.0: AER: Uncorrected (Fatal) error received: 0000:05:00.0",
    "nvme 0000:05:00.0: AER: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, (Receiver ID)",
    "nvme 0000:05:00.0: AER:   device [144d:a808] error status/mask=00040000/00000000",
    "nvme 0000:05:00.0: AER:    [18] MalfTLP                (First)",
]


def _log(text: str, source: str = "dmesg") -> KernelLogState:
    state = parse_kernel_log(text, source, reference=dt.datetime(2026, 9, 22, 10, tzinfo=dt.UTC)).value  # type: ignore[arg-type]
    return state.model_copy(update={"boot_id": "boot-1"})


def _uncorrected(signals: list) -> list:  # type: ignore[type-arg]
    return [s for s in of(signals, "device_event_count") if s.detail["kind"] == "pcie_aer_uncorrected"]


# -- M1: per-function suppression, never of uncorrected ------------------------------------------------------


def test_m1_a_fatal_on_a_function_the_counters_do_not_list_still_counts_and_drains() -> None:
    run = Deriver()
    run(report(at(0), pcie=real_tree()))  # the counters' baseline
    signals = run(
        report(
            at(10),
            pcie=real_tree(),
            kernel_log=kernel_log(event("pcie_aer_uncorrected", 1, at(9), "0000:05:00.0", FATAL)),
        )
    )
    (fatal,) = _uncorrected(signals)
    assert (fatal.subject, fatal.value, fatal.detail["disposition"]) == ("0000:05:00.0", 1, "drain")


def test_m1_corrected_records_of_a_function_without_counters_count_from_the_log() -> None:
    line = ["pcieport 0000:00:1c.0: AER: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)"]
    run = Deriver()
    run(report(at(0), pcie=real_tree(**counters(5))))
    signals = run(
        report(
            at(10),
            pcie=real_tree(**counters(5)),
            kernel_log=kernel_log(event("pcie_aer_corrected", 1, at(9), "0000:00:1c.0", line)),
        )
    )
    (logged,) = of(signals, "device_event_count")
    assert (logged.subject, logged.value) == ("0000:00:1c.0", 1)


def test_m1_an_uncorrected_record_of_a_counted_function_is_counted_from_the_log_too() -> None:
    run = Deriver()
    hba = {HBA: {"aer_dev_correctable": "RxErr 2\nTOTAL_ERR_COR 2\n"}}
    run(report(at(0), pcie=real_tree(**hba)))
    lines = [line.replace("0000:05:00.0", HBA) for line in FATAL]
    signals = run(
        report(
            at(10), pcie=real_tree(**hba), kernel_log=kernel_log(event("pcie_aer_uncorrected", 1, at(9), HBA, lines))
        )
    )
    (fatal,) = _uncorrected(signals)  # the function's fatal counter was read before the error: only the log has it
    assert (fatal.subject, fatal.detail["disposition"]) == (HBA, "drain")


# -- M2: a long reporting gap ---------------------------------------------------------------------------------


def test_m2_errors_over_a_three_day_gap_are_spread_over_it() -> None:
    run = Deriver()
    run(report(at(0), pcie=real_tree(**counters(10))))
    (spread,) = of(run(report(at(3 * 24 * 60), pcie=real_tree(**counters(160)))), "device_event_count")
    assert (spread.detail["new"], spread.value, spread.detail["span_s"]) == (150, 50, 3 * 24 * 3600)


# -- M3: link partners listed; a port as subject names its candidates ---------------------------------------


def test_m3_the_report_lists_the_link_partners_of_a_function_with_errors() -> None:
    tree = real_tree(**{HBA_PORT: {"aer_dev_correctable": "Timeout 3\nTOTAL_ERR_COR 3\n"}})
    assert sorted(d.bdf for d in worth_reporting(tree.devices)) == [HBA_PORT, HBA]


def test_m3_a_port_subject_is_ambiguous_with_the_device_below_it_first() -> None:
    tree = real_tree(**{HBA_PORT: {"aer_dev_correctable": "Timeout 3\nTOTAL_ERR_COR 3\n"}})
    observations = report(pcie=tree).observations.model_dump(mode="json")
    part = pcie_part(HBA_PORT, observations, [])
    assert part["ambiguous"] is True
    first, board = part["candidates"]
    assert (first["bdf"], first["device"], first["vendor_device"]) == (HBA, "SAS HBA", "1000:00ab")
    assert board["bdf"] == HBA_PORT


# -- M4: one link, one count, whichever end logged ----------------------------------------------------------


def test_m4_both_ends_counting_count_on_the_link_once() -> None:
    run = Deriver()
    run(report(at(0), pcie=real_tree()))
    both = {
        HBA_PORT: {"aer_dev_correctable": "RxErr 60\nTOTAL_ERR_COR 60\n"},
        HBA: {"aer_dev_correctable": "RxErr 60\nTOTAL_ERR_COR 60\n"},
    }
    (link,) = of(run(report(at(10), pcie=real_tree(**both))), "device_event_count")
    assert (link.subject, link.value, link.detail["reported_by"]) == (HBA, 120, [HBA_PORT, HBA])


def test_m4_the_endpoint_sample_logged_from_both_ends_is_one_subject() -> None:
    """kernel-log/dmesg-pcie-aer-nvme-endpoint-rxerr.log: root port 00:1d.0 and the NVMe 03:00.0 log one link;
    here on the real tree's port 00:03.0 above 03:00.0."""
    text = sample(ENDPOINT).replace("0000:00:1d.0", HBA_PORT)
    signals = Deriver()(report(at(0), pcie=real_tree(), kernel_log=_log(text)))
    assert link_keys(real_tree()) == {"0000:00:02.1": NVME, HBA_PORT: HBA}
    (link,) = of(signals, "device_event_count")
    assert (link.subject, link.value, link.detail["reported_by"]) == (HBA, 3, [HBA_PORT, HBA])


# -- S1: configuration faults, hot-unplug and recovered errors do not drain ----------------------------------


def test_s1_the_real_acsviol_is_a_configuration_fault() -> None:
    (acs,) = _uncorrected(Deriver()(report(at(0), kernel_log=_log(sample(NEWEST), "journal"))))
    assert (acs.detail["disposition"], acs.detail["config_only"], acs.detail["error_types"]) == (
        "config",
        True,
        ["ACSViol"],
    )


def test_s1_a_recovered_non_fatal_error_is_recovered_but_a_fatal_one_drains() -> None:
    text = (
        "[  100.000001] pcieport 0000:00:1c.0: AER: Uncorrected (Non-Fatal) error received: 0000:05:00.0\n"
        "[  100.000002] nvme 0000:05:00.0: AER: PCIe Bus Error: severity=Uncorrected (Non-Fatal), "
        "type=Transaction Layer, (Requester ID)\n"
        "[  100.000003] nvme 0000:05:00.0: AER:   device [144d:a808] error status/mask=00004000/00000000\n"
        "[  100.000004] nvme 0000:05:00.0: AER:    [14] CmpltTO                (First)\n"
        "[  100.100000] pcieport 0000:00:1c.0: AER: device recovery successful\n"
    )  # fmt: skip
    (recovered,) = _uncorrected(Deriver()(report(at(0), kernel_log=_log(text))))
    assert (recovered.detail["disposition"], recovered.detail["recovered"]) == ("recovered", True)
    fatal = text.replace("(Non-Fatal)", "(Fatal)")
    (drained,) = _uncorrected(Deriver()(report(at(0), kernel_log=_log(fatal))))
    assert drained.detail["disposition"] == "drain"


def test_s1_a_surprise_down_as_the_slot_is_unplugged_is_a_hot_unplug() -> None:
    text = (
        "[  200.000001] pcieport 0000:00:1c.0: pciehp: Slot(4): Card not present\n"
        "[  200.000002] pcieport 0000:00:1c.0: AER: PCIe Bus Error: severity=Uncorrected (Fatal), "
        "type=Data Link Layer, (Receiver ID)\n"
        "[  200.000003] pcieport 0000:00:1c.0: AER:   device [8086:a33c] error status/mask=00000020/00000000\n"
        "[  200.000004] pcieport 0000:00:1c.0: AER:    [ 5] SDES                   (First)\n"
    )  # fmt: skip
    (unplug,) = _uncorrected(Deriver()(report(at(0), kernel_log=_log(text))))
    assert unplug.detail["disposition"] == "hot_unplug"
    alone = "".join(text.splitlines(keepends=True)[1:])  # no pciehp: a fixed slot's link died
    (dead,) = _uncorrected(Deriver()(report(at(0), kernel_log=_log(alone))))
    assert dead.detail["disposition"] == "drain"


# -- S3: the port's Target Link Speed caps the link; S4: no link judging in a VM -----------------------------


def test_s3_lspci_target_link_speed_is_read() -> None:
    targets = {d.bdf: d.target_speed_gts for d in parse_lspci_vvv(sample(LSPCI)).value}
    assert targets == {"0000:01:00.0": 2.5, "0000:17:03.0": 32.0, "0000:19:00.0": 32.0, "0000:80:01.0": 16.0}


def test_s3_a_slot_capped_by_its_ports_target_speed_is_not_downtrained() -> None:
    port = PcieDevice(
        bdf="0000:80:01.0",
        class_code="060400",
        speed_gts=8.0,
        max_speed_gts=16.0,
        width=16,
        max_width=16,
        target_speed_gts=8.0,
    )
    card = PcieDevice(
        bdf="0000:81:00.0", parent=port.bdf, class_code="020000", speed_gts=8.0, max_speed_gts=16.0, width=16,
        max_width=16,
    )  # fmt: skip
    assert link_signals(PcieState(source="lspci", devices=[port, card])) == []
    uncapped = port.model_copy(update={"target_speed_gts": 16.0})
    assert len(link_signals(PcieState(source="lspci", devices=[uncapped, card]))) == 1


def test_s4_a_passthrough_device_below_an_emulated_port_is_not_judged() -> None:
    port = PcieDevice(
        bdf="0000:00:1c.0",
        class_code="060400",
        vendor="1b36",
        device="000c",
        speed_gts=16.0,
        max_speed_gts=16.0,
        width=32,
        max_width=32,
    )
    gpu = PcieDevice(
        bdf="0000:01:00.0", parent=port.bdf, class_code="030200", speed_gts=16.0, max_speed_gts=16.0, width=8,
        max_width=16,
    )  # fmt: skip
    state = PcieState(source="sysfs", devices=[port, gpu])
    assert link_signals(state) == []
    host = port.model_copy(update={"vendor": "8086"})
    assert len(link_signals(PcieState(source="sysfs", devices=[host, gpu]))) == 1  # the same on bare metal fires
    kvm = report(identity=Identity(firmware=Firmware(system_manufacturer="QEMU", system_product="Standard PC (Q35)")))
    assert link_signals(PcieState(source="sysfs", devices=[host, gpu]), kvm.observations) == []


# -- S5: more than 64 functions with errors -----------------------------------------------------------------


def _many(n: int, total: int) -> PcieState:
    devices = [
        PcieDevice(bdf=f"0000:{bus:02x}:00.0", class_code="010802", aer_correctable=total, aer_nonfatal=0, aer_fatal=0)
        for bus in range(1, n + 1)
    ]
    return PcieState(source="sysfs", aer_counters=True, devices=devices)


def test_s5_functions_past_the_64th_are_remembered_and_count_only_their_difference() -> None:
    run = Deriver()
    run(report(at(0), pcie=_many(80, 500)))
    signals = of(run(report(at(10), pcie=_many(80, 501))), "device_event_count")
    assert len(signals) == 16  # MAX_BUCKETED links with recent errors, each counting one
    assert {s.value for s in signals} == {1}


# -- S6 / S7: the evidence when the function is not listed; the related part -------------------------------


def test_s6_a_function_not_listed_is_said_so_not_that_the_section_is_missing() -> None:
    observations = report(pcie=real_tree()).observations.model_dump(mode="json")
    assert pcie_part("0000:05:00.0", observations, [])["note"].startswith("not listed in the report's PCIe section")
    assert "no PCIe section" in pcie_part("0000:05:00.0", {}, [])["note"]


def test_s7_a_gpu_function_names_the_boards_serial() -> None:
    gpu = {"gpus": [{"index": 3, "bdf": "00000000:19:00.0", "serial": "1654922001234", "product": "NVIDIA H100"}]}
    tree = {"source": "sysfs", "devices": [{"bdf": "0000:19:00.0", "class_code": "030200", "vendor": "10de"}]}
    part = pcie_part("0000:19:00.0", {"pcie": tree, "gpu": gpu}, [])
    assert part["serial"] == "1654922001234"
    assert part["related_part"]["part_type"] == "gpu"
    assert part["related_part"]["index"] == 3


# -- S9: the counting source switching ----------------------------------------------------------------------


def test_s9_a_cycle_the_log_counted_is_not_counted_again_by_the_next_difference() -> None:
    aer = [f"nvme {NVME}: AER: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)"]
    run = Deriver()
    run(report(at(0), pcie=real_tree(**counters(0))))
    # the pcie collector fails one cycle: the log counts its 40 records
    logged = [event("pcie_aer_corrected", n, at(9), NVME, aer) for n in range(1, 41)]
    (by_log,) = of(run(report(at(10), kernel_log=kernel_log(*logged))), "device_event_count")
    assert by_log.value == 40
    # the counters, read again, hold those 40: a new baseline, not 40 more (the log counts this cycle)
    again = [event("pcie_aer_corrected", 41, at(19), NVME, aer)]
    (next_cycle,) = of(
        run(report(at(20), pcie=real_tree(**counters(41)), kernel_log=kernel_log(*again))), "device_event_count"
    )
    assert next_cycle.value == 41
    # then the counters count, with the log's count of the day carried into theirs: one count, not two
    (counted,) = of(run(report(at(30), pcie=real_tree(**counters(50)))), "device_event_count")
    assert (counted.detail["source"], counted.value) == ("sysfs aer_dev_*", 50)


def _config(target: int) -> bytes:
    """A port's config space as the kernel's sysfs `config` gives root: the status register's capability-list
    bit, the list at 0x40 holding the PCI Express capability (version 2) with LnkCtl2's Target Link Speed."""
    data = bytearray(256)
    data[6] = 0x10
    data[0x34] = 0x40
    data[0x40], data[0x41], data[0x42] = 0x10, 0x00, 0x42  # id, next (none), version 2 / root port
    data[0x40 + 0x30] = target  # 1: 2.5, 2: 5, 3: 8 GT/s …
    return bytes(data)


def test_s3_a_sysfs_host_reads_the_ports_target_speed_from_its_config_space(tmp_path: Path) -> None:
    """The NVMe and its root port at 5 GT/s, both capable of 8: downtrained, unless the port's Target Link
    Speed (a BIOS cap; sysfs has no file for it, the config space has) is 5 GT/s."""
    assert target_speed_from_config(_config(2)) == 5.0
    assert target_speed_from_config(_config(2)[:64]) is None  # not root: the first 64 bytes only

    def signals(config: bytes | None, where: Path) -> list:  # type: ignore[type-arg]
        tree = read_ttar(sample(TTAR), "fixtures/sys/devices/")
        for function in ("pci0000:00/0000:00:02.1", "pci0000:00/0000:00:02.1/0000:01:00.0"):
            tree[f"{function}/current_link_speed"] = "5.0 GT/s PCIe\n"
        snap = SnapshotBuilder(where).files("/sys/devices", tree)
        if config is not None:
            target = snap.path("/sys/devices/pci0000:00/0000:00:02.1/config")
            target.write_bytes(config)
        state = snap.cycle(collectors={"pcie": pcie.collect}).observations.pcie
        return link_signals(state)

    (slow,) = signals(None, tmp_path / "a")
    assert (slow.subject, slow.detail["slower"], slow.detail["port_target_speed_gts"]) == (NVME, True, None)
    assert signals(_config(2), tmp_path / "b") == []  # capped at 5 GT/s: no fault of the link
    (again,) = signals(_config(3), tmp_path / "c")  # a cap at 8 GT/s caps nothing here
    assert again.detail["port_target_speed_gts"] == 8.0


def test_a_function_re_enumerated_at_zero_counts_only_its_new_errors() -> None:
    """After DPC or a hot-plug the function comes back with its counters at 0 (not listed), then counts anew:
    its next errors count as themselves, never its old total again nor a negative difference."""
    run = Deriver()
    run(report(at(0), pcie=real_tree(**counters(500))))
    assert of(run(report(at(10), pcie=real_tree())), "device_event_count") == []  # back at zero: not listed
    (anew,) = of(run(report(at(20), pcie=real_tree(**counters(2)))), "device_event_count")
    assert (anew.detail["new"], anew.value) == (2, 2)
