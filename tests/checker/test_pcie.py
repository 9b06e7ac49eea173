"""PCIe: the real sysfs ttar, lspci -vvv and AER kernel-log samples (pcie/, kernel-log/) through the parsers
and the pcie collector."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from bench.samples import SnapshotBuilder, read_ttar, sample
from checker.collectors import pcie
from checker.collectors.context import CollectorState
from checker.parsers.kernel_events import parse_kernel_log
from checker.parsers.pcie import (
    device_from_sysfs,
    device_kind,
    link_speed,
    parse_aer_counters,
    parse_lspci_vvv,
    parse_pcie_sysfs,
    worth_reporting,
)
from checker.schemas import CollectorStatus, KernelEventKind, PcieState, Report

K = KernelEventKind
TTAR = "pcie/sysfs-pci-current-max-link-speed-width-aer-counters-extract.ttar"
LSPCI = "pcie/lspci-vvv-dell-h100-server-downgraded-speed-and-width-extract.txt"
NEWEST = "pcie/journal-aer-ratelimit-multiple-correctable-headerof-uncorrectable-acsviol-kernel7-pve.log"
ONLY_PCIE = {"pcie": pcie.collect}


def sysfs_tree() -> dict[str, str]:
    return read_ttar(sample(TTAR), "fixtures/sys/devices/")


def test_link_speed_wordings() -> None:
    assert link_speed("8.0 GT/s PCIe\n") == 8.0
    assert link_speed("2.5 GT/s") == 2.5
    assert link_speed("Speed 16GT/s (downgraded), Width x16 (ok)") == 16.0
    assert link_speed("Unknown") is None
    assert link_speed("Unknown speed") is None


def test_aer_counter_file_from_the_ttar() -> None:
    files = sysfs_tree()
    parsed = parse_aer_counters(files["pci0000:00/0000:00:02.1/0000:01:00.0/aer_dev_fatal"])
    assert parsed.ok
    assert parsed.value["TOTAL_ERR_FATAL"] == 0
    assert {"DLP", "SDES", "ACSViol", "PoisonTLPBlocked"} <= set(parsed.value)


def test_device_from_the_ttar_files() -> None:
    files = sysfs_tree()
    prefix = "pci0000:00/0000:00:03.0/0000:03:00.0/"
    mine = {name[len(prefix) :]: text for name, text in files.items() if name.startswith(prefix)}
    parsed = device_from_sysfs("0000:03:00.0", mine, parent="0000:00:03.0", slot="7")
    assert parsed.ok
    device = parsed.value
    assert device is not None
    assert (device.bdf, device.parent, device.slot) == ("0000:03:00.0", "0000:00:03.0", "7")
    assert (device.class_code, device.vendor, device.device) == ("010700", "1000", "00ab")
    assert device_kind(device.class_code) == "SAS HBA"
    assert (device.speed_gts, device.max_speed_gts, device.width, device.max_width) == (8.0, 8.0, 8, 8)
    assert (device.aer_correctable, device.aer_nonfatal, device.aer_fatal) == (0, 0, 0)
    assert device.aer_types == {}


def test_counts_and_driver_from_uevent() -> None:
    files = {
        "uevent": "DRIVER=nvme\nPCI_CLASS=10802\nPCI_ID=144D:A808\nPCI_SLOT_NAME=0000:03:00.0\n",
        "current_link_speed": "8.0 GT/s PCIe\n",
        "aer_dev_correctable": "RxErr 7\nBadTLP 0\nBadDLLP 2\nTOTAL_ERR_COR 9\n",
    }
    device = device_from_sysfs("0000:03:00.0", files).value
    assert device is not None
    assert (device.driver, device.class_code, device.vendor, device.device) == ("nvme", "010802", "144d", "a808")
    assert device_kind(device.class_code) == "NVMe"
    assert device.aer_correctable == 9
    assert device.aer_nonfatal is None
    assert device.aer_types == {"correctable:RxErr": 7, "correctable:BadDLLP": 2}


def test_lspci_vvv_links_and_downgraded_annotations() -> None:
    parsed = parse_lspci_vvv(sample(LSPCI))
    assert parsed.ok
    by_bdf = {d.bdf: d for d in parsed.value}
    assert list(by_bdf) == ["0000:01:00.0", "0000:17:03.0", "0000:19:00.0", "0000:80:01.0"]
    nic = by_bdf["0000:01:00.0"]
    assert (nic.speed_gts, nic.max_speed_gts, nic.width, nic.max_width) == (5.0, 5.0, 1, 2)
    assert (device_kind(nic.class_code), nic.driver) == ("NIC", "tg3")
    switch = by_bdf["0000:17:03.0"]  # the PEX890xx Gen5 port feeding a Gen4 card: slower than its own cap
    assert (switch.speed_gts, switch.max_speed_gts, switch.width, switch.slot) == (16.0, 32.0, 16, "40")
    gpu = by_bdf["0000:19:00.0"]
    assert (device_kind(gpu.class_code), gpu.speed_gts, gpu.width, gpu.driver) == ("GPU", 32.0, 16, "nvidia")
    root = by_bdf["0000:80:01.0"]
    assert (root.width, root.max_width, device_kind(root.class_code)) == (2, 16, "PCIe port")
    assert all(d.parent is None for d in parsed.value)  # the extract holds no bridge whose secondary bus is theirs


def test_lspci_nn_ids_and_parent_by_secondary_bus() -> None:
    text = (
        "0000:80:01.0 PCI bridge [0604]: Intel Corporation Device [8086:352a] (rev 04)\n"
        "\tBus: primary=80, secondary=81, subordinate=86, sec-latency=0\n"
        "\t\tLnkCap:\tPort #41, Speed 16GT/s, Width x16, ASPM not supported\n"
        "\t\tLnkSta:\tSpeed 16GT/s (ok), Width x2 (downgraded)\n\n"
        "0000:81:00.0 Ethernet controller [0200]: Mellanox Technologies MT2892 Family [15b3:101d]\n"
        "\t\tLnkCap:\tPort #0, Speed 16GT/s, Width x16, ASPM not supported\n"
        "\t\tLnkSta:\tSpeed 16GT/s (ok), Width x2 (downgraded)\n"
        "\tKernel driver in use: mlx5_core\n"
    )
    port, nic = parse_lspci_vvv(text).value
    assert (port.class_code, port.vendor, port.device) == ("060400", "8086", "352a")
    assert (nic.parent, nic.vendor, nic.device, nic.driver) == ("0000:80:01.0", "15b3", "101d", "mlx5_core")


def test_collector_reads_the_real_sysfs_tree(tmp_path: Path) -> None:
    """The real tree with the NVMe's link at x2 (both ends' files) and 5 corrected errors on the HBA."""
    tree = sysfs_tree()
    for function in ("pci0000:00/0000:00:02.1", "pci0000:00/0000:00:02.1/0000:01:00.0"):
        tree[f"{function}/current_link_width"] = "2\n"
    hba = "pci0000:00/0000:00:03.0/0000:03:00.0/aer_dev_correctable"
    tree[hba] = tree[hba].replace("RxErr 0", "RxErr 5").replace("TOTAL_ERR_COR 0", "TOTAL_ERR_COR 5")
    snap = SnapshotBuilder(tmp_path).files("/sys/devices", tree)
    snap.file("/sys/bus/pci/slots/3/address", "0000:01:00\n")
    report = snap.cycle(collectors=ONLY_PCIE)
    run = report.collectors["pcie"]
    assert run.status is CollectorStatus.ok, run.reason
    assert (run.source, run.problems) == ("sysfs", [])
    state = report.observations.pcie
    assert state is not None
    assert (state.functions, state.aer_counters) == (4, True)
    # the NVMe (its link at x2) and the HBA (errors counted), each with its link partner, the root port above
    # it: either end of a link logs its errors, and a port's ticket names the part below it (review M3)
    assert [d.bdf for d in state.devices] == ["0000:00:02.1", "0000:01:00.0", "0000:00:03.0", "0000:03:00.0"]
    nvme, hba_device = state.devices[1], state.devices[3]
    assert (nvme.bdf, nvme.parent, nvme.slot) == ("0000:01:00.0", "0000:00:02.1", "3")
    assert device_kind(nvme.class_code) == "NVMe"
    assert (nvme.width, nvme.max_width, nvme.port_max_width, nvme.port_max_speed_gts) == (2, 4, 8, 8.0)
    assert (hba_device.bdf, hba_device.aer_correctable) == ("0000:03:00.0", 5)
    assert hba_device.aer_types == {"correctable:RxErr": 5}
    Report.model_validate_json(report.model_dump_json())  # within the contract


def test_collector_falls_back_to_lspci_without_link_files(tmp_path: Path) -> None:
    snap = SnapshotBuilder(tmp_path).file("/sys/devices/pci0000:00/0000:00:00.0/vendor", "0x8086\n")
    snap.command(pcie.LSPCI, sample(LSPCI))
    report = snap.cycle(collectors=ONLY_PCIE)
    assert report.collectors["pcie"].status is CollectorStatus.ok
    assert report.collectors["pcie"].source == "lspci"
    state = report.observations.pcie
    assert state is not None
    assert (state.functions, state.aer_counters) == (4, False)
    # three say (downgraded), against their own LnkCap; none's port is in the extract, so none is judged
    assert state.devices == []


def test_a_healthy_tree_is_counted_not_listed(tmp_path: Path) -> None:
    """The real tree as it is: x8 port at x4 to a x4 NVMe, x16 port at x8 to a x8 HBA, no error."""
    report = SnapshotBuilder(tmp_path).files("/sys/devices", sysfs_tree()).cycle(collectors=ONLY_PCIE)
    state = report.observations.pcie
    assert state is not None
    assert (state.functions, state.aer_counters, state.devices) == (4, True, [])


def test_no_pci_bus_is_unavailable_with_the_reason(tmp_path: Path) -> None:
    report = SnapshotBuilder(tmp_path).directory_only("/sys/devices/system").cycle(collectors=ONLY_PCIE)
    run = report.collectors["pcie"]
    assert run.status is CollectorStatus.unavailable
    assert run.reason is not None
    assert "no PCI bus" in run.reason


def test_newest_aer_wording_and_ratelimit_suppressed_count() -> None:
    """Linux 6.16's 'Correctable' / 'Uncorrectable (Non-Fatal)' and its per-device rate limit."""
    state = parse_kernel_log(sample(NEWEST), "journal", reference=dt.datetime(2026, 9, 30, tzinfo=dt.UTC)).value
    corrected, uncorrected = state.events
    assert (corrected.kind, corrected.subject, corrected.count) == (K.pcie_aer_corrected, "0000:80:1b.4", 111)
    assert corrected.lines[0].endswith("aer_ratelimit: 110 callbacks suppressed")
    assert "[15] HeaderOF" in corrected.lines[-1]
    # the second 'callbacks suppressed' may be the non-fatal limit's or another device's: not added to it
    assert (uncorrected.kind, uncorrected.subject, uncorrected.count) == (K.pcie_aer_uncorrected, "0000:80:1b.4", 1)
    assert any("ACSViol" in line for line in uncorrected.lines)


def test_data_link_timeouts_with_bdf_in_the_received_line() -> None:
    state = parse_kernel_log(
        sample("pcie/dmesg-aer-corrected-data-link-timeout-transmitter-id-haswell-pch.log"), "dmesg"
    )
    events = state.value.events
    assert [(e.kind, e.subject, e.count) for e in events] == [(K.pcie_aer_corrected, "0000:00:1c.1", 1)] * 3
    assert all("[12] Timeout" in e.lines[-1] for e in events)


def test_an_agent_rereads_only_what_changes_between_walks(tmp_path: Path) -> None:
    """The walk and the static files (uevent, max_link_*) are kept per agent; the link and AER files are read
    every cycle; a new boot (or REWALK_S) walks again."""
    snap = SnapshotBuilder(tmp_path).boot("boot-a").files("/sys/devices", sysfs_tree())
    state = CollectorState()
    snap.cycle(state, collectors=ONLY_PCIE)
    nvme = "/sys/devices/pci0000:00/0000:00:02.1/0000:01:00.0"
    snap.file(f"{nvme}/current_link_width", "2\n").file(f"{nvme}/max_link_width", "8\n")
    port = "/sys/devices/pci0000:00/0000:00:02.1"
    snap.file(f"{port}/current_link_width", "2\n")
    (_, listed) = pcie_of(snap.cycle(state, collectors=ONLY_PCIE)).devices  # the port above, its link partner
    assert (listed.width, listed.max_width) == (2, 4)  # the current width re-read, the kept capability
    snap.boot("boot-b")
    (_, listed) = pcie_of(snap.cycle(state, collectors=ONLY_PCIE)).devices
    assert (listed.width, listed.max_width) == (2, 8)  # walked again


def pcie_of(report: Report) -> PcieState:
    assert report.observations.pcie is not None
    return report.observations.pcie


def test_the_ttar_as_a_tree_gives_each_function_its_port() -> None:
    parsed = parse_pcie_sysfs(read_ttar(sample(TTAR)))
    assert parsed.ok
    by_bdf = {d.bdf: d for d in parsed.value}
    assert set(by_bdf) == {"0000:00:02.1", "0000:01:00.0", "0000:00:03.0", "0000:03:00.0"}
    hba = by_bdf["0000:03:00.0"]
    assert (hba.parent, hba.port_max_width, hba.port_max_speed_gts) == ("0000:00:03.0", 16, 8.0)
    assert worth_reporting(parsed.value) == []  # every link at the lesser end's capability, no error
