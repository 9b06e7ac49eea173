"""The demo's staged rollout (`fleetfix up --simulate`): with the demo's baselines the simulated Opterons are
due for a new kernel build whose virtual hosts have the cputime bug back (checker/sim/hardware.py,
KERNEL_BUILDS); its canary shows the bug once its batch job runs, the rollout halts with one ticket for
the kernel's owners, and the other hosts of the class keep their kernel. Driven through the real ingest
path with the virtual hosts' own reports, on a test clock."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import select
from sqlalchemy.orm import Session

from api.embedded import DEMO_BASELINES
from checker.sim import SimulatedFleet
from checker.sim.actions import install_kernel
from checker.sim.hardware import OPTERON_DEMO_KERNEL, OPTERON_PATCHED_KERNEL
from checker.sim.processes import JOB_START_AFTER_BOOT_S
from remediator import rollouts
from remediator.ingest import ingest
from remediator.inventory import HostInventory, apply_inventory
from remediator.models import Host, Remediation, RemediationState, Rollout, RolloutState, StepState
from remediator.rules import load_ruleset
from tests.builders.reports import T0
from tests.builders.runtime import rewire, runtime_of
from ticketing.models import Ticket

RULES = load_ruleset([])
RULE = "errata-unpatched-kernel"


def test_the_demo_rollout_halts_on_its_canary_and_leaves_the_class_alone(session: Session) -> None:
    settings = runtime_of(session).settings
    rewire(session, settings=settings.model_copy(update={"baselines_path": DEMO_BASELINES}))
    fleet = SimulatedFleet(42, seed=11, fault_fraction=0)  # 6 hosts of each of the 7 classes
    hosts = [h for h in fleet.hosts if h.hardware.name == "legacy-opteron-8356"]
    assert len(hosts) == 6
    assert {h.kernel for h in hosts} == {OPTERON_PATCHED_KERNEL}
    apply_inventory(
        session, [HostInventory(**row) for row in fleet.inventory() if "legacy" in row["hostname"]], actor="t"
    )

    ingest(session, [h.report(T0) for h in hosts], ruleset=RULES)
    rollout = session.scalars(select(Rollout)).one()
    assert rollout.change == f"kernel {OPTERON_DEMO_KERNEL}"
    remediation = session.scalars(select(Remediation).where(Remediation.rule_id == RULE)).one()
    canary = fleet.by_name(session.get_one(Host, remediation.host_id).hostname)

    # cyborg's simulated driver boots the canary into the new build; the step succeeded, the fix is verified
    installed = T0 + dt.timedelta(minutes=1)
    ingest(session, [h.report(installed) for h in hosts], ruleset=RULES)
    install_kernel(canary, {"release": OPTERON_DEMO_KERNEL})
    for step in remediation.steps:
        step.state, step.finished_at = StepState.succeeded, installed
    remediation.state, remediation.settle_until = RemediationState.verifying, installed + dt.timedelta(hours=1)
    session.flush()
    clock = installed
    while rollout.state == RolloutState.running and clock < installed + dt.timedelta(minutes=20):
        clock += dt.timedelta(minutes=2)
        ingest(session, [h.report(clock) for h in hosts], ruleset=RULES)
        rollouts.evaluate(session, RULES, clock)
    assert rollout.state == RolloutState.halted
    assert clock - installed > dt.timedelta(seconds=JOB_START_AFTER_BOOT_S)  # the job started, then the bug showed
    rollouts.evaluate(session, RULES, clock + dt.timedelta(minutes=1))
    [cputime] = [r for r in rollout.comparison if r["signal"] == "cputime_exceeds_elapsed"]
    assert cputime["halt"]
    assert cputime["upgraded"]["examples"] == [canary.hostname]
    assert (cputime["not_upgraded"]["checked"], cputime["not_upgraded"]["showing"]) == (5, 0)
    # the class already runs a patched build (~3.65): no gain to expect, only its expected score, judged after the
    # bake; the halt is the cputime side effect's, never "no gain"
    [expected] = [r for r in rollout.comparison if r.get("expect") == "expected"]
    assert (expected["halt"], expected["gain"], expected["expected_score"]["score"]) == (False, None, 3.65)
    assert "no gain" not in rollout.halt_reason
    [ticket] = session.scalars(select(Ticket).where(Ticket.part == rollout.change)).all()
    assert (ticket.id, ticket.hostname, ticket.part_type) == (rollout.ticket_id, canary.hostname, "kernel")
    planned = session.scalars(select(Remediation.host_id).where(Remediation.rule_id == RULE)).all()
    assert set(planned) == {remediation.host_id}  # the rest of the class is left alone
    assert {h.kernel for h in hosts if h is not canary} == {OPTERON_PATCHED_KERNEL}
