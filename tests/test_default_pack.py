"""The default rule pack, driven by reports: every simulated fault reaches the rule meant
for it and plans the expected first action; a healthy fleet plans nothing."""

from __future__ import annotations

import datetime as dt

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from checker.sim import FAULT_KINDS, SimulatedFleet, VirtualHost
from remediator.ingest import ingest
from remediator.inventory import HostInventory, apply_inventory
from remediator.models import Host, HostState, Remediation
from remediator.rules import load_ruleset

START = dt.datetime(2026, 6, 1, tzinfo=dt.UTC)
STEP = dt.timedelta(minutes=10)
RULES = load_ruleset([])

EXPECTED: dict[str, tuple[set[str], str]] = {
    "dimm_ce_storm": ({"dimm-ce-storm"}, "drain"),
    "dimm_ce_moderate": ({"dimm-ce-ppr"}, "hard_ppr"),
    "dimm_ue": ({"dimm-uncorrectable", "sel-memory-uncorrectable"}, "drain"),
    "cmci_storm": ({"cmci-storm"}, "tune_error_reporting"),
    "edac_poll_default": ({"edac-polling-interval"}, "tune_error_reporting"),
    "firmware_old_bios": ({"firmware-below-baseline"}, "reflash_firmware"),
    "firmware_old_bmc": ({"firmware-below-baseline"}, "reflash_firmware"),
    "errata_unpatched": ({"errata-unpatched-kernel"}, "install_kernel"),
    "smart_failing": ({"disk-smart-failing"}, "ticket"),
    "smart_realloc_growing": ({"disk-reallocated-growing"}, "ticket"),
    "nvme_critical_warning": ({"nvme-critical-warning"}, "ticket"),
    "psu_failure": ({"psu-failure"}, "ticket"),
    "fan_failure": ({"fan-failure"}, "ticket"),
    "soft_lockups": ({"soft-lockups"}, "reboot"),
    "panic": ({"kernel-panic"}, "reboot"),
    "isolated_irqs": (
        {"isolated-core-irqs", "isolated-core-tlb-shootdowns", "irq-affinity-isolated"},
        "repair_irq_affinity",
    ),
    "cxl_demotion_disabled": ({"cxl-demotion-disabled"}, "enable_demotion"),
    "cxl_interleave_default": ({"cxl-interleave-default"}, "set_interleave_weights"),
    "sel_full": ({"sel-full"}, "clear_sel"),
}


def test_every_fault_kind_has_an_expectation() -> None:
    assert set(EXPECTED) | {"unreachable"} == set(FAULT_KINDS)


def faulty_host(kind: str) -> tuple[SimulatedFleet, VirtualHost]:
    fleet = SimulatedFleet(40, seed=5, fault_fraction=0.0)
    for host in fleet.hosts:
        try:
            fault = fleet.fault(kind)  # type: ignore[arg-type]
            if kind == "dimm_ce_moderate":
                fault.ce_per_s = 0.5
            host.inject(fault)
        except ValueError:
            continue
        fleet.hosts = [host]
        return fleet, host
    raise AssertionError(f"no simulated host can have {kind}")


def register(session: Session, fleet: SimulatedFleet) -> None:
    apply_inventory(session, [HostInventory(**row) for row in fleet.inventory()], actor="test")


@pytest.mark.parametrize("kind", sorted(EXPECTED))
def test_fault_reaches_its_rule(session: Session, kind: str) -> None:
    fleet, host = faulty_host(kind)
    register(session, fleet)
    rules, first_action = EXPECTED[kind]
    remediation = None
    for step in range(60):  # ten hours of ten-minute reports at most
        ingest(session, fleet.reports(START + step * STEP, interval_s=600), ruleset=RULES)
        row = session.scalars(select(Host).where(Host.hostname == host.hostname)).one()
        remediation = session.scalars(select(Remediation).where(Remediation.host_id == row.id)).first()
        if remediation is not None:
            break
    assert remediation is not None, f"{kind} planned nothing in ten hours"
    assert remediation.rule_id in rules
    assert remediation.steps[0].action == first_action


def test_unreachable_host_is_power_cycled(session: Session, db: object) -> None:
    from remediator import tasks

    fleet, host = faulty_host("unreachable")
    register(session, fleet)
    recent = dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)
    host.down = False  # it reported once, an hour ago, then went silent
    ingest(session, fleet.reports(recent, interval_s=60), ruleset=RULES)
    host.down = True
    session.commit()
    assert tasks.mark_unreachable() == 1
    session.expire_all()
    row = session.scalars(select(Host).where(Host.hostname == host.hostname)).one()
    remediation = session.scalars(select(Remediation).where(Remediation.host_id == row.id)).one()
    assert (remediation.rule_id, remediation.steps[0].action) == ("host-unreachable", "power_cycle")
    assert row.state == HostState.remediating


def test_a_healthy_fleet_plans_nothing(session: Session) -> None:
    fleet = SimulatedFleet(120, seed=11, fault_fraction=0.0)
    register(session, fleet)
    for step in range(24):  # four hours
        result = ingest(session, fleet.reports(START + step * STEP, interval_s=600), ruleset=RULES)
        assert result.remediations == [], step
    assert session.scalars(select(Remediation)).all() == []
