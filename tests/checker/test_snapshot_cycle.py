"""The full check cycle over snapshots: a rich snapshot built from the real samples, the
`fleetfix check` and `fleetfix snapshot` commands, recording and replaying, and the report's bounds."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from api.cli import app as cli
from bench.samples import BOOT_ID, SnapshotBuilder, journal_records, rich_snapshot, sample
from checker.collectors import kernel_log
from checker.collectors.base import LiveHost, SnapshotHost
from checker.collectors.context import Context
from checker.cycle import COLLECTORS, bound_report, report_size, run_cycle
from checker.schemas import CollectorStatus, KernelEvent, KernelEventKind, KernelLogState, Report
from checker.snapshot import FORMAT_VERSION, SnapshotError, capture, read_meta

K = KernelEventKind
runner = CliRunner()


def comparable(report: Report) -> dict[str, object]:
    """A report without what differs between two runs (ids, times, durations)."""
    doc = report.model_dump(mode="json", exclude={"report_id", "captured_at"})
    for run in doc["collectors"].values():
        run["duration_ms"] = 0
    return doc


def test_rich_snapshot_every_collector_reports_what_the_samples_show(tmp_path: Path) -> None:
    report = rich_snapshot(tmp_path / "snap").cycle()
    assert {name: run.status for name, run in report.collectors.items()} == dict.fromkeys(COLLECTORS, "ok")
    obs = report.observations
    assert report.host.boot_id == BOOT_ID
    assert report.host.machine_id == "0123456789abcdef0123456789abcdef"

    # EDAC: the i10nm DIMM with 4 corrected errors, and the poll interval.
    assert obs.edac is not None
    assert obs.edac.poll_msec == 1000
    (mc,) = obs.edac.controllers
    (dimm,) = mc.dimms
    assert (mc.mc, dimm.label, dimm.ce_count, dimm.ue_count) == (7, "CPU_SrcID#1_MC#3_Chan#0_DIMM#0", 4, 0)
    # rasdaemon: the S2600KPR DIMM's 5539 CEs, summed over its mc_event rows.
    assert obs.rasdaemon is not None
    (total,) = obs.rasdaemon.dimm_totals
    assert (total.label, total.err_type, total.err_count) == ("CPU_SrcID#1_Ha#0_Chan#0_DIMM#0", "Corrected", 5539)
    assert [e.id for e in obs.rasdaemon.memory_events] == [1, 2, 3]
    assert obs.rasdaemon.last_ids == {"mc_event": 3, "aer_event": 0, "memory_failure_event": 0, "mce_record": 85}
    # Kernel log from /dev/kmsg: sb_edac's decoded block and its CE line are one event.
    log = obs.kernel_log
    assert log is not None
    assert (log.source, log.first_seq, log.last_seq, log.lost_records) == ("kmsg", 100, 107, 0)
    assert [(e.kind, e.subject, e.seq, len(e.lines)) for e in log.events] == [
        (K.mce_logged, None, 100, 1),
        (K.edac_ce, "CPU_SrcID#0_Ha#0_Chan#2_DIMM#0", 101, 7),
    ]
    assert log.events[1].lines[0].startswith("6,101,")
    # SEL: eight correctable ECC entries on CPU 0 DIMM 8; 545 entries, 57% full.
    sel = obs.sel
    assert sel is not None
    assert (sel.entry_count, sel.percent_used, sel.overflow) == (545, 57.0, False)
    ecc = [e for e in sel.entries if e.event == "Correctable ECC"]
    assert len(ecc) == 8
    assert {(e.sensor_type, e.component, e.direction) for e in ecc} == {("Memory", "CPU 0 DIMM 8", "asserted")}
    assert sel.last_record_id == 0x3E
    assert sel.last_add_time == "07/15/2015 22:35:35"
    assert obs.sensors is not None
    assert any(s.kind == "fan" for s in obs.sensors)
    # SMART: the disk that passes with 304 reallocated sectors; the NVMe with 7 media errors.
    assert obs.disks is not None
    sda, nvme = obs.disks
    assert (sda.device, sda.model, sda.smart_passed, sda.reallocated_sectors) == ("/dev/sda", "ST3500418AS", True, 304)
    assert (nvme.protocol, nvme.media_errors, nvme.nvme_critical_warning) == ("NVMe", 7, 0)
    # MCE from rasdaemon's mce_record: corrected DRAM ECC errors on CPU 2, bank 17.
    assert obs.mce is not None
    assert len(obs.mce) == 3
    assert {(m.cpu, m.bank, m.error_class, m.corrected, m.address) for m in obs.mce} == {
        (2, 17, "memory", True, "0x27aad20c0")
    }
    assert obs.mce[0].status == "0x9c2041000000011b"
    assert obs.rasdaemon.mce_records == obs.mce  # the same rows, read by the rasdaemon collector too
    assert report.collectors["mce"].source == "rasdaemon"
    # Identity: the i7-8650U's microcode, isolated cores, DIMM inventory and firmware.
    ident = obs.identity
    assert ident is not None
    (cpu,) = ident.cpus
    assert (cpu.family, cpu.model, cpu.stepping, cpu.microcode, cpu.logical_cpus) == (6, 142, 10, 0xB4, 8)
    assert (ident.kernel, ident.isolated_cpus, ident.nohz_full_cpus) == ("5.15.0-91-generic", [2, 3], [2, 3])
    assert ident.dimms
    assert all(d.serial for d in ident.dimms)
    fw = ident.firmware
    assert (fw.bios_vendor, fw.bios_version, fw.system_product, fw.bmc_firmware) == (
        "American Megatrends Inc.",
        "3.0b",
        "X9DRT-P",
        "1.17",
    )
    assert [(n.interface, n.driver, n.firmware) for n in fw.nics] == [("eth0", "e1000e", "0.5-4")]
    assert fw.nvme == {"nvme0": "2B2QEXE7"}
    # Interrupts: per-CPU rows (MCE, MCP) and affinities; memory tiers: a CPU-less 128 GB node.
    irq = obs.interrupts
    assert irq is not None
    assert irq.cpu_count == 4
    rows = {r.name: r.per_cpu for r in irq.rows}
    assert rows["MCE"] == [0, 0, 0, 0]
    assert all(n > 2000 for n in rows["MCP"])
    assert irq.irq_affinity == {"0": [0, 1, 2, 3], "8": [0, 1], "16": [2]}
    assert irq.cpus == [0, 1, 2, 3]
    # Processes on the isolated cores: trader's threads on CPUs 2 and 3, the feed handler on 3.
    assert obs.isolated_workload is not None
    assert [(p.pid, p.threads_by_cpu) for p in obs.isolated_workload.processes] == [
        (4242, {"2": 2, "3": 1}),
        (5150, {"3": 1}),
    ]
    # The cputime watch: the same user processes (not kthreadd's children, not the zombie), all within their time.
    assert obs.cputime is not None
    assert (obs.cputime.checked, obs.cputime.flagged, obs.cputime.complete) == (4, 0, True)
    tiers = obs.memory_tiers
    assert tiers is not None
    assert [(n.node, n.cpus, n.memory_mb) for n in tiers.nodes][1] == (1, [], 128000)
    assert (tiers.demotion_enabled, tiers.numa_balancing) == (False, 1)
    # nvidia-smi: the A10G, its remapped rows read, nothing pending.
    assert obs.gpu is not None
    [gpu] = obs.gpu.gpus
    assert (gpu.bdf, gpu.product, gpu.memory_repair.remap_pending) == ("00000000:00:1E.0", "NVIDIA A10G", False)
    # What leaves the host is a valid report.
    assert Report.model_validate_json(report.model_dump_json()) == report


def test_check_command_prints_the_snapshot_report_as_json(tmp_path: Path) -> None:
    snap = rich_snapshot(tmp_path / "snap").directory
    result = runner.invoke(cli, ["check", "--snapshot", str(snap), "--format", "json"])
    assert result.exit_code == 0, result.output
    report = Report.model_validate(json.loads(result.output))
    assert report.host.hostname == "snap-host"  # from meta.json
    assert report.observations.disks is not None
    assert report.observations.disks[0].reallocated_sectors == 304


def test_check_command_text_lists_every_collector_with_its_source(tmp_path: Path) -> None:
    snap = rich_snapshot(tmp_path / "snap").directory
    result = runner.invoke(cli, ["check", "--snapshot", str(snap)])
    assert result.exit_code == 0, result.output
    for name in COLLECTORS:
        assert re.search(rf"^  {name}\s+ok\s", result.output, re.M), name
    assert "[kmsg]" in result.output
    assert "no Asserted/Deasserted column" in result.output


def test_check_command_refuses_a_newer_snapshot_format(tmp_path: Path) -> None:
    snap = rich_snapshot(tmp_path / "snap").directory
    (snap / "meta.json").write_text(json.dumps({"format_version": FORMAT_VERSION + 1, "hostname": "x"}))
    result = runner.invoke(cli, ["check", "--snapshot", str(snap)])
    assert result.exit_code == 2
    with pytest.raises(SnapshotError, match="format_version"):
        read_meta(snap)


def test_recording_a_snapshot_and_replaying_it_gives_the_same_report(tmp_path: Path) -> None:
    original = rich_snapshot(tmp_path / "original")
    first, recorder = capture(tmp_path / "copy", hostname="snap-host", inner=original.host())
    replayed = run_cycle(SnapshotHost(tmp_path / "copy"), hostname="snap-host")
    assert comparable(replayed) == comparable(first) == comparable(original.cycle())
    assert (tmp_path / "copy/root/var/lib/rasdaemon/ras-mc_event.db").is_file()
    assert (tmp_path / "copy/root/dev/kmsg").read_text() == (tmp_path / "original/root/dev/kmsg").read_text()
    commands = json.loads((tmp_path / "copy/commands.json").read_text())
    assert {"argv": ["smartctl", "--scan-open", "-j"], "rc": 0, "stdout": "commands/smartctl_--scan-open_-j.out"} in (
        commands
    )
    assert recorder.files_written > 20
    meta = read_meta(tmp_path / "copy")
    assert (meta["hostname"], meta["format_version"], meta["kernel"]) == ("snap-host", 1, "5.15.0-91-generic")


def test_snapshot_command_captures_this_host_and_check_replays_it(tmp_path: Path) -> None:
    snap = tmp_path / "here"
    result = runner.invoke(cli, ["snapshot", str(snap), "--hostname", "this-host"])
    assert result.exit_code == 0, result.output
    assert f"snapshot of this-host in {snap}" in result.output
    meta = json.loads((snap / "meta.json").read_text())
    assert (meta["hostname"], meta["format_version"]) == ("this-host", 1)
    assert (snap / "root/proc/interrupts").is_file()
    assert (snap / "root/proc/cmdline").is_file()
    records = (snap / "root/dev/kmsg").read_text().splitlines()
    assert records
    assert all(re.match(r"^\d+,\d+,\d+,[^;]*;", r) for r in records if not r.startswith(" "))
    commands = json.loads((snap / "commands.json").read_text())
    assert all(isinstance(c["argv"], list) and isinstance(c["rc"], int) for c in commands)
    replay = runner.invoke(cli, ["check", "--snapshot", str(snap), "--format", "json"])
    report = Report.model_validate(json.loads(replay.output))
    assert report.host.hostname == "this-host"
    assert report.collectors["kernel_log"].status == "ok"
    assert report.collectors["kernel_log"].source == "kmsg"
    again = runner.invoke(cli, ["snapshot", str(snap)])
    assert again.exit_code == 2
    assert "not empty" in again.output


def test_check_on_this_host_is_honest_about_what_it_cannot_read() -> None:
    result = runner.invoke(cli, ["check", "--format", "json"])
    assert result.exit_code == 0, result.output
    report = Report.model_validate(json.loads(result.output))
    runs = report.collectors
    assert set(runs) == set(COLLECTORS)
    assert runs["interrupts"].status == "ok"
    assert runs["identity"].status == "ok"
    for name, run in runs.items():
        assert run.status in ("ok", "unavailable"), (name, run)
        if run.status == "unavailable":
            assert run.reason, name
    if not Path("/sys/devices/system/edac/mc").exists():
        assert runs["edac"].status == "unavailable"
        assert "no EDAC" in (runs["edac"].reason or "")


def test_a_collector_that_crashes_costs_only_its_own_section(tmp_path: Path) -> None:
    def broken(ctx: Context) -> None:
        raise RuntimeError("a bug")

    snap = rich_snapshot(tmp_path / "snap")
    report = run_cycle(snap.host(), hostname="h", collectors={"broken": broken, "edac": COLLECTORS["edac"]})
    assert report.collectors["broken"].status == CollectorStatus.error
    assert report.collectors["broken"].reason == "RuntimeError: a bug"
    assert report.collectors["edac"].status == "ok"
    assert report.observations.edac is not None


def test_a_missing_snapshot_collects_nothing_and_says_why(tmp_path: Path) -> None:
    report = run_cycle(SnapshotHost(tmp_path), hostname="empty")
    statuses = {name: run.status for name, run in report.collectors.items()}
    assert statuses == dict.fromkeys(COLLECTORS, "unavailable")
    assert all(run.reason for run in report.collectors.values())


def test_reports_are_bounded_in_size_with_counts_of_what_was_cut() -> None:
    line = "EDAC MC0: 1 CE memory read error on DIMM_A1 " + "x" * 4000
    events = [
        KernelEvent(kind=K.edac_ce, seq=n, subject="DIMM_A1", lines=[line] * 40, lines_dropped=0) for n in range(500)
    ]
    report = run_cycle(SnapshotHost(Path("/nonexistent")), hostname="big", collectors={})
    report.observations.kernel_log = KernelLogState(source="kmsg", events=events)
    assert report_size(report) > 50_000_000
    bounded = bound_report(report, 1_000_000)
    assert report_size(bounded) <= 1_000_000
    state = bounded.observations.kernel_log
    assert state is not None
    assert state.truncated + len(state.events) == 500
    assert state.truncated > 0
    assert state.events[-1].seq == 499  # the newest are kept
    assert {(len(e.lines), e.lines_dropped) for e in state.events} == {(1, 39)}  # lines go before events


def test_live_kmsg_reads_records_with_sequence_numbers() -> None:
    host = LiveHost()
    try:
        first = host.read_kmsg()
        assert first is not None
        assert re.match(r"^\d+,\d+,\d+,", first)
        seqs = [int(r.split(",")[1]) for r in first.splitlines() if not r.startswith(" ")]
        assert seqs == sorted(seqs)
        # The descriptor stays open: the next read returns only records logged since.
        later = [int(r.split(",")[1]) for r in (host.read_kmsg() or "").splitlines() if not r.startswith(" ")]
        assert all(seq > seqs[-1] for seq in later)
    finally:
        host.close()


def test_recording_keeps_growing_logs_and_fallback_commands(tmp_path: Path) -> None:
    mcelog = sample("mcelog/mcelog-skylake-sp-uncorrected-l2-architectural-only.txt")
    original = SnapshotBuilder(tmp_path / "original").boot().file("/var/log/mcelog", mcelog)
    original.command(
        kernel_log.JOURNAL_FIRST, journal_records(sample("kernel-log/dmesg-T-sb-edac-sandybridge-ce-read.log"))
    )
    first, _ = capture(tmp_path / "copy", hostname="h", inner=original.host())
    assert (first.collectors["kernel_log"].source, first.collectors["mce"].source) == ("journal", "mcelog-file")
    assert (tmp_path / "copy/root/var/log/mcelog").read_text() == mcelog
    replayed = run_cycle(SnapshotHost(tmp_path / "copy"), hostname="h")
    assert comparable(replayed) == comparable(first)
