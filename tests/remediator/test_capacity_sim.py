"""The simulated fleet's `capacity_lost` fault, each variant, through the deriver: what it renders in the
identity, dmidecode, SEL and capacity sections, and the signal that names the part."""

from __future__ import annotations

import datetime as dt

import pytest

from checker.sim import capacity
from tests.builders.observations import T0, Watch, clean_fleet

VARIANT_INDEX = {variant: i for i, variant in enumerate(capacity.VARIANTS)}


@pytest.mark.parametrize("variant", capacity.VARIANTS)
def test_each_variant_is_short_of_its_class_and_names_the_part(variant: str) -> None:
    fleet = clean_fleet()
    host = next(h for h in fleet.hosts if h.hardware.name == "storage-epyc-1s")  # 8 DIMMs, 4 disks
    watch = Watch(host)
    before = host.report(T0)
    assert [s for s in watch(before) if s.kind == "capacity_missing"] == []
    host.inject(fleet.fault("capacity_lost", VARIANT_INDEX[variant]))
    assert host.faults[0].variant == variant
    signals = []
    reports = []
    for minute in range(1, 4):
        report = host.report(T0 + dt.timedelta(minutes=minute))
        reports.append(report)
        signals += watch(report)
    missing = [s for s in signals if s.kind == "capacity_missing"]
    assert missing, sorted({s.kind for s in signals})
    last = reports[-1].observations
    assert last.capacity is not None
    assert last.identity is not None
    if variant == "dimm_disabled":
        dimm = host.dimms[VARIANT_INDEX[variant]]
        assert dimm.locator not in {d.locator for d in last.identity.dimms}
        assert {s.subject for s in missing} >= {"dimms"}
        gone = next(s for s in missing if s.subject == "dimms").detail["gone"]
        assert gone == [{"locator": dimm.locator, "serial": dimm.serial}]  # named from the report before
        # the SEL's entry for it came in the same report: one ticket, capacity-dimm-missing's, with the entry
        folded = [f["subject"] for s in missing if s.subject == "dimms" for f in s.detail.get("sel", [])]
        assert folded == [dimm.locator]
        assert [s for s in signals if s.kind == "sel_memory_disabled"] == []
    elif variant == "cpu_disabled":
        assert last.capacity.cpus_present == host.hardware.logical_cpus - 2
        assert {s.subject for s in missing} == {"cpus"}
    else:
        gone_disk = host.disks[-1]
        assert gone_disk.serial not in {d.serial for d in last.disks or []}
        disk = [s for s in missing if s.subject == "disks"][-1]  # a state signal: every report while short
        assert gone_disk.serial in disk.detail["missing"]


def test_the_technicians_swap_of_the_disabled_dimm_brings_the_capacity_back() -> None:
    from checker.sim.repairs import replace_dimm

    fleet = clean_fleet()
    host = next(h for h in fleet.hosts if h.hardware.name == "compute-skx-2s")  # locators A1..B6, no "DIMM"
    host.inject(fleet.fault("capacity_lost", VARIANT_INDEX["dimm_disabled"]))
    dimm = host.dimms[VARIANT_INDEX["dimm_disabled"]]
    report = host.report(T0)
    assert report.observations.identity is not None
    assert len(report.observations.identity.dimms) == len(host.dimms) - 1
    swapped = replace_dimm(host, f"DIMM {dimm.locator}", "NEW00001", T0)  # the SEL's name for the slot
    assert (swapped["replaced"], swapped["cleared"]) == (dimm.locator, ["capacity_lost"])
    after = host.report(T0 + dt.timedelta(minutes=5))
    assert after.observations.identity is not None
    assert len(after.observations.identity.dimms) == len(host.dimms)
