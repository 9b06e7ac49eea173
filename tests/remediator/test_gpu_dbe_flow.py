"""Xid 48 (a double-bit ECC error) end to end through the real ingest path and runner, on a simulated A100 host
(the `gpu_xid` fault, variant `dbe`): NVIDIA's WORKFLOW_XID_48 resets the GPU (the runner drains first) and
replaces it only if the reset fails. Review MUST-FIX 1 and 2: the pack used to drain and open a replacement
ticket for every 48, beside the reset gpu-row-remap-pending planned for the same fault."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from checker.sim import VirtualHost
from checker.sim.xid import VARIANTS
from core.settings import Settings
from remediator import host_results, runner
from remediator.ingest import ingest
from remediator.inventory import HostInventory, apply_inventory
from remediator.models import Host, Remediation, StepState
from remediator.rules import load_ruleset
from tests.builders.observations import clean_fleet
from tests.builders.remediations import remediation_of, result, sent_envelopes
from ticketing.models import Ticket

RULES = load_ruleset([])
T0 = dt.datetime(2026, 9, 1, 8, 0, tzinfo=dt.UTC)
GPU_CLASS = "gpu-a100-8x"


def dbe_host(session: Session) -> VirtualHost:
    fleet = clean_fleet()
    host = next(h for h in fleet.hosts if h.hardware.name == GPU_CLASS)
    host.inject(fleet.fault("gpu_xid", VARIANTS.index("dbe")))
    rows = [HostInventory(**row) for row in fleet.inventory() if row["hostname"] == host.hostname]
    apply_inventory(session, rows, actor="test")
    return host


def remediations(session: Session, host: VirtualHost) -> list[Remediation]:
    row = session.scalars(select(Host).where(Host.hostname == host.hostname)).one()
    return list(session.scalars(select(Remediation).where(Remediation.host_id == row.id).order_by(Remediation.id)))


def tickets(session: Session, host: VirtualHost) -> list[Ticket]:
    return list(session.scalars(select(Ticket).where(Ticket.hostname == host.hostname)))


def planned(session: Session, host: VirtualHost) -> Remediation:
    for minute in range(0, 15, 5):
        ingest(session, [host.report(T0 + dt.timedelta(minutes=minute))], ruleset=RULES)
    [remediation] = remediations(session, host)
    assert remediation.rule_id == "gpu-xid-dbe"
    assert [s.action for s in remediation.steps] == ["reset_gpu"]  # no drain-and-replace of its own
    return remediation


def test_a_dbe_resets_the_gpu_and_nothing_is_replaced_when_the_reset_works(
    session: Session, cyborg_installed: dict[str, Any], settings: Settings
) -> None:
    settings.scheduler_hooks = {"*": {"drain": ["/bin/echo", "drained", "{hostname}"]}}
    host = dbe_host(session)
    remediation = planned(session, host)
    now = T0 + dt.timedelta(minutes=15)
    runner.advance(session, remediation.id, ruleset=RULES, now=now)
    assert remediation.evidence["drain"]["outcome"] == "succeeded"  # the runner drained before the reset
    [envelope] = sent_envelopes(session)
    detail = remediation.evidence["signal"]["detail"]
    assert envelope["params"] == {"gpu": detail["index"], "bdf": detail["bdf"], "uuid": detail["uuid"], "drained": True}
    outcome = host.apply("reset_gpu", envelope["params"])
    assert outcome["outcome"] == "done"
    assert host_results.record_host_result(
        session, result(envelope, "succeeded", changed=outcome["changed"]), RULES, now
    )
    assert remediation.steps[0].state == StepState.succeeded
    assert not host.has("gpu_xid")  # the DBE's row remapped at the reset
    runner.advance(session, remediation.id, ruleset=RULES, now=now)  # every step done: verifying, 30 min
    for minute in range(20, 60, 5):
        ingest(session, [host.report(T0 + dt.timedelta(minutes=minute))], ruleset=RULES)
    runner.settle_if_due(session, remediation, T0 + dt.timedelta(minutes=60), RULES)
    [done] = remediations(session, host)
    assert (done.rule_id, done.state.value) == ("gpu-xid-dbe", "succeeded")
    assert tickets(session, host) == []
    # a DBE again on the same GPU after the reset held: the next rung, a replacement
    host.inject(clean_fleet().fault("gpu_xid", VARIANTS.index("dbe")))
    ingest(session, [host.report(T0 + dt.timedelta(minutes=70))], ruleset=RULES)
    first, again = remediations(session, host)
    assert (again.rule_id, again.rung, again.subject) == ("gpu-xid-dbe", 1, first.subject)
    assert [s.action for s in again.steps] == ["drain", "ticket"]


def test_a_reset_that_fails_escalates_to_a_replacement_ticket_naming_the_gpu(
    session: Session, cyborg_installed: dict[str, Any], settings: Settings
) -> None:
    settings.scheduler_hooks = {}  # no drain: the host refuses the reset
    host = dbe_host(session)
    remediation = planned(session, host)
    now = T0 + dt.timedelta(minutes=15)
    runner.advance(session, remediation.id, ruleset=RULES, now=now)
    [envelope] = sent_envelopes(session)
    assert envelope["params"]["drained"] is False
    answer = result(envelope, "failed", error="refused: host not drained")
    host_results.record_host_result(session, answer, RULES, now)
    escalated = remediation_of(session, host.hostname)
    assert escalated.id != remediation.id
    assert [s.action for s in escalated.steps] == ["drain", "ticket"]
    for _ in escalated.steps:
        runner.advance(session, escalated.id, ruleset=RULES, now=now)
    [ticket] = tickets(session, host)
    detail = remediation.evidence["signal"]["detail"]
    assert ticket.title.startswith(f"Replace GPU {remediation.subject} on {host.hostname} (serial {detail['serial']})")
    assert "reset failed or was refused" in ticket.title
    assert (ticket.part_type, ticket.part) == ("gpu", "0000:" + detail["bdf"].lower()[-7:])
    assert ticket.evidence["part"]["serial"] == detail["serial"]
