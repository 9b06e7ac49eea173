"""Fleet-wide changes go in waves: a canary per hardware class, growing shares after each wave has
been verified and baked, and a halt of the class's rollout on a failure or a side effect."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import select
from sqlalchemy.orm import Session

from checker.schemas import (
    Firmware,
    HostIdentity,
    Identity,
    KernelEvent,
    KernelEventKind,
    KernelLogState,
    Observations,
    Report,
)
from core.db import Database
from cyborg.central import StepFailed
from remediator import repairs, runner
from remediator.ingest import ingest
from remediator.inventory import HostInventory, apply_inventory
from remediator.models import (
    Decision,
    Host,
    Remediation,
    RemediationState,
    Rollout,
    RolloutState,
    RuleMode,
    RuleState,
    StepState,
)
from remediator.rules import load_ruleset
from tests.builders.reports import T0
from tests.cyborg.fakes import install_scripted
from ticketing.schemas import TicketOpen

RULES = load_ruleset([])
RULE = "firmware-below-baseline"


def hosts(session: Session, count: int, hardware_class: str = "compute-skx-2s") -> list[str]:
    names = [f"{hardware_class}-{i:03d}" for i in range(count)]
    rows = [
        HostInventory(hostname=name, hardware_class=hardware_class, datacenter="ams1", rack=f"r{i}", cluster=f"c{i}")
        for i, name in enumerate(names)
    ]
    apply_inventory(session, rows, actor="test")
    return names


def old_bios(hostname: str, at: dt.datetime, *, panic: bool = False, bios: str = "2.9.4") -> Report:
    """compute-skx-2s's baseline BIOS is 2.10.2 (compute-icx-2s's 1.9.2): 2.9.4 and 1.6.5 are below them."""
    log = None
    if panic:
        event = KernelEvent(kind=KernelEventKind.panic, seq=7, timestamp=at, lines=["Kernel panic - not syncing: x"])
        log = KernelLogState(source="kmsg", boot_id="boot-2", events=[event], last_seq=7)
    return Report(
        host=HostIdentity(hostname=hostname, boot_id="boot-2" if panic else "boot-1"),
        captured_at=at,
        observations=Observations(
            identity=Identity(kernel="6.1.0-28-amd64", firmware=Firmware(bios_version=bios)), kernel_log=log
        ),
    )


def planned_hosts(session: Session) -> list[str]:
    return list(
        session.scalars(
            select(Host.hostname)
            .join(Remediation, Remediation.host_id == Host.id)
            .where(Remediation.rule_id == RULE)
            .order_by(Host.hostname)
        )
    )


def succeed(session: Session, hostname: str, at: dt.datetime) -> None:
    """The reflash of this host ran and its settle period (the bake) ended healthy."""
    remediation = session.scalars(
        select(Remediation).join(Host, Host.id == Remediation.host_id).where(Host.hostname == hostname)
    ).one()
    for step in remediation.steps:
        step.state, step.finished_at = StepState.succeeded, at
    remediation.state, remediation.finished_at, remediation.active = RemediationState.succeeded, at, None
    session.flush()


def test_a_firmware_rollout_starts_with_one_canary_and_grows_after_each_bake(session: Session) -> None:
    names = hosts(session, 40)
    ingest(session, [old_bios(name, T0) for name in names], ruleset=RULES)
    assert len(planned_hosts(session)) == 1  # the canary of compute-skx-2s
    [canary] = planned_hosts(session)
    held = session.scalars(select(Decision.reason).where(Decision.outcome == "held", Decision.rule_id == RULE)).all()
    assert held
    assert all(r.startswith("rollout: the canary (1 of 40 compute-skx-2s hosts) is still being verified") for r in held)
    succeed(session, canary, T0 + dt.timedelta(hours=1))
    # the canary succeeded, but it bakes a day before the next wave
    ingest(session, [old_bios(n, T0 + dt.timedelta(hours=2)) for n in names if n != canary], ruleset=RULES)
    assert planned_hosts(session) == [canary]
    # after the bake: wave 2 is 5 % of the class, rounded up: 2 hosts in all
    ingest(session, [old_bios(n, T0 + dt.timedelta(hours=26)) for n in names if n != canary], ruleset=RULES)
    assert len(planned_hosts(session)) == 2


def test_waves_are_per_hardware_class(session: Session) -> None:
    skx = hosts(session, 10)
    icx = hosts(session, 10, "compute-icx-2s")
    reports = [old_bios(n, T0) for n in skx] + [old_bios(n, T0, bios="1.6.5") for n in icx]
    ingest(session, reports, ruleset=RULES)
    planned = planned_hosts(session)
    assert len(planned) == 2  # one canary for each class
    assert {name.rsplit("-", 1)[0] for name in planned} == {"compute-skx-2s", "compute-icx-2s"}


def test_a_failed_canary_halts_the_rollout_and_leaves_the_others_alone(db: Database, session: Session) -> None:
    names = hosts(session, 20)
    ingest(session, [old_bios(name, T0) for name in names], ruleset=RULES)
    [canary] = planned_hosts(session)
    remediation = session.scalars(select(Remediation).where(Remediation.rule_id == RULE)).one()

    def refused(*_: object) -> None:
        raise StepFailed("the flash tool refused the image")

    install_scripted(db, reflash_firmware=refused)
    runner.advance(session, remediation.id, ruleset=RULES, now=T0)
    assert remediation.state == RemediationState.failed
    rollout = session.scalars(select(Rollout).where(Rollout.rule_id == RULE)).one()
    assert (rollout.state, rollout.change, rollout.part_type) == (RolloutState.halted, "bios 2.10.2", "firmware")
    assert rollout.halt_reason.startswith(f"rollout halted: remediation {remediation.id} on {canary}")
    assert session.get(RuleState, RULE) is None  # the class's rollout halts, not the rule everywhere
    ingest(session, [old_bios(n, T0 + dt.timedelta(days=2)) for n in names], ruleset=RULES)
    # no one else: the halt holds the rollout until an operator resumes it (the canary has its ticket)
    assert planned_hosts(session) == [canary, canary]
    held = session.scalars(select(Decision.reason).where(Decision.outcome == "held", Decision.rule_id == RULE))
    assert any(r.startswith(f"rollout {rollout.id} of bios 2.10.2 on compute-skx-2s is halted") for r in held)


def test_a_panic_on_a_canary_being_verified_halts_the_rollout(session: Session) -> None:
    names = hosts(session, 20)
    ingest(session, [old_bios(name, T0) for name in names], ruleset=RULES)
    [canary] = planned_hosts(session)
    remediation = session.scalars(select(Remediation).where(Remediation.rule_id == RULE)).one()
    for step in remediation.steps:
        step.state, step.finished_at = StepState.succeeded, T0
    remediation.state, remediation.settle_until = RemediationState.verifying, T0 + dt.timedelta(days=1)
    session.flush()
    ingest(session, [old_bios(canary, T0 + dt.timedelta(hours=3), panic=True)], ruleset=RULES)
    assert remediation.state == RemediationState.failed
    rollout = session.scalars(select(Rollout).where(Rollout.rule_id == RULE)).one()
    assert rollout.state == RolloutState.halted
    assert f"side effect of firmware-below-baseline on {canary}: kernel-panic fired" in rollout.halt_reason


def test_a_panic_while_a_canary_bakes_in_service_halts_the_rollout(session: Session) -> None:
    names = hosts(session, 20)
    ingest(session, [old_bios(name, T0) for name in names], ruleset=RULES)
    [canary] = planned_hosts(session)
    succeed(session, canary, T0 + dt.timedelta(hours=1))  # verified and back in service, baking
    ingest(session, [old_bios(canary, T0 + dt.timedelta(hours=5), panic=True)], ruleset=RULES)
    rollout = session.scalars(select(Rollout).where(Rollout.rule_id == RULE)).one()
    assert rollout.state == RolloutState.halted
    assert rollout.halt_reason.startswith(f"rollout halted: side effect of firmware-below-baseline on {canary}")


def test_a_panic_after_the_bake_is_not_a_side_effect(session: Session) -> None:
    names = hosts(session, 20)
    ingest(session, [old_bios(name, T0) for name in names], ruleset=RULES)
    [canary] = planned_hosts(session)
    succeed(session, canary, T0 + dt.timedelta(hours=1))
    ingest(session, [old_bios(canary, T0 + dt.timedelta(days=3), panic=True)], ruleset=RULES)
    assert session.scalars(select(Rollout.state).where(Rollout.rule_id == RULE)).one() == RolloutState.running


def test_a_panic_that_goes_to_the_canarys_open_ticket_still_halts_the_rollout(session: Session) -> None:
    """The canary already has an open ticket for an earlier panic: the new panic is added to that ticket, and
    the rollout halts all the same, since the side-effect watch is asked before the ticket takes the firing."""
    names = hosts(session, 20)
    ingest(session, [old_bios(name, T0) for name in names], ruleset=RULES)
    [canary] = planned_hosts(session)
    succeed(session, canary, T0 + dt.timedelta(hours=1))
    request = TicketOpen(hostname=canary, part_type="host", part="panic", title="an earlier panic")
    ticket_id, _ = repairs.open_by_hand(session, request, actor="op", now=T0 + dt.timedelta(hours=2))
    ingest(session, [old_bios(canary, T0 + dt.timedelta(hours=5), panic=True)], ruleset=RULES)
    rollout = session.scalars(select(Rollout).where(Rollout.rule_id == RULE)).one()
    assert rollout.state == RolloutState.halted
    assert "kernel-panic fired" in rollout.halt_reason
    held = session.scalars(select(Decision).where(Decision.rule_id == "kernel-panic")).all()
    assert [d.outcome for d in held] == ["held"]
    assert f"ticket {ticket_id}" in held[0].reason


def test_a_panic_of_a_paused_panic_rule_still_halts_the_rollout(session: Session) -> None:
    """An operator paused kernel-panic as too noisy: its firing decides nothing, but the canary's panic still
    halts the rollout, since halting only stops more hosts from changing."""
    names = hosts(session, 20)
    ingest(session, [old_bios(name, T0) for name in names], ruleset=RULES)
    [canary] = planned_hosts(session)
    succeed(session, canary, T0 + dt.timedelta(hours=1))
    session.add(RuleState(rule_id="kernel-panic", mode=RuleMode.paused, updated_by="op"))
    session.flush()
    ingest(session, [old_bios(canary, T0 + dt.timedelta(hours=5), panic=True)], ruleset=RULES)
    assert session.scalars(select(Rollout.state).where(Rollout.rule_id == RULE)).one() == RolloutState.halted
    outcomes = session.scalars(select(Decision.outcome).where(Decision.rule_id == "kernel-panic")).all()
    assert outcomes == ["skipped"]
