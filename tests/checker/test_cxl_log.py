"""CXL from the kernel log and from rasdaemon's Memory Module records: the kernel's own CXL messages
classified per device, the signals they give (named through sysfs, counted once beside rasdaemon's
rows), the devices' health, and the demo fleet's kernel-only CXL fault. The kernel lines and the rows
are the project's own fixtures (tests/checker/fixtures/cxl, README.md there): no real CXL RAS sample
is public yet."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from bench.samples import SnapshotBuilder, ours
from checker.collectors.context import CollectorState
from checker.parsers.kernel_events import parse_kernel_log
from checker.schemas import CollectorStatus, CxlMemdev, CxlRasState, KernelEventKind, KernelLogState
from checker.sim import SimulatedFleet
from checker.sim.faults import Fault
from remediator.derive.cxl import cxl_signals
from remediator.derive.cxl_kernel import cxl_kernel_signals
from remediator.signals import SignalValue
from tests.builders.observations import T0, Watch, clean_fleet, host_for
from tests.checker.cxl_tree import add_rows, install

K = KernelEventKind
MEM0, MEM1 = "0x5a17c0de", "0x5a17c0df"
DEVICES = [
    CxlMemdev(memdev="mem0", serial=0x5A17C0DE, host="0000:35:00.0"),
    CxlMemdev(memdev="mem1", serial=0x5A17C0DF, host="0000:36:00.0"),
]


def _log(name: str) -> KernelLogState:
    parsed = parse_kernel_log(ours(f"cxl/{name}"), "dmesg")
    assert parsed.problems == []
    return parsed.value


def _by(signals: list[SignalValue]) -> dict[tuple[str, str], SignalValue]:
    return {(s.kind, s.subject): s for s in signals}


# -- the kernel's lines ------------------------------------------------------------------------------


def test_the_kernel_s_cxl_messages_are_events_named_by_pci_address() -> None:
    events = [(e.kind, e.subject) for e in _log("kernel-cxl-errors.log").events]
    assert events == [
        (K.pcie_aer_uncorrected, "0000:36:00.0"),  # the AER line stays PCIe's
        (K.cxl_mem_disabled, "0000:36:00.0"),  # mem1: frozen state error detected, disable CXL.mem
        (K.cxl_mem_disabled, "0000:37:00.0"),  # failure state error detected, request disconnect
        (K.cxl_mem_disabled, "0000:36:00.0"),  # mem1: memdev disabled, abort error handling
        (K.cxl_device_failed, "0000:35:00.0"),  # mailbox timeout, device state  fatal
        (K.cxl_device_failed, "0000:38:00.0"),  # timeout awaiting mailbox ready, fatal firmware-halt
        (K.cxl_device_failed, "0000:39:00.0"),  # timeout awaiting memory active
        (K.cxl_protocol_error, "0000:35:00.0"),  # CPER: its agent, a CXL Device
        (K.cxl_protocol_error, "0000:34:01.0"),  # CPER: its agent, a CXL Root Port
    ]


def test_lines_that_look_like_cxl_errors_but_are_not_stay_out() -> None:
    # a mailbox timeout whose device state names neither flag, poison injected and cleared by a test, a
    # probe message, cxl_pci's corrected AER, a CPER record of another section type (PCIe, or a CXL
    # component event the kernel prints as an unknown section)
    kinds = [e.kind for e in _log("kernel-cxl-not-errors.log").events]
    assert kinds == [K.pcie_aer_corrected, K.ghes_error, K.ghes_error]
    panic = parse_kernel_log("[ 9.0] Kernel panic - not syncing: CXL cachemem error.\n", "dmesg").value
    assert [e.kind for e in panic.events] == [K.panic]


def test_a_cper_protocol_error_keeps_its_record_and_counts_once() -> None:
    record = next(e for e in _log("kernel-cxl-errors.log").events if e.kind is K.cxl_protocol_error)
    assert record.count == 1
    assert any("cxl_ras_uncor_status: 0x00000080" in line for line in record.lines)
    assert "section_type: CXL Protocol Error" in record.lines[3]


# -- the signals of the kernel's lines ---------------------------------------------------------------


def test_kernel_signals_name_the_device_through_sysfs() -> None:
    section = CxlRasState(devices=DEVICES, rasdaemon=False)
    signals = _by(cxl_kernel_signals(_log("kernel-cxl-errors.log"), section, [], klog=None, boot_id=None))
    down = signals[("cxl_device_down", MEM1)]  # 0000:36:00.0 is mem1: its serial is the subject
    assert down.value == 2
    assert down.detail["memdev"] == "mem1"
    assert down.detail["host"] == "0000:36:00.0"
    assert down.detail["device"] == "mem1, serial 0x5a17c0df, 0000:36:00.0"
    assert down.detail["memory_lost"] is True
    assert down.detail["reason"] == "CXL.mem disabled (frozen state error)"
    # no sysfs device at 0000:39:00.0: named by its address; its media never came up: no memory lost
    absent = signals[("cxl_device_down", "0000:39:00.0")]
    assert absent.detail["memory_lost"] is False
    assert absent.detail["serial"] is None
    assert (absent.detail["phase"], absent.detail["reason"]) == ("probe", "media never became active, at probe")
    # the mailbox never ready with Fatal and FW Halt both set: at probe (no memory in use), and both bits
    # together may be all-ones read from a device off its link
    halted = signals[("cxl_device_down", "0000:38:00.0")].detail
    assert (halted["phase"], halted["memory_lost"], halted["all_ones"]) == ("probe", False, True)
    assert halted["reasons"] == [
        "device status fatal and firmware halted (both bits set: the register may read all-ones from a device "
        "off its link), at probe (mailbox never ready)"
    ]
    # mem1's "memdev disabled, abort error handling" follows an Uncorrected (Fatal) AER line: a drain, but
    # the memory lost is the frozen line's (the abort line's memdev was already disabled)
    assert down.detail["reasons"] == [
        "CXL.mem disabled (frozen state error)",
        "uncorrectable PCIe error on a memdev already disabled (no memory in use)",
    ]
    assert down.detail["phase"] == "runtime"
    assert down.detail["pcie_aer"] == [
        "[86625.640131] cxl_pci 0000:36:00.0: PCIe Bus Error: severity=Uncorrected (Fatal), type=Inaccessible, "
        "(Unregistered Agent ID)"
    ]
    # the CPER record carries the RAS status: the same cxl_aer as rasdaemon's row, bit 7 the device's own
    aer = signals[("cxl_aer", MEM0)]
    assert (aer.detail["uncorrectable"], aer.detail["device_error"]) == (True, True)
    assert aer.detail["errors"] == ["Memory Data ECC Error"]
    # mem0's fatal device status in the same log is that error's, not a second decision: it folds in
    assert ("cxl_device_down", MEM0) not in signals
    assert (aer.detail["cxl_mem_disabled"], aer.detail["kernel_records"]) == (True, 2)
    # the root port's record is the port's, never a device's: cxl_port_error
    assert ("cxl_aer", "0000:34:01.0") not in signals
    port = signals[("cxl_port_error", "0000:34:01.0")]
    assert (port.detail["uncorrectable"], port.detail["errors"]) == (False, ["CRC Threshold Hit"])
    assert (port.detail["agent_type"], port.detail["device_error"]) == ("CXL Root Port", False)


def test_without_sysfs_the_memdev_comes_from_the_line() -> None:
    signals = _by(cxl_kernel_signals(_log("kernel-cxl-errors.log"), None, [], klog=None, boot_id=None))
    down = signals[("cxl_device_down", "mem1")]
    assert (down.detail["memdev"], down.detail["host"], down.detail["serial"]) == ("mem1", "0000:36:00.0", None)


def test_the_same_error_from_rasdaemon_and_the_kernel_counts_once(tmp_path: Path) -> None:
    snap = SnapshotBuilder(tmp_path)
    install(snap)
    state = CollectorState()
    snap.cycle(state)
    state.commit()
    add_rows(snap, 5)  # rasdaemon's cxl_aer_ue_event row: mem1, Memory Data ECC Error
    section = snap.cycle(state).observations.cxl
    assert section is not None
    rows, _ = cxl_signals(section)
    frozen = parse_kernel_log(
        "[ 5.1] cxl_pci 0000:36:00.0: mem1: frozen state error detected, disable CXL.mem\n", "dmesg"
    ).value
    assert cxl_kernel_signals(frozen, section, rows, klog=None, boot_id=None) == []
    (aer,) = [s for s in rows if s.kind == "cxl_aer"]
    assert aer.value == 1
    assert (aer.detail["kernel_records"], aer.detail["cxl_mem_disabled"]) == (1, True)
    # without the rasdaemon row the kernel's line is a signal of its own
    alone = cxl_kernel_signals(frozen, section, [], klog=None, boot_id=None)
    assert [(s.kind, s.subject) for s in alone] == [("cxl_device_down", MEM1)]


def test_a_link_error_row_does_not_swallow_a_disabled_device() -> None:
    # rasdaemon says the link's (Received Poison From Peer): its rule keeps the host in service, so the
    # kernel's CXL.mem disabled stays a signal of its own (the memory is gone either way)
    link = SignalValue("cxl_aer", MEM1, 1.0, {"uncorrectable": True, "device_error": False})
    frozen = parse_kernel_log(
        "[ 5.1] cxl_pci 0000:36:00.0: mem1: frozen state error detected, disable CXL.mem\n", "dmesg"
    )
    section = CxlRasState(devices=DEVICES)
    found = cxl_kernel_signals(frozen.value, section, [link], klog=None, boot_id=None)
    assert [(s.kind, s.subject) for s in found] == [("cxl_device_down", MEM1)]
    assert "cxl_mem_disabled" not in link.detail


# -- rasdaemon's Memory Module records -------------------------------------------------------------


def _health(tmp_path: Path, *rows: int) -> dict[tuple[str, str], SignalValue]:
    snap = SnapshotBuilder(tmp_path)
    install(snap)
    state = CollectorState()
    snap.cycle(state)
    state.commit()
    add_rows(snap, *rows)
    section = snap.cycle(state).observations.cxl
    assert section is not None
    return _by(cxl_signals(section)[0])


def test_memory_module_records_are_read_and_decoded(tmp_path: Path) -> None:
    snap = SnapshotBuilder(tmp_path)
    install(snap)
    state = CollectorState()
    snap.cycle(state)
    state.commit()
    add_rows(snap, 14, 16)
    section = snap.cycle(state).observations.cxl
    assert section is not None
    life, degraded = section.events
    assert (life.table, life.kind, life.flags) == (
        "cxl_memory_module_event",
        "Life Used Change",
        ["Maintenance Needed"],
    )
    assert life.health is not None
    assert degraded.health is not None
    assert life.health.health_status == ["Maintenance Needed"]
    assert (life.health.life_used_percent, life.health.life_used_status) == (97, "Critical")
    assert (life.health.temperature_c, life.health.dirty_shutdowns, life.health.corrected_volatile_errors) == (
        48,
        3,
        12,
    )
    # FFh life used and FFFFh (bound -1) temperature: not implemented, not 255 % and -1 C
    assert (degraded.health.life_used_percent, degraded.health.temperature_c) == (None, None)
    assert degraded.health.health_status == ["Performance Degraded"]
    assert section.devices[1].host == "0000:36:00.0"  # the memdev's parent in sysfs


def test_health_asks_for_service_only_on_the_device_s_own_request(tmp_path: Path) -> None:
    signals = _health(tmp_path / "a", 14)
    life = signals[("cxl_health", MEM0)]
    assert life.detail["service_requested"] is True
    assert life.detail["reasons"] == ["Maintenance Needed", "life used Critical (97%)"]
    assert life.detail["overheating"] is False
    hot = _health(tmp_path / "b", 15)[("cxl_health", MEM1)]
    assert (hot.detail["overheating"], hot.detail["service_requested"]) == (True, False)
    assert hot.detail["temperature"] == "Critical (92 C)"
    quiet = _health(tmp_path / "c", 16)[("cxl_health", MEM1)]
    assert (quiet.detail["service_requested"], quiet.detail["overheating"]) == (False, False)
    # the newest record is the device's state: hot, then back to normal, is not hot
    cooled = _health(tmp_path / "d", 15, 16)[("cxl_health", MEM1)]
    assert cooled.value == 2
    assert cooled.detail["overheating"] is False


def test_a_host_without_rasdaemon_cxl_tables_still_lists_its_devices(tmp_path: Path) -> None:
    snap = SnapshotBuilder(tmp_path)
    install(snap, tables=False)
    report = snap.cycle(CollectorState())
    run = report.collectors["cxl"]
    assert (run.status, run.source) == (CollectorStatus.ok, "sysfs")
    assert "no cxl_* table" in run.problems[0]
    section = report.observations.cxl
    assert section is not None
    assert section.rasdaemon is False
    assert [(d.memdev, d.host) for d in section.devices] == [("mem0", "0000:35:00.0"), ("mem1", "0000:36:00.0")]
    assert cxl_signals(section)[0] == []


# -- the demo fleet ------------------------------------------------------------------------------------


def test_the_demo_fleet_s_kernel_only_cxl_fault_prints_the_kernel_line_and_drains() -> None:
    fleet: SimulatedFleet = clean_fleet()
    host = host_for(fleet, "cxl_media_errors")
    assert fleet.fault("cxl_media_errors", 3).variant == "frozen"  # the fleet draws it for a quarter of hosts
    watch = Watch(host)
    host.report(T0, interval_s=60)
    host.inject(Fault("cxl_media_errors", 1, variant="frozen"))  # on mem1
    reports = [host.report(T0 + dt.timedelta(minutes=m), interval_s=60) for m in range(1, 4)]
    section = reports[0].observations.cxl
    assert section is not None
    assert (section.rasdaemon, section.events) == (False, [])
    assert reports[0].collectors["cxl"].source == "sysfs"
    lines = [e for r in reports for e in (r.observations.kernel_log.events if r.observations.kernel_log else [])]
    frozen = [e for e in lines if e.kind is K.cxl_mem_disabled]
    assert [e.subject for e in frozen] == ["0000:36:00.0"]
    assert "mem1: frozen state error detected, disable CXL.mem" in frozen[0].lines[0]
    signals = [s for r in reports for s in watch(r)]
    (down,) = [s for s in signals if s.kind == "cxl_device_down"]
    serial = f"0x{section.devices[1].serial:x}"
    assert (down.subject, down.detail["memdev"], down.detail["memory_lost"]) == (serial, "mem1", True)
