"""CXL memory RAS: rasdaemon's cxl_* rows read incrementally and decoded, the memory devices sysfs
lists, and the signals per device. The rows are the project's own fixtures (tests/checker/fixtures/cxl,
README.md there): no real CXL RAS sample is public yet."""

from __future__ import annotations

from pathlib import Path

from bench.samples import SnapshotBuilder, ours
from checker.collectors.context import CollectorState
from checker.schemas import CollectorStatus, CxlRasState, Report
from remediator.derive.cxl import CxlMemory, cxl_signals
from remediator.derive.memory import HostMemory, load_memory
from remediator.signals import SignalValue
from tests.checker.cxl_tree import add_rows, install

MEM0, MEM1 = "0x5a17c0de", "0x5a17c0df"  # the devices' serials: the signals' subjects
FUNCTIONS = {"0000:35:00.0": MEM0, "0000:36:00.0": MEM1}  # sysfs: each memdev's PCI function -> serial


def two_cycles(tmp_path: Path, *rows: int) -> tuple[Report, Report]:
    snap = SnapshotBuilder(tmp_path)
    install(snap)
    state = CollectorState()
    first = snap.cycle(state)
    state.commit()
    add_rows(snap, *rows)
    second = snap.cycle(state)
    state.commit()
    return first, second


def test_the_first_read_takes_only_the_cursors(tmp_path: Path) -> None:
    snap = SnapshotBuilder(tmp_path)
    install(snap)
    add_rows(snap, 0, 1)  # history of unknown age
    report = snap.cycle(CollectorState())
    section = report.observations.cxl
    assert section is not None
    assert section.first_sight
    assert section.events == []
    assert section.last_ids["cxl_general_media_event"] == 2
    # no signal; only sysfs's PCI function -> serial pairs are remembered (a device gone from sysfs later)
    assert cxl_signals(section) == ([], CxlMemory(functions=FUNCTIONS))


def test_every_record_is_decoded_as_the_kernel_prints_it(tmp_path: Path) -> None:
    _first, second = two_cycles(tmp_path, *range(7))
    assert second.collectors["cxl"].status == CollectorStatus.ok
    section = second.observations.cxl
    assert section is not None
    assert not section.first_sight
    assert [(d.memdev, d.serial, d.firmware) for d in section.devices] == [
        ("mem0", 0x5A17C0DE, "FW 2.1.4"),
        ("mem1", 0x5A17C0DF, "FW 2.1.4"),
    ]
    by = {(e.table, e.memdev, e.source or ""): e for e in section.events}
    assert len(section.events) == 7
    threshold = by[("cxl_general_media_event", "mem0", "")]
    assert threshold.kind == "ECC Error"
    trace = ours("cxl/trace-cxl-events.txt").splitlines()
    media = [e for e in section.events if e.table == "cxl_general_media_event"]
    assert [e.threshold for e in media] == [True, False]
    assert [e.uncorrectable for e in media] == [False, True]
    assert [e.flags for e in media] == [["Maintenance Needed"], ["Hardware Replacement Needed"]]
    assert [e.transaction for e in media] == ["Internal Media Scrub", "Host Read"]
    # the names we decode are the trace event's own words for the same record
    for event, line in zip(media, trace[:2], strict=True):
        assert f"type='{event.kind}'" in line
        assert f"transaction_type='{event.transaction}'" in line
        assert f"hpa={event.hpa:x}" in line
        assert f"dpa={event.dpa:x}" in line
    assert (media[1].region, media[1].channel, media[1].rank) == ("region0", 1, 0)
    dram = by[("cxl_dram_event", "mem1", "")]
    assert (dram.kind, dram.hpa, dram.uncorrectable) == ("Media ECC Error", None, False)  # no region: hpa all ones
    assert f"type='{dram.kind}'" in trace[2]
    assert by[("cxl_poison_event", "mem0", "Internal")].uncorrectable
    # the kernel traces an injection from a record it builds from the DPA: source Unknown, trace type Inject
    injected = by[("cxl_poison_event", "mem1", "Unknown")]
    assert (injected.kind, injected.dpa) == ("Poison Inject", 0x3000)
    assert "trace_type=Inject" in trace[4]
    assert "source=Unknown" in trace[4]
    ue = by[("cxl_aer_ue_event", "mem1", "")]
    assert ue.errors == ["Memory Data ECC Error"]
    assert f"status: '{ue.errors[0]}'" in trace[5]
    assert f"first_error: '{ue.errors[0]}'" in trace[5]
    assert by[("cxl_aer_ce_event", "mem1", "")].errors == ["CRC Threshold Hit"]


def test_signals_per_device_name_it(tmp_path: Path) -> None:
    _first, second = two_cycles(tmp_path, *range(7))
    signals = {(s.kind, s.subject): s for s in cxl_signals(second.observations.cxl)[0]}
    assert set(signals) == {  # keyed on the serial: mem0 can be another device after a reboot or a hot-plug
        ("cxl_media_error", MEM0),
        ("cxl_media_error", MEM1),
        ("cxl_poison", MEM0),  # mem1's poison was injected: a test, not a fault
        ("cxl_aer", MEM1),
    }
    media = signals[("cxl_media_error", MEM0)]
    assert media.detail["memdev"] == "mem0"
    assert media.value == 2
    assert media.detail["serial"] == "0x5a17c0de"
    assert media.detail["host"] == "0000:35:00.0"
    assert media.detail["uncorrectable"] is True
    assert media.detail["service_requested"] is True
    assert (media.detail["dpa"], media.detail["hpa"], media.detail["region"]) == (
        "0x40001000",
        "0x1050001000",
        "region0",
    )
    quiet = signals[("cxl_media_error", MEM1)]
    assert quiet.detail["uncorrectable"] is False
    assert quiet.detail["service_requested"] is False
    assert signals[("cxl_poison", MEM0)].detail["dpa"] == "0x40001000"
    aer = signals[("cxl_aer", MEM1)]
    assert aer.detail["uncorrectable"] is True
    assert aer.detail["device_error"] is True
    assert aer.detail["error"] == "Memory Data ECC Error"


def test_hosts_without_cxl_report_unavailable_and_without_its_tables_list_the_devices(tmp_path: Path) -> None:
    plain = SnapshotBuilder(tmp_path / "plain")
    run = plain.cycle(CollectorState()).collectors["cxl"]
    assert run.status == CollectorStatus.unavailable
    assert "no CXL memory devices" in (run.reason or "")
    old = SnapshotBuilder(tmp_path / "old")
    install(old, tables=False)
    report = old.cycle(CollectorState())
    run = report.collectors["cxl"]
    # the kernel log is then the only record of the devices' errors: the centre needs their serials
    # and PCI functions to name them (tests/checker/test_cxl_log.py)
    assert (run.status, run.source) == (CollectorStatus.ok, "sysfs")
    assert "no cxl_* table" in run.problems[0]
    assert report.observations.cxl is not None
    assert report.observations.cxl.rasdaemon is False


# -- the review's findings (each of these failed on the code before) ---------------------------------


def _section(tmp_path: Path, *rows: int) -> CxlRasState:
    section = two_cycles(tmp_path, *rows)[1].observations.cxl
    assert section is not None
    return section


def _by(signals: list[SignalValue]) -> dict[tuple[str, str], SignalValue]:
    return {(s.kind, s.subject): s for s in signals}


def test_an_injected_and_cleared_poison_is_no_poison(tmp_path: Path) -> None:
    """Before: the Inject row (source Unknown, as the kernel traces it) and the Clear row counted 2: a test
    injection drained the host. Only List entries whose source is not Injected count."""
    found, _memory = cxl_signals(_section(tmp_path, 4, 8, 9))  # inject (mem1), clear (mem0), listed Injected
    assert [s.kind for s in found] == []


def test_a_poisoned_address_listed_again_counts_once(tmp_path: Path) -> None:
    """Before: every List row counted, so a list read again (`cxl list --media-errors`, a reboot) fired the
    rule again on a known entry. Now a (serial, DPA) pair counts once, kept in the host's memory; a Clear
    forgets it, and the same address poisoned again counts again."""
    first = _section(tmp_path / "a", 3)
    relisted = _section(tmp_path / "b", 7)
    cleared = _section(tmp_path / "c", 8)
    found, memory = cxl_signals(first)
    assert [(s.kind, s.subject, s.value) for s in found] == [("cxl_poison", MEM0, 1.0)]
    assert memory is not None
    memory = load_memory(HostMemory(cxl=memory).dump()).cxl  # kept between reports as the service keeps it
    found, memory = cxl_signals(relisted, memory)
    assert found == []  # the same entry, listed again: nothing
    found, memory = cxl_signals(cleared, memory)
    assert found == []
    assert memory == CxlMemory(poison=[], functions=FUNCTIONS)
    found, _ = cxl_signals(first, memory)  # poisoned again after its clear: new
    assert [s.value for s in found] == [1.0]
    same_report, _ = cxl_signals(_section(tmp_path / "d", 3, 7))  # listed twice in one report: one address
    assert [s.value for s in same_report] == [1.0]
    assert same_report[0].detail["relisted"] == 1


def test_external_poison_and_an_overflowed_list_are_said(tmp_path: Path) -> None:
    (poison,) = cxl_signals(_section(tmp_path, 10))[0]
    assert (poison.subject, poison.detail["external"], poison.detail["sources"]) == (MEM1, True, ["External"])
    assert poison.detail["overflowed"] is True  # the device's list was full: some poison is not listed
    assert poison.detail["list_flags"] == ["Overflow"]


def test_the_first_error_is_a_mask(tmp_path: Path) -> None:
    """Before: first_error 16 (BIT(4), Memory Data Parity) was read as bit 16, 'IDE Rx Error'."""
    section = _section(tmp_path, 12)
    (event,) = section.events
    assert event.errors == ["Memory Data Parity Error", "IDE Rx Error"]
    trace = ours("cxl/trace-cxl-events.txt").splitlines()
    assert f"first_error: '{event.kind}'" in trace[-1]  # the kernel's own decoding of the same record
    assert event.kind == "Memory Data Parity Error"
    (aer,) = cxl_signals(section)[0]
    assert aer.detail["error"] == "Memory Data Parity Error"
    assert aer.detail["device_error"] is True
    assert aer.detail["link_errors"] == ["IDE Rx Error"]


def test_poison_from_the_peer_is_not_the_device_s_error(tmp_path: Path) -> None:
    (aer,) = cxl_signals(_section(tmp_path, 11))[0]
    assert (aer.detail["uncorrectable"], aer.detail["device_error"]) == (True, False)
    assert aer.detail["error"] == "Received Poison From Peer"


def test_a_host_injected_media_record_is_no_uncorrectable_error(tmp_path: Path) -> None:
    (media,) = cxl_signals(_section(tmp_path, 13))[0]
    assert media.detail["transactions"] == ["Host Inject Poison"]
    assert (media.detail["uncorrectable"], media.detail["injected"]) == (False, 1)
