"""The capacity collector and its parsers: cpuinfo topology on the corpus's real /proc/cpuinfo samples;
/proc/meminfo and /sys/block from our fixture (tests/checker/fixtures/sysfs-capacity.ttar, the kernel's
formats: the corpus has neither); the lost-capacity deriver on what the collector reports."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from bench.samples import SnapshotBuilder, ours, read_ttar, sample
from checker.collectors.base import SnapshotHost
from checker.cycle import COLLECTORS, run_cycle
from checker.parsers.capacity import is_disk, parse_cpu_topology, parse_meminfo_total
from checker.parsers.ipmi_sel import parse_ipmitool_sel
from checker.schemas import CollectorStatus, Report
from remediator.capacity_baseline import CapacityBaseline
from remediator.derive.capacity import CapacityMemory, capacity_signals
from remediator.derive.capacity_sel import sel_kind
from remediator.derive.sel import classify

INTEL = "cpuinfo/intel-i7-8650u-8thread-microcode-0xb4.txt"
AMD = "cpuinfo/amd-opteron-2380-family16-partial.txt"
OLD_AMD = "cpuinfo/amd-opteron-2356-rhel4-i686-no-microcode.txt"
NOW = dt.datetime(2026, 9, 1, 8, tzinfo=dt.UTC)


def test_cpu_topology_of_the_real_cpuinfo_samples() -> None:
    intel = parse_cpu_topology(sample(INTEL))
    assert intel.problems == []
    assert intel.value is not None
    assert (intel.value.sockets, intel.value.cores, intel.value.threads) == (1, 4, 8)  # 4 cores, 2 threads each
    amd = parse_cpu_topology(sample(AMD)).value
    assert amd is not None
    assert (amd.sockets, amd.cores, amd.threads) == (1, 1, 1)
    old = parse_cpu_topology(sample(OLD_AMD)).value  # no physical id on the old virtualised kernel: socket 0
    assert old is not None
    assert old.sockets == 1
    assert old.threads >= 1
    assert parse_cpu_topology("").value is None


def test_meminfo_total_in_the_kernels_format() -> None:
    meminfo = read_ttar(ours("sysfs-capacity.ttar"))["proc/meminfo"]
    assert parse_meminfo_total(meminfo).value == 16250672
    missing = parse_meminfo_total("MemFree: 12 kB\n")
    assert missing.value is None
    assert missing.problems


def test_virtual_block_devices_are_not_disks() -> None:
    assert [n for n in ("sda", "nvme0n1", "loop0", "dm-0", "md127", "zram0", "sr0", "vda") if is_disk(n)] == [
        "sda",
        "nvme0n1",
        "vda",  # a virtio disk is a VM's real disk
    ]


def snapshot(tmp_path: Path) -> SnapshotBuilder:
    snap = SnapshotBuilder(tmp_path / "snap")
    snap.files("/", read_ttar(ours("sysfs-capacity.ttar")))
    snap.file("/sys/devices/system/cpu/online", "0-1,3\n")
    snap.file("/proc/cpuinfo", sample(INTEL))
    snap.file("/sys/class/net/eth0/device/uevent", "DRIVER=e1000e\n")
    snap.directory_only("/sys/class/net/lo")
    return snap


def cycle(snap: SnapshotBuilder) -> Report:
    return run_cycle(SnapshotHost(snap.directory), hostname="h1", collectors={"capacity": COLLECTORS["capacity"]})


def test_the_collector_reads_memory_cpus_disks_and_nics(tmp_path: Path) -> None:
    report = cycle(snapshot(tmp_path))
    run, capacity = report.collectors["capacity"], report.observations.capacity
    assert run.status == CollectorStatus.ok, run
    assert run.problems == []
    assert capacity is not None
    assert (capacity.mem_total_kb, capacity.cpus_present, capacity.cpus_online, capacity.cpus_offline) == (
        16250672,
        4,
        3,
        [2],
    )
    assert [(d.name, d.model, d.serial, d.rotational) for d in capacity.disks or []] == [
        ("nvme0n1", "Samsung SSD 970 EVO 500GB", "S466NX0K701234A", False),
        ("sda", "ST3500418AS", "naa.5000c5002f1e4a21", True),
    ]
    assert capacity.nics == ["eth0"]


def test_a_host_without_the_files_is_unavailable_and_an_unlisted_tree_is_none_not_zero(tmp_path: Path) -> None:
    empty = SnapshotBuilder(tmp_path / "empty")
    empty.file("/etc/hostname", "h1\n")
    run = cycle(empty).collectors["capacity"]
    assert run.status == CollectorStatus.unavailable
    assert "/proc/meminfo" in (run.reason or "")
    partial = SnapshotBuilder(tmp_path / "partial")
    partial.file("/proc/meminfo", "MemTotal:        1000000 kB\n")
    report = cycle(partial)
    assert report.observations.capacity is not None
    assert (report.observations.capacity.disks, report.observations.capacity.nics) == (None, None)
    assert any("/sys/block" in p for p in report.collectors["capacity"].problems)


def test_a_lost_disk_is_named_from_the_previous_inventory_and_a_hot_spare_is_no_finding(tmp_path: Path) -> None:
    snap = snapshot(tmp_path)
    expected = CapacityBaseline(disks=2, nics=1, cpus=4, memory_gib=16)
    first = cycle(snap)
    found, kept = capacity_signals(first, None, labels={}, baseline=expected, hardware_class="lab", now=NOW)
    assert [s.kind for s in found] == ["capacity_inventory"]  # 15.5 GiB is within 4 % of 16
    assert isinstance(kept, CapacityMemory)
    import shutil

    shutil.rmtree(snap.path("/sys/block/sda"))
    later = cycle(snap)
    found, kept = capacity_signals(
        later, kept, labels={}, baseline=expected, hardware_class="lab", now=NOW + dt.timedelta(minutes=1)
    )
    (missing,) = [s for s in found if s.kind == "capacity_missing"]
    assert (missing.subject, missing.value, missing.detail["source"]) == ("disks", 1.0, "baseline")
    assert missing.detail["gone"] == [{"device": "sda", "serial": "naa.5000c5002f1e4a21"}]
    assert missing.detail["missing"] == "serial naa.5000c5002f1e4a21 (was sda)"
    # the inventory label says one disk: taken out on purpose
    found, _ = capacity_signals(
        later, kept, labels={"capacity.disks": "1"}, baseline=expected, hardware_class="lab", now=NOW
    )
    assert [s for s in found if s.kind == "capacity_missing"] == []
    # more than expected (a hot spare) is not a finding
    found, _ = capacity_signals(
        first, None, labels={}, baseline=CapacityBaseline(disks=1), hardware_class="lab", now=NOW
    )
    assert [s for s in found if s.kind == "capacity_missing"] == []


def test_sel_entries_that_say_firmware_took_a_part_out() -> None:
    lines = (
        " 1a3 | 09/01/2026 | 07:58:10 | Memory DIMM_F1 | Memory Device Disabled | Asserted\n"
        " 1a4 | 09/01/2026 | 07:58:11 | Memory DIMM_F1 | Presence Detected | Deasserted\n"
        " 1a5 | 09/01/2026 | 07:58:12 | Memory DIMM_F1 | Presence Detected | Asserted\n"
        " 1a6 | 09/01/2026 | 07:58:13 | Memory #0x53 | Configuration Error | Asserted | DIMM A3\n"
        " 2b0 | 09/01/2026 | 07:59:02 | Processor CPU2 Status | IERR | Asserted\n"
        " 2b1 | 09/01/2026 | 07:59:03 | Processor CPU2 Status | Presence detected | Asserted\n"
        " 2b2 | 09/01/2026 | 07:59:04 | Memory #0x53 | Correctable ECC | Asserted | DIMM A3\n"
    )
    entries = parse_ipmitool_sel(lines).value
    assert [sel_kind(e) for e in entries] == [
        "sel_memory_disabled",
        "sel_memory_disabled",
        None,
        "sel_memory_disabled",
        "sel_processor_fault",
        None,
        None,
    ]
    assert classify(entries[-1]) == "sel_memory_ecc"  # the rest of the SEL path is unchanged
    assert entries[3].component == "DIMM A3"


def test_a_disks_attributes_are_kept_between_cycles_and_a_new_disk_is_read(tmp_path: Path) -> None:
    from checker.collectors import capacity
    from checker.collectors.context import CollectorState, Context
    from checker.schemas import Observations

    snap = snapshot(tmp_path)
    host, state = SnapshotHost(snap.directory), CollectorState()

    def disks() -> dict[str, str | None]:
        observations = Observations()
        capacity.collect(Context(host, observations, state, 15.0))
        state.commit()
        assert observations.capacity is not None
        return {d.name: d.serial for d in observations.capacity.disks or []}

    assert disks()["sda"] == "naa.5000c5002f1e4a21"
    snap.file("/sys/block/sda/device/wwid", "naa.changed\n")  # not read again before DISK_REFRESH_S
    snap.file("/sys/block/sdb/device/uevent", "DEVTYPE=scsi_device\n")
    snap.file("/sys/block/sdb/device/wwid", "naa.5000c5002f1e4b77\n")
    assert disks() == {"nvme0n1": "S466NX0K701234A", "sda": "naa.5000c5002f1e4a21", "sdb": "naa.5000c5002f1e4b77"}
