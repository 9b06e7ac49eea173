"""SEL, sensors and SMART collectors, fed from the real samples through snapshots: what they report,
how they read only what is new, how their time is bounded, and how they say they cannot run."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from bench.samples import SnapshotBuilder, sample, sample_names, scan_open_json
from checker.collectors import ipmi, smart
from checker.collectors.base import CommandResult, SnapshotHost
from checker.collectors.context import CollectorState
from checker.cycle import run_cycle
from checker.parsers.ipmi_sel import parse_sel
from checker.parsers.smart import parse_smartctl_json
from checker.parsers.smart_text import parse_smartctl_text
from checker.schemas import Report, SelState

ONLY_SEL = {"sel": ipmi.collect_sel}
ONLY_SENSORS = {"sensors": ipmi.collect_sensors}
ONLY_SMART = {"smart": smart.collect}
SEL_INFO_545 = "ipmi-sel/ipmitool-sel-info-545-entries.txt"


def sel_info(entries: int, last_add: str = "07/15/2015 22:35:35", percent: int = 57) -> str:
    """`ipmitool sel info` in the shape of the 545-entry sample, with other numbers."""
    text = sample(SEL_INFO_545)
    text = text.replace("Entries          : 545", f"Entries          : {entries}")
    text = text.replace("Percent Used     : 57%", f"Percent Used     : {percent}%")
    return text.replace("Last Add Time    : 07/15/2015 22:35:35", f"Last Add Time    : {last_add}")


def sel_of(report: Report) -> SelState:
    assert report.observations.sel is not None, report.collectors["sel"]
    return report.observations.sel


ELIST_SAMPLES = {
    "ipmi-sel/ipmitool-sel-list-correctable-ecc-cpu0-dimm8-chassis-intrusion.txt": ("Correctable ECC", "CPU 0 DIMM 8"),
    "ipmi-sel/ipmitool-sel-elist-intel-s2600-uncorrectable-ecc-temp-readings-pcie.txt": ("Uncorrectable ECC", None),
    "ipmi-sel/ipmitool-sel-elist-intel-s2600-fan-redundancy-bmcfw-psu-intrusion.txt": ("Log area reset/cleared", None),
    "ipmi-sel/ipmitool-sel-list-openbmc-everest-undetermined-hw-failure.txt": (
        "Undetermined system hardware failure",
        None,
    ),
}


@pytest.mark.parametrize("name", sorted(ELIST_SAMPLES))
def test_every_ipmitool_sel_sample_through_the_collector(name: str, tmp_path: Path) -> None:
    text = sample(name)
    snap = SnapshotBuilder(tmp_path).command(ipmi.IPMITOOL_INFO, sample(SEL_INFO_545))
    snap.command(ipmi.IPMITOOL_ELIST, text)
    report = snap.cycle(collectors=ONLY_SEL)
    run = report.collectors["sel"]
    assert (run.status, run.source) == ("ok", "ipmitool")
    sel = sel_of(report)
    assert sel.entries == parse_sel(text).value
    event, component = ELIST_SAMPLES[name]
    hits = [e for e in sel.entries if e.event == event]
    assert hits, event
    if component:
        assert {e.component for e in hits} == {component}
    assert sel.last_record_id == sel.entries[-1].record_id
    assert sel.source == "ipmi"  # not the redfish collector's id space (review r5 finding 12)


def test_freeipmi_sel_where_ipmitool_is_not_installed(tmp_path: Path) -> None:
    freeipmi_info = (
        "SEL version                                      : 1.5\n"
        "Number of log entries                            : 6\n"
        "Free space remaining                             : 15888 bytes\n"
        "Recent addition timestamp                        : 07/20/2017 - 10:37:20\n"
        "Recent erase timestamp                           : 01/01/1970 - 00:00:00\n"
        "Events drop due to lack of space in SEL          : No\n"
        "Number of possible allocation units              : 909\n"
        "Amount of usable free allocation units           : 883\n"
    )
    snap = SnapshotBuilder(tmp_path).command(ipmi.FREEIPMI_INFO, freeipmi_info)
    snap.command(ipmi.FREEIPMI_LIST, sample("ipmi-sel/ipmi-sel-freeipmi-psu-failure-os-stop-postinit.txt"))
    report = snap.cycle(collectors=ONLY_SEL)
    assert report.collectors["sel"].source == "freeipmi"
    sel = sel_of(report)
    assert (sel.entry_count, sel.overflow, sel.percent_used) == (6, False, 2.9)
    psu = [e for e in sel.entries if e.event == "Power Supply Failure detected"]
    assert [e.record_id for e in psu] == [2, 3, 4, 5]
    assert {e.component for e in psu} == {"PS2"}
    assert [e.timestamp is None for e in psu] == [True, True, False, False]  # PostInit: the BMC clock was not set


def test_sel_reads_only_new_entries_and_nothing_when_nothing_changed(tmp_path: Path) -> None:
    ecc = sample("ipmi-sel/ipmitool-sel-list-correctable-ecc-cpu0-dimm8-chassis-intrusion.txt")
    lines = ecc.splitlines(keepends=True)
    snap = SnapshotBuilder(tmp_path).command(ipmi.IPMITOOL_INFO, sel_info(9, "01/28/2015 23:14:46"))
    snap.command(ipmi.IPMITOOL_ELIST, "".join(lines[:9]))
    state = CollectorState()
    first = sel_of(snap.cycle(state, collectors=ONLY_SEL))
    assert (len(first.entries), first.last_record_id) == (9, 0x1F)
    state.commit()
    # Same count and last add time: `sel info` only. (There is no elist in this snapshot any more:
    # had the collector run one, it would have failed.)
    snap.command(ipmi.IPMITOOL_ELIST, "", rc=1, stderr="must not run")
    unchanged = snap.cycle(state, collectors=ONLY_SEL)
    assert unchanged.collectors["sel"].status == "ok"
    assert (sel_of(unchanged).entries, sel_of(unchanged).last_record_id) == ([], 0x1F)
    state.commit()
    # Two entries added: only the newest two are read.
    snap.command(ipmi.IPMITOOL_INFO, sel_info(11, "02/01/2015 17:14:54"))
    snap.command(ipmi.list_argv("ipmitool", 2), "".join(lines[9:11]))
    added = sel_of(snap.cycle(state, collectors=ONLY_SEL))
    assert [e.record_id for e in added.entries] == [0x20, 0x3E]
    assert added.cleared is False


def test_a_cleared_sel_is_read_whole_and_flagged(tmp_path: Path) -> None:
    snap = SnapshotBuilder(tmp_path).command(ipmi.IPMITOOL_INFO, sel_info(545))
    snap.command(
        ipmi.IPMITOOL_ELIST, sample("ipmi-sel/ipmitool-sel-list-correctable-ecc-cpu0-dimm8-chassis-intrusion.txt")
    )
    state = CollectorState()
    snap.cycle(state, collectors=ONLY_SEL)
    state.commit()
    cleared = "   1 | 06/03/2015 | 17:38:05 | Event Logging Disabled SEL | Log area reset/cleared | Asserted\n"
    snap.command(ipmi.IPMITOOL_INFO, sel_info(1, "06/03/2015 17:38:05", percent=0))
    snap.command(ipmi.IPMITOOL_ELIST, cleared)
    sel = sel_of(snap.cycle(state, collectors=ONLY_SEL))
    assert sel.cleared is True
    assert [(e.record_id, e.event) for e in sel.entries] == [(1, "Log area reset/cleared")]


def test_a_slow_sel_keeps_what_was_printed_and_says_timeout(tmp_path: Path) -> None:
    text = sample("ipmi-sel/ipmitool-sel-elist-intel-s2600-fan-redundancy-bmcfw-psu-intrusion.txt")
    partial = "".join(text.splitlines(keepends=True)[:5])
    snap = SnapshotBuilder(tmp_path).command(ipmi.IPMITOOL_INFO, sample(SEL_INFO_545))
    snap.command(ipmi.IPMITOOL_ELIST, partial, rc=-1, timed_out=True, stderr="timed out after 60s")
    report = snap.cycle(collectors=ONLY_SEL)
    run = report.collectors["sel"]
    assert run.status == "timeout"
    assert "5 entries printed were kept" in (run.reason or "")
    assert len(sel_of(report).entries) == 5


def test_no_bmc_and_no_tool_are_unavailable(tmp_path: Path) -> None:
    no_device = "Could not open device at /dev/ipmi0 or /dev/ipmi/0 or /dev/ipmidev/0: No such file or directory"
    snap = SnapshotBuilder(tmp_path / "a").command(ipmi.IPMITOOL_INFO, "", rc=1, stderr=no_device)
    run = snap.cycle(collectors=ONLY_SEL).collectors["sel"]
    assert run.status == "unavailable"
    assert "Could not open device at /dev/ipmi0" in (run.reason or "")
    run = SnapshotBuilder(tmp_path / "b").cycle(collectors=ONLY_SEL).collectors["sel"]
    assert (run.status, run.reason) == ("unavailable", "neither ipmitool nor FreeIPMI's ipmi-sel is installed")


def test_sensors_from_the_sdr_samples(tmp_path: Path) -> None:
    snap = SnapshotBuilder(tmp_path).command(
        ipmi.SDR_ELIST, sample("ipmi-sdr/ipmitool-sdr-list-intel-s2600-healthy.txt")
    )
    sensors = snap.cycle(collectors=ONLY_SENSORS).observations.sensors
    assert sensors is not None
    kinds = {s.kind for s in sensors}
    assert {"fan", "temperature", "psu"} <= kinds
    assert all(s.unit == "RPM" for s in sensors if s.kind == "fan" and s.reading is not None)
    voltage = SnapshotBuilder(tmp_path / "v").command(
        ipmi.SDR_ELIST, sample("ipmi-sdr/ipmitool-sdr-type-voltage-list-supermicro-style.txt")
    )
    by_name = {s.name: s for s in voltage.cycle(collectors=ONLY_SENSORS).observations.sensors or []}
    assert (by_name["VDIMM AB"].kind, by_name["VDIMM AB"].reading) == ("voltage", 1.49)
    assert (by_name["CPU2 Vcore"].status, by_name["CPU2 Vcore"].reading) == ("ns", None)


# -- SMART ---------------------------------------------------------------------------------------

SMART_FACTS: dict[str, dict[str, object]] = {
    "sata-hdd-seagate-st3500418as-304-reallocated.json": {"reallocated_sectors": 304, "smart_passed": True},
    "sata-hdd-seagate-st3200820as-errorlog-98.json": {"exit_flags": ["error_log_has_errors"], "smart_passed": True},
    "sata-ssd-kingston-sa400-exit4.json": {"exit_flags": ["command_failed"], "smart_passed": True},
    "megaraid-sat-wd4000fyyx-attrcheck-warning.json": {"exit_status": 4, "model": "WD4000FYYX"},
    "scsi-seagate-st373453lc-260-grown-defects.json": {"grown_defects": 260, "protocol": "SCSI"},
    "nvme-samsung970evo-media-errors.json": {"media_errors": 7, "nvme_critical_warning": 0},
    "sata-ssd-kingston-kc400-retired-block.json": {"reallocated_sectors": 1},
    "nvme-micron7450-healthy.json": {"protocol": "NVMe", "media_errors": 0},
}


def smart_snapshot(tmp_path: Path, text: str, device: str = "/dev/sda", kind: str = "sat") -> SnapshotBuilder:
    snap = SnapshotBuilder(tmp_path).command(smart.SCAN_JSON, scan_open_json([(device, kind, "ATA")]))
    return snap.command(["smartctl", "-a", "-j", "-d", kind, device], text)


@pytest.mark.parametrize("name", sample_names("smartctl-json"))
def test_every_smartctl_json_sample_through_the_collector(name: str, tmp_path: Path) -> None:
    text = sample(name)
    report = smart_snapshot(tmp_path, text).cycle(collectors=ONLY_SMART)
    run = report.collectors["smart"]
    assert (run.status, run.source) == ("ok", "smartctl"), run
    (disk,) = report.observations.disks or []
    assert disk == parse_smartctl_json(text, device="/dev/sda").value
    for field, value in SMART_FACTS.get(name.split("/")[-1], {}).items():
        assert getattr(disk, field) == value, field


def test_smartctl_that_could_not_open_the_device_is_reported_with_its_flags(tmp_path: Path) -> None:
    report = smart_snapshot(tmp_path, sample("smartctl-json/smartctl-error-no-device.json")).cycle(
        collectors=ONLY_SMART
    )
    (disk,) = report.observations.disks or []
    assert "device_open_failed" in disk.exit_flags
    assert disk.smart_passed is None
    assert any("smartctl error" in p for p in report.collectors["smart"].problems)


@pytest.mark.parametrize("name", sample_names("smartctl-text"))
def test_every_smartctl_text_sample_through_the_pre_json_fallback(name: str, tmp_path: Path) -> None:
    text = sample(name)
    usage_error = "=======> UNRECOGNIZED OPTION: j\n"
    snap = SnapshotBuilder(tmp_path).command(smart.SCAN_JSON, usage_error, rc=1)
    snap.command(smart.SCAN_TEXT, "/dev/sdc -d scsi # /dev/sdc, SCSI device\n")
    snap.command(["smartctl", "-a", "-d", "scsi", "/dev/sdc"], text, rc=0)
    report = snap.cycle(collectors=ONLY_SMART)
    assert report.collectors["smart"].source == "smartctl-text"
    (disk,) = report.observations.disks or []
    assert disk == parse_smartctl_text(text, device="/dev/sdc").value
    if "FAILED-reallocated" in name:
        assert (disk.smart_passed, disk.reallocated_sectors) == (False, 4049)


def test_smart_unavailable_without_smartctl_or_devices(tmp_path: Path) -> None:
    run = SnapshotBuilder(tmp_path / "a").cycle(collectors=ONLY_SMART).collectors["smart"]
    assert (run.status, run.reason) == ("unavailable", "smartctl is not installed")
    snap = SnapshotBuilder(tmp_path / "b").command(smart.SCAN_JSON, scan_open_json([]))
    run = snap.cycle(collectors=ONLY_SMART).collectors["smart"]
    assert run.status == "unavailable"
    assert "found no devices" in (run.reason or "")


def test_one_device_that_hangs_does_not_hide_the_others(tmp_path: Path) -> None:
    snap = SnapshotBuilder(tmp_path).command(
        smart.SCAN_JSON, scan_open_json([("/dev/sda", "sat", "ATA"), ("/dev/sdb", "sat", "ATA")])
    )
    snap.command(["smartctl", "-a", "-j", "-d", "sat", "/dev/sda"], "", rc=-1, timed_out=True, stderr="timed out")
    snap.command(
        ["smartctl", "-a", "-j", "-d", "sat", "/dev/sdb"],
        sample("smartctl-json/sata-hdd-seagate-st3500418as-304-reallocated.json"),
    )
    report = snap.cycle(collectors=ONLY_SMART)
    assert report.collectors["smart"].status == "ok"
    assert [d.reallocated_sectors for d in report.observations.disks or []] == [304]
    assert any(p.startswith("/dev/sda:") for p in report.collectors["smart"].problems)


class SlowHost(SnapshotHost):
    """A snapshot whose commands take a while, as a slow BMC or a spinning-up disk does."""

    def __init__(self, directory: Path, delay_s: float) -> None:
        super().__init__(directory)
        self.delay_s = delay_s
        self.ran: list[list[str]] = []

    def run(self, argv: list[str], *, timeout_s: float) -> CommandResult:
        self.ran.append(argv)
        time.sleep(self.delay_s)
        return super().run(argv, timeout_s=timeout_s)


def test_a_collector_out_of_time_reports_timeout_and_keeps_what_it_read(tmp_path: Path) -> None:
    devices = [(f"/dev/sd{c}", "sat", "ATA") for c in "abcdefgh"]
    snap = SnapshotBuilder(tmp_path).command(smart.SCAN_JSON, scan_open_json(devices))
    for name, kind, _ in devices:
        snap.command(
            ["smartctl", "-a", "-j", "-d", kind, name], sample("smartctl-json/sata-hdd-seagate-exos-x16-healthy.json")
        )
    host = SlowHost(tmp_path, delay_s=0.3)
    report = run_cycle(host, hostname="slow", collectors=ONLY_SMART, timeouts={"smart": 1.0})
    run = report.collectors["smart"]
    assert run.status == "timeout"
    read = len(report.observations.disks or [])
    assert 0 < read < len(devices)
    assert f"{read} of {len(devices)} devices read" in (run.reason or "")
    assert len(host.ran) == read + 1  # the scan, then one device each; none started past the budget
