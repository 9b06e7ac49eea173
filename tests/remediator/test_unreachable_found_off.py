"""A power cycle that finds its host off (review r2 finding 6): nothing is sent, the remediation ends without
taking its rule's next rung (whose ticket would speak of a power cycle that never happened), and the host goes
to the silent-host probe, whose `powered_off` verdict is the host-powered-off rule's."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from cyborg.central import CentralCyborg
from cyborg.commands import ActionContext
from cyborg.drivers.bmc import refuse_off
from remediator import planning, runner
from remediator.models import Host, HostState, Remediation, RemediationState, StepState
from tests.remediator.test_unreachable import RULES, FakeBmc, outside, silent_host  # noqa: F401 (fixture)


class SwitchedOffBmc(FakeBmc):
    """As every BMC driver does (cyborg/drivers/bmc.py, IfOff): a host found off is refused unless told."""

    def __init__(self, power: str | None) -> None:
        super().__init__(power)
        self.cycles: list[str] = []

    def power_cycle(
        self, hostname: str, address: str | None, ctx: ActionContext, if_off: str = "refuse"
    ) -> dict[str, Any]:
        self.cycles.append(if_off)
        if self.power == "off" and if_off == "refuse":
            raise refuse_off(hostname, address, "Chassis Power is off")
        if self.power == "on" and if_off == "power_on":
            return {"power": "none", "was": "on"}
        self.power = "on"
        return {"power": "cycle" if if_off == "refuse" else "on"}


def pending_tasks(session: Session) -> list[str]:
    return [signature.task for _, signature in session.info.get("fleetfix.pending_tasks", [])]


def test_a_hung_host_found_off_at_its_power_cycle_goes_to_host_powered_off(
    session: Session,
    db: object,
    outside: CentralCyborg,  # noqa: F811
) -> None:
    from remediator import tasks

    silent_host(session)
    bmc = SwitchedOffBmc("on")
    outside.bmc = bmc
    assert tasks.mark_unreachable() == 1
    assert tasks.probe_silent_host("h1") == "hung"
    session.expire_all()
    hung = session.scalars(select(Remediation)).one()
    assert hung.rule_id == "host-hung"
    bmc.power = "off"  # switched off between the probe and the step
    runner.advance(session, hung.id, ruleset=RULES)
    step = hung.steps[0]
    assert (step.action, step.state, step.result["found_off"]) == ("power_cycle", StepState.failed, True)
    assert hung.state == RemediationState.cancelled  # the fix was never tried: not a failure of the rule
    # not the next rung: no ticket "unreachable after a power cycle" for a host nobody power-cycled
    assert session.scalars(select(Remediation).where(Remediation.previous_id == hung.id)).all() == []
    host = session.scalars(select(Host).where(Host.hostname == "h1")).one()
    assert host.state == HostState.unreachable
    assert "remediator.probe_silent_host" in pending_tasks(session)
    session.commit()
    assert tasks.probe_silent_host("h1") == "powered_off"
    session.expire_all()
    on = session.scalars(select(Remediation).where(Remediation.id != hung.id)).one()
    assert (on.rule_id, on.steps[0].action, on.steps[0].params["if_off"]) == (
        "host-powered-off",
        "power_cycle",
        "power_on",
    )
    # held only by the rack's spacing after the first start (5 minutes); not by a day's cooldown: nothing was done
    assert on.state == RemediationState.detected
    planning.admit(session, on, RULES, on.created_at + dt.timedelta(seconds=RULES.safety.spacing_s + 1))
    runner.advance(session, on.id, ruleset=RULES)
    assert bmc.cycles == ["refuse", "power_on"]
    assert bmc.power == "on"


def test_a_host_that_came_on_before_host_powered_off_ran_is_left_to_boot(
    session: Session,
    db: object,
    outside: CentralCyborg,  # noqa: F811
) -> None:
    from remediator import tasks

    silent_host(session)
    bmc = SwitchedOffBmc("off")
    outside.bmc = bmc
    assert tasks.mark_unreachable() == 1
    assert tasks.probe_silent_host("h1") == "powered_off"
    session.expire_all()
    remediation = session.scalars(select(Remediation)).one()
    bmc.power = "on"  # a technician, or the BMC restoring power, before the step ran
    runner.advance(session, remediation.id, ruleset=RULES)
    assert remediation.steps[0].state == StepState.succeeded
    assert remediation.steps[0].result["changed"] == {"power": "none", "was": "on"}
