"""The simulated `pcie_fault` fault (`pcie_link_downtrained` before: its aer_storm variant is no downtrained
link): each variant shows in the sysfs the pcie collector reads and yields the signal its rule compares;
a healthy host lists no function, and a reboot restarts the counters."""

from __future__ import annotations

import datetime as dt

import pytest

from checker.parsers.pcie import device_kind
from checker.sim import VirtualHost
from checker.sim import pcie as sim_pcie
from checker.sim.faults import Fault
from remediator.signals import SignalValue
from tests.builders.observations import T0, Watch, clean_fleet, of


def run(host: VirtualHost, minutes: range) -> list[SignalValue]:
    watch = Watch(host)
    signals: list[SignalValue] = []
    for minute in minutes:
        signals += watch(host.report(T0 + dt.timedelta(minutes=minute)))
    return signals


def faulty(variant: str, *, nvme: bool = True) -> VirtualHost:
    fleet = clean_fleet()
    host = next(h for h in fleet.hosts if any(d.spec.protocol == "NVMe" for d in h.disks) == nvme)
    host.inject(Fault("pcie_fault", 0, variant=variant, per_hour=300.0))
    return host


def test_a_healthy_host_lists_nothing_but_counts_its_functions() -> None:
    host = clean_fleet().hosts[0]
    state = host.report(T0).observations.pcie
    assert state is not None
    assert state.devices == []
    assert state.aer_counters
    assert state.functions == len(sim_pcie.topology(host))


@pytest.mark.parametrize("variant", ["width", "speed"])
def test_a_downtrained_link_names_its_device(variant: str) -> None:
    host = faulty(variant)
    signals = of(run(host, range(0, 40, 10)), "pcie_link_downtrained")
    assert signals
    target = sim_pcie.target(host, 0)
    assert {s.subject for s in signals} == {target.bdf}
    detail = signals[-1].detail
    assert (detail["device"], detail["driver"], detail["slot"]) == ("NVMe", "nvme", target.slot)
    assert detail["narrower" if variant == "width" else "slower"] is True
    assert signals[-1].value == 50.0 if variant == "width" else signals[-1].value > 0


def test_a_host_without_nvme_has_its_nic_downtrained() -> None:
    host = faulty("width", nvme=False)
    (signal, *_) = of(run(host, range(0, 20, 10)), "pcie_link_downtrained")
    assert device_kind("020000") == signal.detail["device"] == "NIC"
    assert signal.subject == "0000:3b:00.0"  # its first function: the link is the device's, not each port's


def test_an_aer_storm_counts_from_the_counters_and_a_reboot_restarts_them() -> None:
    host = faulty("aer_storm")
    signals = [s for s in run(host, range(0, 60, 10)) if s.kind == "device_event_count"]
    assert signals
    assert {s.detail["source"] for s in signals} == {"sysfs aer_dev_*"}
    assert max(s.value for s in signals) >= 200  # 300 an hour, for the 50 minutes after the baseline
    assert set(signals[-1].detail["types"]) == {"correctable:RxErr", "correctable:BadDLLP"}
    assert of(run(host, range(60, 61)), "pcie_link_downtrained") == []
