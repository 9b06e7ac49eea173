"""The simulated GPU class and its fault: a healthy A100 host's nvidia-smi says nothing is wrong, a pending
row remap shows in nvidia-smi and as the driver's Xid 63 line and goes with a reset on a drained host, a
remapping failure stays whatever the host does."""

from __future__ import annotations

import datetime as dt

import pytest

from checker.sim import SimulatedFleet, VirtualHost
from checker.sim.gpu import gpus_of, nvidia_smi_xml
from checker.sim.hardware import HARDWARE_CLASSES
from remediator.signals import SignalValue
from tests.builders.observations import T0, Watch, clean_fleet, of

GPU_CLASS = "gpu-a100-8x"


def gpu_host(variant: str = "pending") -> tuple[SimulatedFleet, VirtualHost]:
    fleet = clean_fleet()
    host = next(h for h in fleet.hosts if h.hardware.name == GPU_CLASS)
    fault = fleet.fault("gpu_remap_pending", 1)
    fault.variant = variant
    host.inject(fault)
    return fleet, host


def run(host: VirtualHost, watch: Watch, minutes: range) -> list[SignalValue]:
    signals: list[SignalValue] = []
    for minute in minutes:
        signals += watch(host.report(T0 + dt.timedelta(minutes=minute)))
    return signals


def test_the_gpu_class_is_in_the_fleet_and_healthy_gpus_say_nothing() -> None:
    assert GPU_CLASS in {hw.name for hw in HARDWARE_CLASSES}
    fleet = clean_fleet()
    host = next(h for h in fleet.hosts if h.hardware.name == GPU_CLASS)
    report = host.report(T0)
    assert report.collectors["gpu"].status == "ok"
    assert report.observations.gpu is not None
    gpus = report.observations.gpu.gpus
    assert [g.bdf for g in gpus][:2] == ["00000000:07:00.0", "00000000:0F:00.0"]
    assert len({g.serial for g in gpus}) == len({g.uuid for g in gpus}) == 8
    assert all(g.ecc.aggregate_uncorrected == 0 and g.memory_repair.remap_pending is False for g in gpus)
    assert nvidia_smi_xml(host).startswith('<?xml version="1.0" ?>\n<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12')
    watch = Watch(host)
    assert [s for s in run(host, watch, range(1, 20)) if s.kind.startswith("gpu")] == []
    other = next(h for h in fleet.hosts if not h.hardware.gpus)
    assert other.report(T0).collectors["gpu"].status == "unavailable"
    assert other.report(T0).observations.gpu is None


def test_a_pending_remap_shows_and_a_reset_on_a_drained_host_applies_it() -> None:
    _, host = gpu_host("pending")
    watch = Watch(host)
    first = host.report(T0)
    xid = [line for e in first.observations.kernel_log.events for line in e.lines if "NVRM: Xid" in line]
    assert len(xid) == 1
    assert "63, pid='<unknown>', name=<unknown>, Row Remapper: New row (0x" in xid[0]
    assert "marked for remapping, reset gpu to activate." in xid[0]
    signals = watch(first) + run(host, watch, range(1, 5))
    pending = of(signals, "gpu_remap_pending")
    [subject] = {s.subject for s in pending}
    [gpu] = [g for g in gpus_of(host) if g.remap_pending]
    assert subject == f"gpu{gpu.index} {gpu.spec.bdf}"
    assert pending[0].detail["serial"] == gpu.serial
    with pytest.raises(ValueError, match="not drained"):
        host.apply("reset_gpu", {"gpu": gpu.index})
    with pytest.raises(ValueError, match="refused: GPU index"):
        host.apply(
            "reset_gpu",
            {"gpu": gpu.index, "bdf": "00000000:BD:00.0" if gpu.index != 7 else "0000:07:00.0", "drained": True},
        )
    changed = host.apply("reset_gpu", {"gpu": gpu.index, "bdf": gpu.spec.bdf, "drained": True})["changed"]
    assert (changed["before"]["remap_pending"], changed["after"]["remap_pending"]) == (True, False)
    assert changed["cleared"] == ["gpu_remap_pending"]
    assert of(run(host, watch, range(5, 10)), "gpu_remap_pending") == []
    # the remapped row stays counted
    last = host.report(T0 + dt.timedelta(minutes=11)).observations.gpu
    assert last is not None
    assert last.gpus[gpu.index].memory_repair.remapped_uncorrected == 1


def test_a_remapping_failure_stays_after_a_reset() -> None:
    _, host = gpu_host("failure")
    watch = Watch(host)
    failures = of(run(host, watch, range(0, 5)), "gpu_remap_failure")
    assert failures
    assert failures[0].detail["banks_without_spare"] == 1
    [gpu] = [g for g in gpus_of(host) if g.remap_failure]
    changed = host.apply("reset_gpu", {"gpu": gpu.index, "drained": True})["changed"]
    assert changed["after"]["remap_failure"] is True
    assert changed["cleared"] == []
    assert of(run(host, watch, range(5, 10)), "gpu_remap_failure")
    assert host.has("gpu_remap_pending")
