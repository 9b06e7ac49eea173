"""The operator review of the CXL kernel-log and Memory Module work (findings 1-14), each as the
scenario the reviewer ran (/tmp/r3-cxl/scen.py, turned into tests): the kernel's CPER records of
ports and devices, the severity of "memdev disabled", probe-time failures, the resume lines, masks,
the serial of a record without an address, and the Memory Module records' error types, capacity bit,
data loss and temperatures. Kernel lines are in the kernel's wording (tests/checker/fixtures/cxl,
README.md there: the project's own; no real CXL RAS sample is public yet)."""

from __future__ import annotations

from pathlib import Path

from bench.samples import SnapshotBuilder, ours
from checker.collectors.context import CollectorState
from checker.parsers.kernel_events import parse_kernel_log
from checker.schemas import CxlEvent, CxlHealth, CxlMemdev, CxlRasState, KernelEventKind, KernelLogState
from remediator.derive.cxl import CxlMemory, cxl_signals
from remediator.derive.cxl_health import health_signal
from remediator.derive.cxl_kernel import cxl_kernel_signals, fold_memdev_aer
from remediator.derive.memory import HostMemory, load_memory
from remediator.derive.reporting import error_sources
from remediator.signals import SignalValue
from tests.checker.cxl_tree import add_rows, install

K = KernelEventKind
MEM0, MEM1 = "0x5a17c0de", "0x5a17c0df"
DEVICES = [
    CxlMemdev(memdev="mem0", serial=0x5A17C0DE, host="0000:35:00.0", ports=["0000:34:01.0"]),
    CxlMemdev(memdev="mem1", serial=0x5A17C0DF, host="0000:36:00.0", ports=["0000:34:02.0"]),
]
SECTION = CxlRasState(devices=DEVICES, rasdaemon=True)


def cper(
    n: int,
    agent_type: str,
    address: str | None,
    uncor: int,
    cor: int = 0,
    *,
    uncor_mask: int = 0,
    cor_mask: int = 0,
    serial: bool = True,
    severity: str = "recoverable",
) -> str:
    """A firmware-first CXL Protocol Error record as ghes.c/cper.c/cper_cxl.c print it."""
    p = f"[9{n}.0] {{{n}}}[Hardware Error]: "
    lines = [
        "Hardware error from APEI Generic Hardware Error Source: 1",
        f"event severity: {severity}",
        f" Error 0, type: {severity}",
        "  section_type: CXL Protocol Error",
        f"   agent_type: {agent_type}",
    ]
    if address is not None:
        lines.append(f"   agent_address: {address}")
    if serial:
        lines.append("   lower_dw: 0x5a17c0de, upper_dw: 0x00000000")
    lines += [
        "   Error log length: 0x0058",
        "   CXL Error Log:",
        f"   cxl_ras_uncor_status: 0x{uncor:08x}",
        f"   cxl_ras_uncor_mask: 0x{uncor_mask:08x}",
        f"   cxl_ras_cor_status: 0x{cor:08x}",
        f"   cxl_ras_cor_mask: 0x{cor_mask:08x}",
    ]
    return "".join(p + line + "\n" for line in lines)  # fmt: skip


def log(text: str) -> KernelLogState:
    parsed = parse_kernel_log(text, "dmesg")
    assert parsed.problems == []
    return parsed.value


def signals(text: str, rasdaemon: list[SignalValue] | None = None, **kw: object) -> dict[tuple[str, str], SignalValue]:
    found = cxl_kernel_signals(log(text), kw.pop("section", SECTION), rasdaemon or [], klog=None, boot_id=None, **kw)  # type: ignore[arg-type]
    return {(s.kind, s.subject): s for s in found}


# -- 1: a kernel uncorrectable error is not swallowed by rasdaemon's corrected one ---------------------


def test_a_kernel_uncorrectable_record_upgrades_a_corrected_rasdaemon_signal() -> None:
    corrected = SignalValue("cxl_aer", MEM0, 1.0, {"uncorrectable": False, "device_error": False,
                                                   "errors": ["CRC Threshold Hit"]})  # fmt: skip
    assert signals(cper(3, "2, CXL Device", "0000:35:00.0", 0x80), [corrected]) == {}  # folded, not a second one
    assert (corrected.detail["uncorrectable"], corrected.detail["device_error"]) == (True, True)
    assert corrected.detail["errors"] == ["Memory Data ECC Error"]
    assert (corrected.detail["kernel_records"], corrected.detail["upgraded_by"]) == (1, "kernel log")
    # the same severity or a lesser one only adds the record: rasdaemon's row stays what it said
    ue = SignalValue("cxl_aer", MEM0, 1.0, {"uncorrectable": True, "device_error": True, "errors": ["X"]})
    assert signals(cper(3, "2, CXL Device", "0000:35:00.0", 0, cor=0x4), [ue]) == {}
    assert (ue.detail["errors"], ue.detail["kernel_records"], "upgraded_by" in ue.detail) == (["X"], 1, False)


# -- 2: a port's CPER record is the port's --------------------------------------------------------------


def test_a_root_port_record_is_a_port_signal_naming_the_memdevs_below() -> None:
    found = signals(cper(1, "5, CXL Root Port", "0000:34:01.0", 0x80, serial=False))
    assert list(found) == [("cxl_port_error", "0000:34:01.0")]  # no "CXL memory 0000:34:01.0"
    port = found[("cxl_port_error", "0000:34:01.0")].detail
    assert (port["uncorrectable"], port["device_error"], port["agent_type"]) == (True, False, "CXL Root Port")
    assert port["memdevs_below"] == ["mem0, serial 0x5a17c0de, 0000:35:00.0"]  # mem1 sits under 0000:34:02.0
    assert port["candidates"][0].startswith("the port 0000:34:01.0 (CXL Root Port)")


def test_a_downstream_switch_port_with_link_bits_is_a_port_signal() -> None:
    found = signals(cper(2, "6, CXL Downstream Switch Port", "0000:50:00.0", 1 << 10, serial=False))
    port = found[("cxl_port_error", "0000:50:00.0")].detail
    assert (port["device_error"], port["errors"]) == (False, ["Received Poison From Peer"])
    assert (port["memdevs_below"], port["below"]) == ([], "no memdev listed below it")
    assert not any(kind == "cxl_aer" for kind, _ in found)


# -- 3: "memdev disabled, abort error handling" takes the AER line's severity ---------------------------

DISABLED_CORRECTED = (
    "[ 7.000000] cxl_pci 0000:36:00.0: PCIe Bus Error: severity=Correctable, type=Physical Layer, (Receiver ID)\n"
    "[ 7.000100] cxl_pci 0000:36:00.0: mem1: memdev disabled, abort error handling\n"
)


def test_a_corrected_error_on_a_disabled_memdev_loses_no_memory() -> None:
    down = signals(DISABLED_CORRECTED)[("cxl_device_down", MEM1)].detail
    assert (down["memory_lost"], down["phase"]) == (False, "runtime")
    assert down["reason"] == "corrected error on a memdev already disabled (cxl disable-memdev, or its driver unbound)"
    uncorrected = DISABLED_CORRECTED.replace("severity=Correctable", "severity=Uncorrected (Non-Fatal)")
    down = signals(uncorrected)[("cxl_device_down", MEM1)].detail
    # its driver was unbound before the error: it drains as the PCIe error would, but lost no memory in use
    assert (down["memory_lost"], down["drain"], down["disabled_uncorrectable"]) == (False, True, True)
    assert down["reason"] == "uncorrectable PCIe error on a memdev already disabled (no memory in use)"
    alone = signals(DISABLED_CORRECTED.splitlines(keepends=True)[1])[("cxl_device_down", MEM1)].detail
    assert (alone["memory_lost"], alone["drain"]) == (False, False)  # no AER line at all: a ticket, not a drain


# -- 4 and 5: probe-time failures; all-ones; candidates ------------------------------------------------


def test_probe_time_failures_are_probe_phase_and_runtime_ones_lose_memory() -> None:
    found = signals(
        "[ 3.0] cxl_pci 0000:36:00.0: timeout awaiting mailbox ready, device state  fatal\n"
        "[ 4.0] cxl_pci 0000:35:00.0: timeout awaiting memory active after 60 seconds\n"
    )
    ready, media = found[("cxl_device_down", MEM1)].detail, found[("cxl_device_down", MEM0)].detail
    assert (ready["phase"], ready["memory_lost"]) == ("probe", False)
    assert ready["reason"] == "device status fatal, at probe (mailbox never ready)"
    assert (media["phase"], media["memory_lost"], media["reason"]) == (
        "probe",
        False,
        "media never became active, at probe",
    )
    runtime = signals(
        "[ 9.0] cxl_pci 0000:36:00.0: mailbox timeout (opcode: 0x4300), device state  fatal firmware-halt\n"
    )
    down = runtime[("cxl_device_down", MEM1)].detail
    assert (down["phase"], down["memory_lost"], down["all_ones"]) == ("runtime", True, True)
    assert "may read all-ones" in down["reason"]
    assert down["candidates"] == [
        "the device: CXL memory mem1, serial 0x5a17c0df, 0000:36:00.0",
        "its link: 0000:36:00.0 to port 0000:34:02.0",
        "its slot (the PCIe slot of 0000:36:00.0)",
        "the port above it: 0000:34:02.0",
    ]


FATAL = (
    "[ 5.000000] pcieport 0000:34:02.0: AER: Uncorrected (Fatal) error received: 0000:36:00.0\n"
    "[ 5.000010] cxl_pci 0000:36:00.0: PCIe Bus Error: severity=Uncorrected (Fatal), type=Inaccessible, "
    "(Unregistered Agent ID)\n"
    "[ 5.100000] cxl_pci 0000:36:00.0: mem1: frozen state error detected, disable CXL.mem\n"
)


def test_a_memdev_s_pcie_uncorrected_count_folds_into_its_cxl_signal() -> None:
    down = signals(FATAL)[("cxl_device_down", MEM1)]
    assert down.detail["pcie_aer"][0].endswith("type=Inaccessible, (Unregistered Agent ID)")
    pcie = SignalValue(
        "device_event_count", "0000:36:00.0", 1.0, {"kind": "pcie_aer_uncorrected", "disposition": "drain"}
    )
    other = SignalValue(
        "device_event_count", "0000:5e:00.0", 1.0, {"kind": "pcie_aer_uncorrected", "disposition": "drain"}
    )
    fold_memdev_aer([pcie, other, down])
    assert (pcie.detail["disposition"], pcie.detail["folded_into"]) == ("cxl_memory", f"cxl_device_down {MEM1}")
    assert other.detail["disposition"] == "drain"  # not a memdev: pcie-aer-uncorrected keeps it


# -- 10: masks ----------------------------------------------------------------------------------------


def test_masked_status_bits_do_not_count() -> None:
    masked = signals(cper(5, "2, CXL Device", "0000:35:00.0", 0x80, uncor_mask=0x80, cor=0x4, cor_mask=0x4))
    aer = masked[("cxl_aer", MEM0)].detail
    assert (aer["uncorrectable"], aer["device_error"], aer["errors"]) == (False, False, [])
    half = signals(cper(5, "2, CXL Device", "0000:35:00.0", 0x480, uncor_mask=0x80))[("cxl_aer", MEM0)].detail
    assert (half["device_error"], half["errors"]) == (False, ["Received Poison From Peer"])


# -- 11: a record without an address; a device gone from sysfs ----------------------------------------


def test_a_record_without_agent_address_is_named_by_its_serial() -> None:
    found = signals(cper(4, "2, CXL Device", None, 0x80))
    assert list(found) == [("cxl_aer", MEM0)]  # lower_dw 0x5a17c0de: the DSN, not "unknown"
    assert found[("cxl_aer", MEM0)].detail["device"] == "mem0, serial 0x5a17c0de, 0000:35:00.0"
    gone = signals(cper(4, "2, CXL Device", None, 0x80), section=CxlRasState())[("cxl_aer", MEM0)].detail
    assert (gone["serial"], gone["device"]) == (MEM0, "serial 0x5a17c0de")


def test_a_device_gone_from_sysfs_is_named_by_the_serial_remembered(tmp_path: Path) -> None:
    snap = SnapshotBuilder(tmp_path)
    install(snap)
    _, memory = cxl_signals(snap.cycle(CollectorState()).observations.cxl)
    assert memory is not None
    memory = load_memory(HostMemory(cxl=memory).dump()).cxl  # kept between reports as the service keeps it
    assert isinstance(memory, CxlMemory)
    frozen = "[ 5.1] cxl_pci 0000:36:00.0: mem1: frozen state error detected, disable CXL.mem\n"
    found = signals(frozen, section=CxlRasState(devices=[DEVICES[0]]), remembered=memory.functions)
    down = found[("cxl_device_down", MEM1)].detail
    assert (down["serial"], down["device"]) == (MEM1, "mem1, serial 0x5a17c0df, 0000:36:00.0")
    # without the memory: only the line's names
    assert ("cxl_device_down", "mem1") in signals(frozen, section=CxlRasState(devices=[DEVICES[0]]))


# -- 12: the restart and resume lines --------------------------------------------------------------


def test_resume_failed_is_memory_lost_and_resume_successful_goes_on_the_ticket() -> None:
    failed = signals(
        "[ 5.0] cxl_pci 0000:36:00.0: PCIe Bus Error: severity=Uncorrected (Non-Fatal), type=Transaction Layer, "
        "(Requester ID)\n"
        "[ 5.1] cxl_pci 0000:36:00.0: mem1: restart CXL.mem after slot reset\n"
        "[ 5.2] cxl_pci 0000:36:00.0: mem1: error resume failed\n"
    )[("cxl_device_down", MEM1)].detail
    assert (failed["memory_lost"], failed["resume"]) == (True, "failed")
    assert failed["reason"] == "error resume failed: CXL.mem not restored, its memory is lost"
    ok = signals(
        "[ 6.0] cxl_pci 0000:36:00.0: mem1: frozen state error detected, disable CXL.mem\n"
        "[ 6.1] cxl_pci 0000:36:00.0: mem1: restart CXL.mem after slot reset\n"
        "[ 6.2] cxl_pci 0000:36:00.0: mem1: error resume successful\n"
    )[("cxl_device_down", MEM1)].detail
    assert (ok["memory_lost"], ok["resume"], ok["reason"]) == (
        True,
        "successful",
        "CXL.mem disabled (frozen state error)",
    )
    assert "CXL.mem restarted after an error (error resume successful)" in ok["reasons"]
    alone = signals("[ 6.2] cxl_pci 0000:36:00.0: mem1: error resume successful\n")[("cxl_device_down", MEM1)]
    assert (alone.detail["memory_lost"], alone.detail["phase"]) == (False, "runtime")


# -- 14: the corrected record's line; GHES count ---------------------------------------------------


def test_cxl_protocol_records_still_count_as_ghes_records(tmp_path: Path) -> None:
    text = ours("cxl/kernel-cxl-errors.log")
    assert "{4}[Hardware Error]: It has been corrected by h/w and requires no further action" in text
    corrected = [e for e in log(text).events if e.kind is K.cxl_protocol_error][1]
    assert any("It has been corrected by h/w" in line for line in corrected.lines)  # one record, one event
    snap = SnapshotBuilder(tmp_path)
    install(snap)
    report = snap.cycle(CollectorState())
    report = report.model_copy(
        update={"observations": report.observations.model_copy(update={"kernel_log": log(text)})}
    )
    sources = error_sources(report, [])
    assert sources.ghes_other == 2  # the two CPER CXL Protocol Error records
    assert sources.section_types == ["cxl protocol error"]


# -- 6-9: Memory Module records ------------------------------------------------------------------------


def _health(tmp_path: Path, *rows: int) -> dict[tuple[str, str], SignalValue]:
    snap = SnapshotBuilder(tmp_path)
    install(snap)
    state = CollectorState()
    snap.cycle(state)
    state.commit()
    add_rows(snap, *rows)
    section = snap.cycle(state).observations.cxl
    assert section is not None
    return {(s.kind, s.subject): s for s in cxl_signals(section)[0]}


def test_memory_capacity_degraded_asks_for_service_and_unknown_bits_are_kept(tmp_path: Path) -> None:
    health = _health(tmp_path, 19)[("cxl_health", MEM0)].detail
    assert health["health_status"] == ["Memory Capacity Degraded", "0x10"]
    assert (health["service_requested"], health["reason"]) == (True, "Memory Capacity Degraded")


def test_an_error_event_type_asks_for_service_with_its_component(tmp_path: Path) -> None:
    health = _health(tmp_path, 17)[("cxl_health", MEM0)].detail
    assert health["service_requested"] is True
    assert health["reason"] == "Memory Media FRU Error (Unsupported Memory Media FRU, component DIMM-B2)"
    assert (health["component_id"], health["event_sub_type"]) == ("DIMM-B2", "Unsupported Memory Media FRU")
    assert health["data_lost"] is False
    # an error event type asks for service on its own, with no status field or flag set
    path = CxlHealth(event_type="Data Path Error", media_status="Normal", temperature_status="Normal")
    event = CxlEvent(table="cxl_memory_module_event", id=1, memdev="mem0", uncorrectable=False, kind="x", health=path)
    alone = health_signal(MEM0, [event], {})
    assert alone is not None
    assert (alone.detail["service_requested"], alone.detail["reason"]) == (True, "Data Path Error")
    quiet = event.model_copy(update={"health": path.model_copy(update={"event_type": "Temperature Change"})})
    assert health_signal(MEM0, [quiet], {}).detail["service_requested"] is False  # type: ignore[union-attr]


def test_all_data_lost_is_data_lost_only_after_the_media_came_up_in_this_boot(tmp_path: Path) -> None:
    # mem1's record 16 says media Normal, then 18 All Data Lost: the memory in use is gone
    lost = _health(tmp_path / "a", 16, 18)[("cxl_health", MEM1)].detail
    assert (lost["data_lost"], lost["media_status"], lost["data_lost_before_use"]) == (True, "All Data Lost", False)
    assert _health(tmp_path / "b", 14)[("cxl_health", MEM0)].detail["data_lost"] is False
    # All Data Lost with no Normal record before it in this boot (a persistent device after a dirty
    # shutdown, or one still starting): a service request, not data lost in use
    boot = _health(tmp_path / "c", 18)[("cxl_health", MEM1)].detail
    assert (boot["data_lost"], boot["data_lost_before_use"], boot["service_requested"]) == (False, True, True)
    assert (
        boot["reason"] == "media All Data Lost before its memory was in use this boot (no Normal record of it before)"
    )


def test_a_normal_record_is_remembered_within_its_boot_only(tmp_path: Path) -> None:
    snap = SnapshotBuilder(tmp_path)
    install(snap)
    state = CollectorState()
    snap.cycle(state)
    state.commit()
    add_rows(snap, 16)  # mem1 media Normal
    normal = snap.cycle(state).observations.cxl
    state.commit()
    add_rows(snap, 18)  # then All Data Lost, in the next report
    lost = snap.cycle(state).observations.cxl
    assert normal is not None
    assert lost is not None
    _, memory = cxl_signals(normal, boot_id="boot-1")
    assert memory is not None
    assert memory.media_normal == [MEM1]
    same_boot = {(s.kind, s.subject): s for s in cxl_signals(lost, memory, boot_id="boot-1")[0]}
    assert same_boot[("cxl_health", MEM1)].detail["data_lost"] is True
    rebooted = {(s.kind, s.subject): s for s in cxl_signals(lost, memory, boot_id="boot-2")[0]}
    assert rebooted[("cxl_health", MEM1)].detail["data_lost"] is False


def test_a_hot_device_lists_its_siblings_and_candidates(tmp_path: Path) -> None:
    found = _health(tmp_path / "a", 14, 15)  # mem0 48 C Normal, mem1 92 C Critical
    hot = found[("cxl_health", MEM1)].detail
    assert hot["siblings"] == [{"memdev": "mem0", "serial": MEM0, "temperature_c": 48, "temperature_status": "Normal"}]
    assert hot["siblings_hot"] is False
    # alone hot among cool siblings: the device and its slot first
    assert hot["candidates"][0] == "the device: CXL memory mem1 (serial 0x5a17c0df, 0000:36:00.0)"
    assert hot["candidates"][1] == "its slot (the PCIe slot of 0000:36:00.0, under port 0000:34:02.0)"
    both = _health(tmp_path / "b", 20, 15)  # mem0 78 C Warning too: the airflow first
    assert both[("cxl_health", MEM1)].detail["candidates"][0].startswith("the host's airflow")
    assert "candidates" not in found[("cxl_health", MEM0)].detail  # not hot


def test_a_hot_device_whose_siblings_wrote_no_record_leads_with_itself(tmp_path: Path) -> None:
    alone = _health(tmp_path / "a", 15)[("cxl_health", MEM1)].detail  # mem1 Critical; mem0 wrote nothing
    assert alone["candidates"][0] == "the device: CXL memory mem1 (serial 0x5a17c0df, 0000:36:00.0)"
    assert alone["siblings"] == [
        {
            "memdev": "mem0",
            "serial": MEM0,
            "temperature_c": None,
            "temperature_status": "unknown (no Memory Module record of it)",
        }
    ]
    assert (alone["siblings_hot"], alone["siblings_unknown"]) == (False, 1)
    # a sibling's temperature remembered from an earlier report: Warning, so the airflow leads
    snap = SnapshotBuilder(tmp_path / "b")
    install(snap)
    state = CollectorState()
    snap.cycle(state)
    state.commit()
    add_rows(snap, 20)  # mem0 78 C Warning
    earlier = snap.cycle(state).observations.cxl
    state.commit()
    add_rows(snap, 15)  # mem1 Critical, mem0 silent
    now = snap.cycle(state).observations.cxl
    assert earlier is not None
    assert now is not None
    _, memory = cxl_signals(earlier)
    hot = {(s.kind, s.subject): s for s in cxl_signals(now, memory)[0]}[("cxl_health", MEM1)].detail
    assert hot["candidates"][0].startswith("the host's airflow")
    assert hot["siblings"][0]["temperature_c"] == 78
    assert hot["siblings"][0]["remembered"] is True


def test_the_collector_records_the_ports_above_each_memdev(tmp_path: Path) -> None:
    snap = SnapshotBuilder(tmp_path)
    install(snap)
    section = snap.cycle(CollectorState()).observations.cxl
    assert section is not None
    assert [(d.memdev, d.ports) for d in section.devices] == [("mem0", ["0000:34:01.0"]), ("mem1", ["0000:34:02.0"])]
