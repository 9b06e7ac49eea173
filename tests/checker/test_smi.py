"""The smi and error_reporting collectors on our two-socket snapshot tree, and the binary read that
snapshots record and replay."""

from __future__ import annotations

from pathlib import Path

from bench.samples import SnapshotBuilder, sample
from checker.collectors.base import LiveHost, SnapshotHost
from checker.cycle import run_cycle
from checker.schemas import CollectorStatus
from checker.snapshot import RecordingHost
from tests.checker.smi_tree import install, msr_bytes

INTEL = "cpuinfo/intel-i7-8650u-8thread-microcode-0xb4.txt"
AMD = "cpuinfo/amd-opteron-2380-family16-partial.txt"
ONLY = ("smi", "error_reporting")


def cycle(snap: SnapshotBuilder):  # type: ignore[no-untyped-def]
    from checker.cycle import COLLECTORS

    return run_cycle(SnapshotHost(snap.directory), hostname="h1", collectors={n: COLLECTORS[n] for n in ONLY})


def intel_tree(tmp_path: Path, **files: str) -> SnapshotBuilder:
    snap = SnapshotBuilder(tmp_path / "snap")
    snap.file("/proc/cpuinfo", sample(INTEL))
    install(snap, counts={0: 1234, 4: 2**32 - 5}, **files)
    return snap


def test_one_housekeeping_cpu_per_package_is_read(tmp_path: Path) -> None:
    report = cycle(intel_tree(tmp_path))
    smi = report.observations.smi
    assert report.collectors["smi"].status == CollectorStatus.ok, report.collectors["smi"]
    assert smi is not None
    assert smi.source == "msr"
    assert [(p.package, p.cpu, p.count) for p in smi.packages] == [(0, 0, 1234), (1, 4, 2**32 - 5)]


def test_isolated_cpus_are_never_read(tmp_path: Path) -> None:
    snap = intel_tree(tmp_path, isolated="0-2")
    install(snap, counts={4: 9}, isolated="0-2")
    msr3 = snap.path("/dev/cpu/3/msr")  # CPU 3 is package 0's first housekeeping CPU
    msr3.parent.mkdir(parents=True)
    msr3.write_bytes(msr_bytes(77))
    report = cycle(snap)
    assert report.observations.smi is not None
    assert [(p.package, p.cpu, p.count) for p in report.observations.smi.packages] == [(0, 3, 77), (1, 4, 9)]


def test_amd_has_no_smi_counter(tmp_path: Path) -> None:
    snap = intel_tree(tmp_path)
    snap.file("/proc/cpuinfo", sample(AMD))
    report = cycle(snap)
    assert report.observations.smi is None
    assert report.collectors["smi"].status == CollectorStatus.unavailable
    assert report.collectors["smi"].reason == "no MSR_SMI_COUNT on AMD: the SMI counter (MSR 0x34) is Intel's"


def test_no_msr_module_and_no_permission_say_why(tmp_path: Path) -> None:
    snap = SnapshotBuilder(tmp_path / "bare")
    snap.file("/proc/cpuinfo", sample(INTEL))
    snap.file("/sys/devices/system/cpu/online", "0-3\n")
    reason = cycle(snap).collectors["smi"].reason or ""
    assert "load the msr module" in reason
    snap = intel_tree(tmp_path)
    snap.file("/dev/cpu/0/msr.errno", "EACCES\n")
    run = cycle(snap).collectors["smi"]
    assert run.status == CollectorStatus.unavailable
    assert "permission denied" in (run.reason or "")
    snap.file("/dev/cpu/0/msr.errno", "EIO\n")
    assert "has no MSR 0x34" in (cycle(snap).collectors["smi"].reason or "")


def test_error_reporting_shows_hest_ghes_and_machinecheck(tmp_path: Path) -> None:
    report = cycle(intel_tree(tmp_path, ignore_ce="1"))
    state = report.observations.error_reporting
    assert state is not None
    assert (state.hest, state.ghes_sources, state.ghes_disabled) == (True, 2, False)
    assert (state.cmci_disabled, state.ignore_ce, state.dont_log_ce) == (False, True, False)
    empty = SnapshotBuilder(tmp_path / "none")
    run = cycle(empty).collectors["error_reporting"]
    assert run.status == CollectorStatus.unavailable


def test_a_snapshot_records_the_bytes_it_read_and_replays_them(tmp_path: Path) -> None:
    source = intel_tree(tmp_path)
    recorder = RecordingHost(SnapshotHost(source.directory), tmp_path / "copy")
    assert recorder.read_bytes("/dev/cpu/4/msr", 0x34, 8) == (2**32 - 5).to_bytes(8, "little")
    replay = SnapshotHost(tmp_path / "copy")
    assert replay.read_bytes("/dev/cpu/4/msr", 0x34, 8) == (2**32 - 5).to_bytes(8, "little")


def test_live_host_reads_bytes_at_an_offset(tmp_path: Path) -> None:
    path = tmp_path / "dev"
    path.write_bytes(b"\0" * 0x34 + (42).to_bytes(8, "little"))
    assert int.from_bytes(LiveHost().read_bytes(str(path), 0x34, 8), "little") == 42
