"""The simulated `gpu_xid` fault (checker/sim/xid.py): the driver's lines reach the report through the real
classifier and the centre's gpu_xid signal, and only a cold power cycle brings back a GPU off the bus."""

from __future__ import annotations

import datetime as dt

import pytest

from checker.parsers.xid import gpu_lines
from checker.schemas import Report
from checker.sim import VirtualHost
from checker.sim.xid import VARIANTS
from remediator.signals import SignalValue
from tests.builders.observations import T0, Watch, clean_fleet, host_for, of


def run(variant_index: int) -> tuple[VirtualHost, list[SignalValue], list[Report]]:
    fleet = clean_fleet(10)
    host = host_for(fleet, "gpu_xid")
    host.inject(fleet.fault("gpu_xid", variant_index))
    watch = Watch(host)
    reports = [host.report(T0 + dt.timedelta(minutes=m)) for m in (0, 1, 2)]
    signals = [s for r in reports for s in watch(r)]
    return host, signals, reports


@pytest.mark.parametrize(
    ("index", "action", "codes"), [(0, "ecc_dbe", [48]), (1, "application", [13, 31, 45]), (2, "off_bus", [79])]
)
def test_each_variant_shows_its_xids_once(index: int, action: str, codes: list[int]) -> None:
    host, signals, reports = run(index)
    assert VARIANTS[index] == host.faults[0].variant
    found = {s.detail["action"]: s for s in of(signals, "gpu_xid")}
    assert found[action].detail["codes"] == codes
    assert found[action].subject.startswith("gpu")  # nvidia-smi lists the GPU: `gpuN 00000000:…`
    assert found[action].detail["serial"] == host.gpus[index].serial  # the GPU of the fault's DIMM index
    xids = [x for r in reports for x in gpu_lines(r.observations.kernel_log).value.xids]
    assert xids  # the lines come once: the later reports carry nothing new
    assert len(of(signals, "gpu_xid")) == len(found)


def test_dbe_grows_nvidia_smis_uncorrected_count() -> None:
    _, _, reports = run(0)
    assert reports[-1].observations.gpu.gpus[0].ecc.aggregate_uncorrected == 1


def test_only_a_cold_power_cycle_brings_a_gpu_off_the_bus_back() -> None:
    host, _, _ = run(2)
    host.apply("reboot", {"kind": "warm"})
    assert host.has("gpu_xid")
    changes = host.apply("power_cycle")
    assert "gpu_xid" in changes["changed"]["cleared"]
    assert not host.has("gpu_xid")


def test_a_power_cycle_does_not_cure_a_dbe() -> None:
    host, _, _ = run(0)
    host.apply("power_cycle")
    assert host.has("gpu_xid")
