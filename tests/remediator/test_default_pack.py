"""The default rule pack, driven by reports: every simulated fault reaches the rule meant
for it and plans the expected first action; a healthy fleet plans nothing."""

from __future__ import annotations

import datetime as dt

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from checker.sim import FAULT_KINDS, SimulatedFleet, VirtualHost
from core.db import Database
from remediator import benchmarks
from remediator.ingest import ingest
from remediator.inventory import HostInventory, apply_inventory
from remediator.models import Host, Remediation
from remediator.rules import load_ruleset

START = dt.datetime(2026, 6, 1, tzinfo=dt.UTC)
STEP = dt.timedelta(minutes=10)
RULES = load_ruleset([])

EXPECTED: dict[str, tuple[set[str], str]] = {
    "dimm_ce_storm": ({"dimm-ce-storm"}, "drain"),
    "dimm_ce_moderate": ({"dimm-ce-ppr"}, "hard_ppr"),
    "dimm_ce_page": ({"page-ce-soft-offline"}, "soft_offline_page"),  # one weak cell: that page out of use
    "dimm_ue": ({"dimm-uncorrectable", "sel-memory-uncorrectable"}, "drain"),
    # the storm is the DIMM's evidence: it goes (never "turn CMCI off")
    "cmci_storm": ({"cmci-storm", "dimm-ce-storm"}, "drain"),
    "edac_poll_slow": ({"edac-polling-latched-slow"}, "tune_error_reporting"),
    "firmware_old_bios": ({"firmware-below-baseline"}, "reflash_firmware"),
    "firmware_old_bmc": ({"firmware-below-baseline"}, "reflash_firmware"),
    "errata_unpatched": ({"errata-unpatched-kernel"}, "install_kernel"),
    # the withdrawn build: the corrected kernel (its rollout), and a ticket to the kernel's owner for the jobs
    "cputime_wrap": ({"errata-unpatched-kernel", "cputime-exceeds-elapsed"}, "install_kernel"),
    "smart_failing": ({"disk-smart-failing"}, "ticket"),
    "smart_realloc_growing": ({"disk-reallocated-growing", "disk-grown-defects-growing"}, "ticket"),
    "nvme_critical_warning": ({"nvme-critical-warning", "nvme-spare-low", "nvme-media-errors-growing"}, "ticket"),
    "nvme_temperature": ({"nvme-temperature"}, "ticket"),
    "psu_failure": ({"psu-failure"}, "ticket"),
    "psu_input_lost": ({"psu-input-lost"}, "ticket"),
    "fan_failure": ({"fan-failure"}, "ticket"),
    "soft_lockups": ({"soft-lockups"}, "reboot"),
    "panic": ({"kernel-panic"}, "ticket"),  # it already rebooted: a person looks at the panic
    "isolated_irqs": ({"isolated-core-irqs", "irq-affinity-isolated"}, "repair_irq_affinity"),
    "isolated_tlb": ({"isolated-core-tlb-shootdowns"}, "ticket"),  # the workload's owner, not IRQ affinity
    "cxl_demotion_disabled": ({"cxl-demotion-disabled"}, "enable_demotion"),
    # the class configures 5:1 (remediator/firmware_baselines.yaml): written as configured
    "cxl_interleave_default": ({"cxl-interleave-mismatch"}, "set_interleave_weights"),
    "cxl_promotion_disabled": ({"cxl-numa-balancing-tiering"}, "set_numa_balancing"),
    "slow_host": ({"benchmark-outlier"}, "ticket"),  # judged against the rest of its class (kept for it)
    "sel_full": ({"sel-full", "sel-flood"}, ""),
    "cpu_core_errors": (
        {"mce-cpu-core-corrected"},
        "offline_cpu",
    ),  # that core out, the CPU ticketed  # cleared if history filled it, ticketed if a sensor flooded it
    # left firmware-first after an interrupted PPR: back to CMCI; a BIOS that takes SMIs by itself: a ticket
    "firmware_first_left": ({"smi-firmware-first-left"}, "restore_cmci"),
    "smi_storm": ({"smi-storm-no-errors"}, "ticket"),
    # long SMIs the stall probe sees on every core at once: a firmware ticket
    "smi_stalls": ({"all-core-stalls"}, "ticket"),
    # as long, on every core, with MSR_SMI_COUNT still: a lower-priority ticket, not an SMI one
    "stalls_not_smi": ({"all-core-stalls-not-smi"}, "ticket"),
    # CE reporting switched off by someone: a person decides, nothing is changed on the host
    "corrected_errors_ignored": ({"corrected-errors-ignored"}, "ticket"),
    # the data volume's XFS shut down (drain, then its ticket) or its ext4 remounted read-only (the same)
    "fs_readonly": ({"fs-readonly"}, "drain"),
    # a workload killed again and again: its owners' ticket, the host in service
    "oom_kills": ({"oom-kills-repeated"}, "ticket"),
    # its CPUs past their critical threshold, throttled: an airflow ticket in service (alone in its rack here)
    "rack_hot": ({"sensor-critical-temperature", "cpu-package-throttling"}, "ticket"),
    # dimm_index 0: the uncorrectable read and its poison list entry: drain, the device goes
    "cxl_media_errors": ({"cxl-media-uncorrectable", "cxl-poison"}, "drain"),
    # one port's CRC errors, its flapping link, or every port of the NIC at once: a ticket naming port and NIC
    "nic_crc_errors": (
        {"nic-crc-errors", "nic-carrier-flapping", "nic-carrier-flapping-redundant", "nic-errors-every-port"},
        "ticket",
    ),
    # an NVMe's (else the NIC's) link at half its width for 30 minutes: a ticket naming BDF, slot and device, no drain
    "pcie_fault": ({"pcie-link-downtrained"}, "ticket"),
    # one A100's row remap waits for a reset: that GPU reset on the drained host (the runner drains it first)
    "gpu_remap_pending": ({"gpu-row-remap-pending"}, "reset_gpu"),
    # an A100's Xid 48 (variant dbe, what fleet.fault("gpu_xid") gives): that GPU reset (WORKFLOW_XID_48; the runner
    # drains first), a replacement ticket only if the reset fails (checker/sim/xid.py); variant app plans nothing
    "gpu_xid": ({"gpu-xid-dbe"}, "reset_gpu"),
    # a DIMM firmware disabled (the SEL names it first), a core left out, a drive gone: a ticket naming it
    "capacity_lost": (
        {"sel-memory-disabled", "capacity-dimm-missing", "capacity-cpu-missing", "capacity-disk-missing"},
        "ticket",
    ),
}
# verify_tool_missing and verify_scope_refused show only when a verification runs (tests/cyborg/test_memtest*.py):
# no report says it
SILENT = {"unreachable", "powered_off", "agent_dead", "verify_tool_missing", "verify_scope_refused"}


def test_every_fault_kind_has_an_expectation() -> None:
    assert set(EXPECTED) | SILENT == set(FAULT_KINDS)


def faulty_host(kind: str) -> tuple[SimulatedFleet, VirtualHost]:
    fleet = SimulatedFleet(40, seed=5, fault_fraction=0.0)
    if kind == "edac_poll_slow":  # every host has the setting; it matters where the EDAC driver polls
        fleet.hosts.sort(key=lambda h: h.hardware.edac_driver != "ie31200_edac")
    for host in fleet.hosts:
        try:
            fault = fleet.fault(kind)  # type: ignore[arg-type]
            if kind == "dimm_ce_moderate":
                fault.ce_per_s = 0.5
            host.inject(fault)
        except ValueError:
            continue
        # a slow host is slow only beside its class: the rest of the class stays (and reports its scores)
        fleet.hosts = [h for h in fleet.hosts if h.hardware == host.hardware] if kind == "slow_host" else [host]
        benchmarks.clear_cache()  # another test's class may still be cached
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
    if kind == "sel_full":  # the variant decides: clear a log of history, ticket a flood's source
        flooded = host.faults[0].variant == "flood"
        assert (remediation.rule_id, remediation.steps[0].action) == (
            ("sel-flood", "ticket") if flooded else ("sel-full", "clear_sel")
        )
    else:
        assert remediation.steps[0].action == first_action
    if kind == "nic_crc_errors":  # the variant decides which of the three
        variant = host.faults[0].variant
        one_port = len(host.hardware.nic_interfaces) == 1  # every port of a one-port NIC is that port
        flapping = "nic-carrier-flapping" if one_port else "nic-carrier-flapping-redundant"  # another port: in service
        wanted = {"crc": "nic-crc-errors", "flapping": flapping, "every_port": "nic-errors-every-port"}
        assert remediation.rule_id == wanted["crc" if variant == "every_port" and one_port else variant]


@pytest.fixture
def simulated_outside(db: Database) -> dict[str, VirtualHost]:
    """The central side looks at silent hosts through the simulated fleet's BMCs and pings."""
    from cyborg.central import CentralCyborg
    from cyborg.drivers.bmc import SimulatedBmc
    from cyborg.drivers.reach import SimulatedReach
    from tests.builders.runtime import rewire, runtime_of

    hosts: dict[str, VirtualHost] = {}
    settings = runtime_of(db).settings
    rewire(db, cyborg=CentralCyborg(settings, bmc=SimulatedBmc(hosts), reach=SimulatedReach(hosts)))
    return hosts


@pytest.mark.parametrize(
    ("kind", "rule", "first_action"),
    [
        ("unreachable", "host-hung", "power_cycle"),  # the BMC says on, no ping answer: hung
        ("powered_off", "host-powered-off", "power_cycle"),  # the BMC says off: power it on
        ("agent_dead", "agent-silent", "restart_agent"),  # the host answers: never a power cycle
    ],
)
def test_a_silent_host_is_looked_at_from_outside_first(
    session: Session, db: object, simulated_outside: dict[str, VirtualHost], kind: str, rule: str, first_action: str
) -> None:
    from remediator import tasks

    fleet, host = faulty_host(kind)
    simulated_outside[host.hostname] = host
    register(session, fleet)
    recent = dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)
    host.clear({kind})  # it reported once, an hour ago, then went silent
    ingest(session, fleet.reports(recent, interval_s=60), ruleset=RULES)
    host.inject(fleet.fault(kind))  # type: ignore[arg-type]
    session.commit()
    assert tasks.mark_unreachable() == 1
    assert tasks.probe_silent_host(host.hostname) == {"unreachable": "hung"}.get(kind, kind.replace("dead", "silent"))
    session.expire_all()
    row = session.scalars(select(Host).where(Host.hostname == host.hostname)).one()
    remediation = session.scalars(select(Remediation).where(Remediation.host_id == row.id)).one()
    assert (remediation.rule_id, remediation.steps[0].action) == (rule, first_action)
    assert remediation.evidence["signal"]["detail"]["verdict"] in ("hung", "powered_off", "agent_silent")


def test_a_healthy_fleet_plans_nothing(session: Session) -> None:
    fleet = SimulatedFleet(120, seed=11, fault_fraction=0.0)
    register(session, fleet)
    for step in range(24):  # four hours
        result = ingest(session, fleet.reports(START + step * STEP, interval_s=600), ruleset=RULES)
        assert result.remediations == [], step
    assert session.scalars(select(Remediation)).all() == []
