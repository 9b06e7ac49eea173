"""The lost-capacity class after its review (docs/rules.md, "Lost capacity"): a disk found missing by serial
when names shift, disk attributes read afresh after a reboot, network/USB disks and SR-IOV/USB interfaces
not counted, SEL history replayed after a restart not counted again, IPMI processor offsets, one finding
per lost DIMM or CPU, the memory tolerance on small and persistent-memory hosts, and a class part-way
through an upgrade. Sysfs trees and SEL lines are ours, in the kernel's and ipmitool's formats; the
dmidecode is the corpus's real Supermicro dump with its records edited as the comments say."""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path

from bench.samples import SnapshotBuilder, ours, read_ttar, sample
from checker.collectors import capacity as collector
from checker.collectors.base import SnapshotHost
from checker.collectors.context import CollectorState, Context
from checker.parsers.dmi import parse_dmidecode_memory
from checker.parsers.ipmi_sel import parse_ipmitool_sel
from checker.schemas import (
    BlockDevice,
    Capacity,
    DimmInventory,
    HostIdentity,
    Identity,
    Observations,
    Report,
    SelState,
)
from remediator.capacity_baseline import CapacityBaseline
from remediator.capacity_class import median_expectation
from remediator.derive.capacity import (
    MISSING,
    CapacityMemory,
    Expectation,
    Inventory,
    capacity_part,
    capacity_signals,
    missing_signal,
    short_of,
)
from remediator.derive.capacity_sel import EXPLAINED, SEL_NOTED, SEL_POST, SEL_PROCESSOR, fold_sel, sel_kind
from remediator.derive.sel import sel_signals
from remediator.signals import SignalValue

NOW = dt.datetime(2026, 9, 1, 8, tzinfo=dt.UTC)
GIB_KB = 1024 * 1024
SUPERMICRO_DMIDECODE = "dmi/dmidecode-full-supermicro-ami-3.0b.txt"


def report(*, dimms: list[DimmInventory] | None = None, capacity: Capacity | None = None) -> Report:
    return Report(
        host=HostIdentity(hostname="h1", boot_id="b1"),
        captured_at=NOW,
        observations=Observations(identity=Identity(dimms=dimms or []), capacity=capacity),
    )


# -- 1. a lost disk is found by serial -------------------------------------------------------------


def test_a_lost_disk_is_named_by_serial_when_the_names_shift() -> None:
    """Before: sda A, sdb B, sdc C; B lost and the host rebooted: sda A, sdb C. The old code compared
    names and named sdc (SER-C), the healthy disk, with SER-C in the ticket's part.serial."""
    kept = CapacityMemory(disks={"sda": "SER-A", "sdb": "SER-B", "sdc": "SER-C"})
    now = report(
        capacity=Capacity(disks=[BlockDevice(name="sda", serial="SER-A"), BlockDevice(name="sdb", serial="SER-C")])
    )
    found, _ = capacity_signals(now, kept, labels={}, baseline=CapacityBaseline(disks=3), hardware_class="c", now=NOW)
    (missing,) = [s for s in found if s.kind == MISSING]
    assert missing.detail["gone"] == [{"device": "sdb", "serial": "SER-B"}]
    assert missing.detail["missing"] == "serial SER-B (was sdb)"
    assert capacity_part("disks", [missing])["serial"] == "SER-B"
    # a disk without a serial is still found by its name
    unnamed = capacity_signals(
        report(capacity=Capacity(disks=[BlockDevice(name="sda")])),
        CapacityMemory(disks={"sda": "", "sdb": ""}),
        labels={},
        baseline=CapacityBaseline(disks=2),
        hardware_class="c",
        now=NOW,
    )[0]
    assert [s.detail["missing"] for s in unnamed if s.kind == MISSING] == ["sdb"]


def _snapshot(tmp_path: Path) -> SnapshotBuilder:
    snap = SnapshotBuilder(tmp_path / "snap")
    snap.files("/", read_ttar(ours("sysfs-capacity.ttar")))
    snap.file("/sys/devices/system/cpu/online", "0-3\n")
    snap.boot(boot_id="11111111-1111-1111-1111-111111111111")
    return snap


def _collect(host: SnapshotHost, state: CollectorState) -> Capacity:
    observations = Observations()
    collector.collect(Context(host, observations, state, 15.0))
    state.commit()
    assert observations.capacity is not None
    return observations.capacity


def test_a_disks_cached_serial_is_read_afresh_after_a_reboot(tmp_path: Path) -> None:
    """The old collector kept each name's serial for DISK_REFRESH_S whatever happened: after a reboot that
    shifted the names it reported the old disk's serial under the new disk's name."""
    snap = _snapshot(tmp_path)
    host, state = SnapshotHost(snap.directory), CollectorState()
    assert {d.name: d.serial for d in _collect(host, state).disks or []}["sda"] == "naa.5000c5002f1e4a21"
    snap.file("/sys/block/sda/device/wwid", "naa.5000c5002f1e4c99\n")  # another disk is sda now
    assert {d.name: d.serial for d in _collect(host, state).disks or []}["sda"] == "naa.5000c5002f1e4a21"  # cached
    snap.boot(boot_id="22222222-2222-2222-2222-222222222222")
    assert {d.name: d.serial for d in _collect(host, state).disks or []}["sda"] == "naa.5000c5002f1e4c99"


def test_network_and_usb_disks_and_interfaces_that_come_and_go_are_not_counted(tmp_path: Path) -> None:
    """iSCSI (a session in the device path), NVMe over TCP (the controller's transport) and a USB stick are
    not the host's own disks; an SR-IOV VF (device/physfn) and the BMC's cdc_ether usb0 are not its NICs.
    The old collector counted all five."""
    snap = _snapshot(tmp_path)
    for name in ("sdb", "sdc", "nvme1n1"):
        snap.file(f"/sys/block/{name}/device/uevent", "DEVTYPE=scsi_device\nDRIVER=sd\n")
    snap.file("/sys/block/nvme1n1/device/transport", "tcp\n")
    snap.file("/sys/block/nvme0n1/device/transport", "pcie\n")
    for name in ("eth0", "eth0v0", "usb0"):
        snap.file(f"/sys/class/net/{name}/device/uevent", "DRIVER=mlx5_core\n")
    snap.directory_only("/sys/class/net/eth0v0/device/physfn")
    realpaths = {
        "/sys/block/sdb/device": "/sys/devices/platform/host3/session1/target3:0:0/3:0:0:0",
        "/sys/block/sdc/device": "/sys/devices/pci0000:00/0000:00:14.0/usb2/2-1/2-1:1.0/host6/target6:0:0/6:0:0:0",
        "/sys/class/net/usb0/device": "/sys/devices/pci0000:00/0000:00:14.0/usb1/1-3/1-3:1.0",
        "/sys/class/net/eth0/device": "/sys/devices/pci0000:00/0000:00:03.0/0000:3b:00.0",
    }
    (snap.directory / "realpaths.json").write_text(json.dumps(realpaths))
    found = _collect(SnapshotHost(snap.directory), CollectorState())
    assert sorted(d.name for d in found.disks or []) == ["nvme0n1", "sda"]
    assert found.nics == ["eth0"]


# -- 2. SEL history replayed after a restart -------------------------------------------------------

HISTORY = (
    " 10 | 02/13/2026 | 03:10:00 | Processor CPU1 Status | IERR | Asserted\n"
    " 11 | 02/13/2026 | 03:10:01 | Processor CPU1 Status | FRB3/Processor startup/init failure | Asserted\n"
    " 12 | Pre-Init | 0000000012 | Memory DIMM_F1 | Memory Device Disabled | Asserted\n"
    " 13 | 09/01/2026 | 07:40:00 | Power Supply PS1 Status | Presence detected | Asserted\n"
)


def _sel(text: str, *, count: int | None = None, cleared: bool = False) -> SelState:
    entries = parse_ipmitool_sel(text).value
    return SelState(entries=entries, entry_count=count if count is not None else len(entries), cleared=cleared)


def test_sel_history_listed_again_after_a_restart_is_not_new() -> None:
    """The old code counted every listed entry as new when the ids went backwards or the collector saw the
    count fall: a 200-day-old IERR became sel_processor_fault (a drain)."""
    _, memory = sel_signals(_sel(HISTORY), None, now=NOW)  # first sight: the old entries are history
    assert memory is not None
    assert memory.newest == dt.datetime(2026, 9, 1, 7, 40, tzinfo=dt.UTC)
    later = NOW + dt.timedelta(hours=1)
    # the BMC dropped its oldest entry: the collector saw the count fall and listed the log whole
    dropped = _sel("".join(HISTORY.splitlines(keepends=True)[1:]), count=3, cleared=True)
    found, _ = sel_signals(dropped, memory, now=later)
    assert [s.kind for s in found] == ["sel_cleared"]
    # a BMC reflash renumbered the ids (backwards) and one new IERR was logged after them
    renumbered = re.sub(r"^ 1(\d) ", r" \1 ", HISTORY, flags=re.MULTILINE)
    renumbered += " 5 | 09/01/2026 | 08:30:00 | Processor CPU2 Status | IERR | Asserted\n"
    renumbered += " 6 | Pre-Init | 0000000020 | Memory DIMM_A1 | Memory Device Disabled | Asserted\n"
    found, _ = sel_signals(_sel(renumbered), memory, now=later)
    assert sorted((s.kind, s.subject) for s in found) == [
        ("sel_cleared", "sel"),
        ("sel_memory_disabled", "DIMM_A1"),  # undated, after the last dated history entry: new
        ("sel_processor_fault", "CPU2 Status"),
    ]


def test_processor_offsets_and_which_ones_drain() -> None:
    """IPMI 2.0 table 42-3 (07h) in ipmitool's wording. The old code made FRB2 and a Configuration Error a
    processor fault (drain)."""
    lines = [
        "IERR",
        "Thermal Trip",
        "FRB1/BIST failure",
        "FRB2/Hang in POST failure",
        "FRB3/Processor startup/init failure",
        "Configuration Error",
        "SM BIOS 'Uncorrectable CPU-complex Error'",
        "Presence detected",
        "Disabled",
    ]
    text = "".join(
        f" {i + 1:x} | 09/01/2026 | 07:59:0{i} | Processor CPU1 Status | {e} | Asserted\n" for i, e in enumerate(lines)
    )
    kinds = [sel_kind(e) for e in parse_ipmitool_sel(text).value]
    post, fault = SEL_POST, SEL_PROCESSOR
    assert kinds == [fault, None, fault, post, fault, post, fault, None, fault]


# -- 5, 10, 11. one finding per lost part ----------------------------------------------------------


def _dimms(count: int, *, size_mb: int = 32768) -> list[DimmInventory]:
    return [DimmInventory(locator=f"DIMM{i}", size_mb=size_mb, serial=f"S{i}") for i in range(count)]


def test_one_lost_dimm_is_one_finding_not_memory_as_well() -> None:
    """The old code gave capacity_missing for dimms and for memory: two tickets for one DIMM."""
    baseline = CapacityBaseline(dimms=16, memory_gib=512)
    full = report(dimms=_dimms(16), capacity=Capacity(mem_total_kb=504 * GIB_KB))
    _, kept = capacity_signals(full, None, labels={}, baseline=baseline, hardware_class="c", now=NOW)
    short = report(dimms=_dimms(15), capacity=Capacity(mem_total_kb=472 * GIB_KB))
    found, _ = capacity_signals(short, kept, labels={}, baseline=baseline, hardware_class="c", now=NOW)
    assert [(s.kind, s.subject) for s in found if s.kind == MISSING] == [(MISSING, "dimms")]


def _sel_signal(kind: str, subject: str, *events: str) -> SignalValue:
    return SignalValue(kind, subject, 1.0, {"sensor": f"Memory {subject}", "events": list(events), "record_ids": [1]})


def test_the_sel_and_the_inventory_give_one_ticket_per_lost_part() -> None:
    """The old code let sel-memory-disabled and capacity-dimm-missing, and sel-processor-fault and
    capacity-cpu-missing, each open their own ticket for one part; and trusted a lone presence deassert."""
    previous = CapacityMemory(dimms={f"DIMM{i}": f"S{i}" for i in range(16)})
    dimms_short = SignalValue(MISSING, "dimms", 1.0, {"missing": "DIMM15"})
    sel_dimm = _sel_signal("sel_memory_disabled", "DIMM_F1", "Memory Device Disabled")
    now = report(dimms=_dimms(15))
    out, kept = fold_sel([sel_dimm, dimms_short], previous, previous, now, now=NOW)
    assert [(s.kind, s.subject) for s in out] == [(MISSING, "dimms")]
    assert out[0].detail["sel"][0]["subject"] == "DIMM_F1"
    assert kept is not None
    assert kept.short == ["dimms"]
    # a presence deassert while dmidecode still lists every DIMM: not confirmed
    presence = _sel_signal("sel_memory_disabled", "DIMM_F1", "Presence Detected")
    out, _ = fold_sel([presence], previous, previous, report(dimms=_dimms(16)), now=NOW)
    assert [s.kind for s in out] == [SEL_NOTED]
    # ... confirmed when dmidecode lost one
    out, kept = fold_sel([presence], previous, previous, report(dimms=_dimms(15)), now=NOW)
    assert [s.kind for s in out] == ["sel_memory_disabled"]
    # the DIMM count short a report later is the same loss: explained, no second ticket
    assert kept is not None
    out, _ = fold_sel([dimms_short], previous, kept, report(dimms=_dimms(15)), now=NOW + dt.timedelta(hours=1))
    assert [s.kind for s in out] == [EXPLAINED]
    # a processor fault and CPUs short: one ticket, sel-processor-fault's
    cpu = SignalValue(SEL_PROCESSOR, "CPU2 Status", 1.0, {"events": ["IERR"]})
    cpus_short = SignalValue(MISSING, "cpus", 8.0, {})
    out, kept = fold_sel([cpu, cpus_short], None, None, report(), now=NOW)
    assert [s.kind for s in out] == [SEL_PROCESSOR, EXPLAINED]
    out, _ = fold_sel([cpus_short], kept, kept, report(), now=NOW + dt.timedelta(days=1))
    assert [s.kind for s in out] == [EXPLAINED]
    out, _ = fold_sel([cpus_short], kept, kept, report(), now=NOW + dt.timedelta(days=8))
    assert [s.kind for s in out] == [MISSING]  # a week on and still short: its own ticket


# -- 6. a class part-way through an upgrade ---------------------------------------------------------


def test_a_class_two_thirds_through_a_memory_upgrade_is_a_split_not_three_lost_dimm_tickets() -> None:
    """6 of 9 hosts upgraded to 32 DIMMs: the old check saw a two-thirds majority at 32 and gave the other
    three '16 DIMM(s) missing' each."""
    values = [32.0] * 6 + [16.0] * 3
    expected = median_expectation("dimms", values, [{"dimms": v} for v in values])
    assert expected is not None
    assert expected.extra["ambiguous"] is True
    assert expected.extra["below"] == 3
    one_short = [32.0] * 8 + [31.0]  # one host short in a class of nine: a real loss
    assert not median_expectation("dimms", one_short, [{"dimms": v} for v in one_short]).extra.get("ambiguous")  # type: ignore[union-attr]


# -- 7. the memory tolerance -----------------------------------------------------------------------


def test_a_small_host_with_a_crashkernel_is_not_short_and_pmem_is_not_installed_memory() -> None:
    """15.2 GiB of 16 (3.1 % kernel and firmware, 256 MiB crashkernel) fired with the old 4 % alone."""
    assert short_of("memory", 15.2, Expectation(16.0, "baseline", 4.0)) is None
    assert short_of("memory", 12.0, Expectation(16.0, "baseline", 4.0)) == 4.0  # one 4 GiB DIMM of 4
    # Optane PMem in App Direct mode: dmidecode lists it, MemTotal does not hold it
    text = sample(SUPERMICRO_DMIDECODE)
    blocks = text.split("\n\n")
    pmem = 0
    for i, block in enumerate(blocks):
        if "Memory Device" in block and re.search(r"Size: \d+ GB", block) and pmem < 4:
            block = re.sub(r"Size: \d+ GB", "Size: 128 GB", block)
            blocks[i] = block.replace("Type Detail: Synchronous", "Type Detail: Synchronous Non-Volatile")
            pmem += 1
    dimms = parse_dmidecode_memory("\n\n".join(blocks)).value
    assert sum(1 for d in dimms if d.non_volatile) == 4
    assert all(d.non_volatile is None for d in parse_dmidecode_memory(text).value)  # the real dump says nothing
    seen = report(dimms=dimms, capacity=Capacity(mem_total_kb=int(376 * GIB_KB)))
    found, _ = capacity_signals(seen, None, labels={}, baseline=None, hardware_class="c", now=NOW)
    assert [s for s in found if s.kind == MISSING] == []  # 12 x 32 GB volatile: 384 GiB installed, 376 seen
    inventory = Inventory(installed_gib=384.0, non_volatile=4)
    signal = missing_signal("memory", 300.0, Expectation(384.0, "installed", 4.0), inventory, None, "c")
    assert signal is not None
    assert signal.detail["non_volatile_dimms"] == 4
