"""A silent host is looked at from outside before anything is done to it: the BMC's power state and a
ping decide between a hung host, one that is off, a dead agent, and not knowing."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from core.db import Database
from cyborg.central import CentralCyborg, Target
from cyborg.central.settings import CyborgSettings
from cyborg.commands import ActionContext, ActionFailed
from cyborg.drivers.bmc import IpmitoolBmc
from cyborg.drivers.reach import LiveReach
from remediator import runner
from remediator.ingest import ingest
from remediator.inventory import HostInventory, apply_inventory
from remediator.models import Host, HostState, Remediation, RemediationState, StepState
from remediator.rules import load_ruleset
from remediator.unreachable import probe, verdict_of
from tests.builders.reports import T0, edac_report
from tests.builders.runtime import rewire
from tests.cyborg.helpers import RecordedSystem

RULES = load_ruleset([])


@pytest.mark.parametrize(
    ("power", "ping", "verdict"),
    [
        ("on", "no_answer", "hung"),
        ("off", "no_answer", "powered_off"),
        ("on", "answered", "agent_silent"),
        ("unknown", "answered", "agent_silent"),
        ("unknown", "no_answer", "unconfirmed"),  # nothing proves it is hung
        ("on", "not_probed", "unconfirmed"),
        ("unknown", "not_probed", "unconfirmed"),
    ],
)
def test_the_verdict_table(power: str, ping: str, verdict: str) -> None:
    assert verdict_of(power, ping) == verdict


def test_ipmitool_reads_the_chassis_power_state(tmp_path: Path) -> None:
    password = tmp_path / "pw"
    system = RecordedSystem()
    bmc = IpmitoolBmc("admin", password, system)
    system.answer(
        ["ipmitool", "-I", "lanplus", "-H", "h1-ipmi", "-U", "admin", "-f", str(password)], "Chassis Power is off\n"
    )
    assert bmc.power_state("h1", "h1-ipmi", ActionContext(system, timeout_s=30)) == "off"
    assert system.ran[-1][-3:] == ["chassis", "power", "status"]
    odd = RecordedSystem()
    odd.answer(["ipmitool"], "Error: Unable to establish IPMI v2 / RMCP+ session\n", rc=1)
    with pytest.raises(ActionFailed):
        IpmitoolBmc("admin", password, odd).power_state("h1", "h1-ipmi", ActionContext(odd, timeout_s=30))


def test_live_ping_and_a_missing_restart_hook(tmp_path: Path) -> None:
    system = RecordedSystem(tools={"ping"})
    system.answer(["ping"], "5 packets transmitted, 0 received, 100% packet loss\n", rc=1)
    reach = LiveReach(system, {})
    ctx = ActionContext(system, timeout_s=30)
    assert reach.ping("h1", "10.0.0.5", ctx) is False
    assert system.ran[-1] == ["ping", "-c", "5", "-W", "2", "-q", "--", "10.0.0.5"]
    assert LiveReach(RecordedSystem(), {}).ping("h1", "10.0.0.5", ctx) is None  # no ping here: unknown
    with pytest.raises(ActionFailed, match="no restart_agent hook for cluster c1"):
        reach.restart_agent("h1", "c1", 7, ctx)
    hooked = LiveReach(
        system, {"*": {"restart_agent": ["ssh", "{hostname}", "systemctl", "restart", "fleetfix-agent"]}}
    )
    done = hooked.restart_agent("h1", "c1", 7, ctx)
    assert done["argv"] == ["ssh", "h1", "systemctl", "restart", "fleetfix-agent"]


class FakeBmc:
    name = "fake"
    system = None

    def __init__(self, power: str | None) -> None:
        self.power = power

    def can_reach(self, hostname: str, address: str | None) -> bool:
        return address is not None

    def power_state(self, hostname: str, address: str | None, ctx: ActionContext) -> str:
        if self.power is None:
            raise ActionFailed("the BMC did not answer")
        return self.power

    def power_cycle(
        self, hostname: str, address: str | None, ctx: ActionContext, if_off: str = "refuse"
    ) -> dict[str, Any]:
        return {"power": "cycle", "if_off": if_off}

    def boot_device(self, hostname: str, address: str | None, device: str, ctx: ActionContext) -> dict[str, Any]:
        return {}


class FakeReach:
    name = "fake"
    system = None

    def __init__(self, answers: bool | None) -> None:
        self.answers = answers
        self.restarted: list[str] = []

    def ping(self, hostname: str, address: str, ctx: ActionContext) -> bool | None:
        return self.answers

    def restart_agent(self, hostname: str, cluster: str, remediation_id: int, ctx: ActionContext) -> dict[str, Any]:
        self.restarted.append(hostname)
        return {"hook": "fake"}


def test_a_bmc_that_does_not_answer_leaves_the_power_unknown() -> None:
    outside = CentralCyborg(CyborgSettings(), bmc=FakeBmc(None), reach=FakeReach(False))
    seen = probe(Target("h1", labels={"address": "h1.example", "bmc_address": "h1-ipmi"}), outside)
    assert (seen.power, seen.ping, seen.verdict) == ("unknown", "no_answer", "unconfirmed")
    assert seen.notes == ["BMC: the BMC did not answer"]
    answering = CentralCyborg(CyborgSettings(), bmc=FakeBmc("on"), reach=FakeReach(True))
    missing = probe(Target("h1", labels={"address": "h1.example"}), answering)  # no BMC address known
    assert missing.power == "unknown"
    assert missing.verdict == "agent_silent"
    assert "no BMC address" in missing.notes[0]


@pytest.fixture
def outside(db: Database) -> CentralCyborg:
    """The worker's view of the outside (its BMC and pings), set per test in the test's runtime."""
    worker = CentralCyborg(CyborgSettings(), bmc=FakeBmc("on"), reach=FakeReach(False))
    rewire(db, cyborg=worker)
    return worker


def silent_host(session: Session, *, bmc: str | None = "h1-ipmi") -> Host:
    apply_inventory(
        session,
        [HostInventory(hostname="h1", datacenter="dc1", rack="r1", labels={"bmc_address": bmc} if bmc else {})],
        actor="test",
    )
    recent = dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)
    ingest(session, [edac_report("h1", at=recent)], ruleset=RULES)
    session.commit()
    return session.scalars(select(Host).where(Host.hostname == "h1")).one()


def test_an_agent_that_died_on_a_healthy_host_is_restarted_not_power_cycled(
    session: Session, db: object, outside: CentralCyborg
) -> None:
    from remediator import tasks

    silent_host(session)
    outside.reach = FakeReach(True)  # the host answers its pings
    assert tasks.mark_unreachable() == 1
    assert tasks.probe_silent_host("h1") == "agent_silent"
    session.expire_all()
    remediation = session.scalars(select(Remediation)).one()
    assert (remediation.rule_id, [s.action for s in remediation.steps]) == ("agent-silent", ["restart_agent"])
    assert remediation.evidence["signal"]["detail"]["power"] == "on"
    runner.advance(session, remediation.id, ruleset=RULES)  # the hook runs
    runner.advance(session, remediation.id, ruleset=RULES)  # then the host must report again
    assert isinstance(outside.reach, FakeReach)
    assert outside.reach.restarted == ["h1"]
    assert remediation.state == RemediationState.verifying
    # the agent did not come back: verification fails and the ladder goes on, to a person
    runner.settle_if_due(session, remediation, remediation.settle_until + dt.timedelta(seconds=1), RULES)
    assert remediation.state == RemediationState.failed
    ticket = session.scalars(select(Remediation).where(Remediation.previous_id == remediation.id)).one()
    assert [s.action for s in ticket.steps] == ["ticket"]


def test_a_fix_counts_only_once_the_host_reports_again(session: Session, db: object, outside: CentralCyborg) -> None:
    from remediator import tasks

    host = silent_host(session)
    assert tasks.mark_unreachable() == 1
    assert tasks.probe_silent_host("h1") == "hung"
    session.expire_all()
    remediation = session.scalars(select(Remediation)).one()
    assert remediation.rule_id == "host-hung"
    remediation.steps[0].state, remediation.steps[0].finished_at = StepState.succeeded, T0
    remediation.state, remediation.settle_until = RemediationState.verifying, T0 + dt.timedelta(minutes=30)
    host = session.get_one(Host, host.id)
    host.last_report_at = T0 + dt.timedelta(minutes=5)  # it came back after the power cycle
    session.flush()
    runner.settle_if_due(session, remediation, T0 + dt.timedelta(minutes=31), RULES)
    assert remediation.state == RemediationState.succeeded


def test_a_host_that_reports_while_it_is_probed_is_left_alone(
    session: Session, db: object, outside: CentralCyborg
) -> None:
    from remediator import tasks

    silent_host(session)
    assert tasks.mark_unreachable() == 1
    ingest(session, [edac_report("h1", at=dt.datetime.now(dt.UTC))], ruleset=RULES)  # its agent was only late
    session.commit()
    assert session.scalars(select(Host.state)).one() == HostState.in_service
    assert tasks.probe_silent_host("h1") == "moot"
    assert session.scalars(select(Remediation)).all() == []


def test_a_host_whose_rack_went_silent_with_it_is_not_power_cycled(
    session: Session, db: object, outside: CentralCyborg
) -> None:
    """The ping comes from the centre: two silent hosts of one rack point at its switch or power. The BMC
    says on and no ping answers, yet nothing proves this host hung: a person, no power cycle."""
    from remediator import tasks

    silent_host(session)
    apply_inventory(session, [HostInventory(hostname="h2", datacenter="dc1", rack="r1")], actor="test")
    ingest(session, [edac_report("h2", at=dt.datetime.now(dt.UTC) - dt.timedelta(hours=1))], ruleset=RULES)
    session.commit()
    assert tasks.mark_unreachable() == 2
    assert tasks.probe_silent_host("h1") == "unconfirmed"
    session.expire_all()
    remediation = session.scalars(select(Remediation).join(Host).where(Host.hostname == "h1")).one()
    assert remediation.rule_id == "host-unreachable-unconfirmed"
    assert "power_cycle" not in [s.action for s in remediation.steps]
    notes = remediation.evidence["signal"]["detail"]["notes"]
    assert any("1 other host(s) of rack r1 are silent too (h2)" in note for note in notes), notes


def test_a_rack_peer_off_for_days_proves_nothing_about_today(
    session: Session, db: object, outside: CentralCyborg
) -> None:
    """Only peers that went quiet about when this host did point at the rack: one silent for days does not."""
    from remediator import tasks

    silent_host(session)
    apply_inventory(session, [HostInventory(hostname="h2", datacenter="dc1", rack="r1")], actor="test")
    ingest(session, [edac_report("h2", at=dt.datetime.now(dt.UTC) - dt.timedelta(days=3))], ruleset=RULES)
    session.commit()
    session.execute(update(Host).where(Host.hostname == "h2").values(state=HostState.maintenance))
    session.commit()
    assert tasks.mark_unreachable() == 1
    assert tasks.probe_silent_host("h1") == "hung"
