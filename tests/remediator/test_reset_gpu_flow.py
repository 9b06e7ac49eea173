"""A pending row remap end to end through the real ingest path and runner: the default pack plans
gpu-row-remap-pending on a simulated A100 host, the runner drains the host through the cluster's hook,
the envelope names the GPU (index, BDF, UUID from the signal) and says drained, the virtual host resets
that GPU, and the next reports no longer show the remap pending. Without a drain hook the envelope says
not drained, the host refuses, and the escalation's ticket names the GPU."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from checker.sim import VirtualHost
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


def gpu_host(session: Session) -> VirtualHost:
    fleet = clean_fleet()
    host = next(h for h in fleet.hosts if h.hardware.name == GPU_CLASS)
    host.inject(fleet.fault("gpu_remap_pending", 1))  # variant pending
    rows = [HostInventory(**row) for row in fleet.inventory() if row["hostname"] == host.hostname]
    apply_inventory(session, rows, actor="test")
    return host


def planned(session: Session, host: VirtualHost) -> Remediation:
    for minute in range(0, 30, 5):
        ingest(session, [host.report(T0 + dt.timedelta(minutes=minute))], ruleset=RULES)
    row = session.scalars(select(Host).where(Host.hostname == host.hostname)).one()
    remediation = session.scalars(select(Remediation).where(Remediation.host_id == row.id)).one()
    assert remediation.rule_id == "gpu-row-remap-pending"
    assert [s.action for s in remediation.steps] == ["reset_gpu"]
    return remediation


def test_the_drained_host_resets_the_named_gpu_and_the_remap_is_applied(
    session: Session, cyborg_installed: dict[str, Any], settings: Settings
) -> None:
    settings.scheduler_hooks = {"*": {"drain": ["/bin/echo", "drained", "{hostname}"]}}
    host = gpu_host(session)
    remediation = planned(session, host)
    now = T0 + dt.timedelta(minutes=30)
    runner.advance(session, remediation.id, ruleset=RULES, now=now)
    assert remediation.evidence["drain"]["outcome"] == "succeeded"
    [envelope] = sent_envelopes(session)
    [gpu] = [g for g in host.gpus if g.remap_pending]
    assert envelope["action"] == "reset_gpu"
    assert envelope["params"] == {"gpu": gpu.index, "bdf": gpu.spec.bdf, "uuid": gpu.uuid, "drained": True}
    outcome = host.apply("reset_gpu", envelope["params"])  # what the agent's simulated driver does with it
    assert outcome["outcome"] == "done"
    answer = result(envelope, "succeeded", changed=outcome["changed"])
    assert host_results.record_host_result(session, answer, RULES, now) == "succeeded"
    assert remediation.steps[0].state == StepState.succeeded
    after = host.report(now + dt.timedelta(minutes=5)).observations.gpu
    assert after is not None
    assert not any(g.memory_repair.remap_pending for g in after.gpus)


def test_not_drained_the_host_refuses_and_the_ticket_names_the_gpu(
    session: Session, cyborg_installed: dict[str, Any], settings: Settings
) -> None:
    settings.scheduler_hooks = {}
    host = gpu_host(session)
    remediation = planned(session, host)
    now = T0 + dt.timedelta(minutes=30)
    runner.advance(session, remediation.id, ruleset=RULES, now=now)
    [envelope] = sent_envelopes(session)
    assert envelope["params"]["drained"] is False
    [gpu] = [g for g in host.gpus if g.remap_pending]
    with pytest.raises(ValueError, match="not drained") as refused:
        host.apply("reset_gpu", envelope["params"])
    error = str(refused.value)
    answer = result(envelope, "failed", error=error)
    host_results.record_host_result(session, answer, RULES, now)
    assert remediation.steps[0].state == StepState.failed
    escalated = remediation_of(session, host.hostname)  # the escalation's rung: a new remediation
    assert escalated.id != remediation.id
    assert [s.action for s in escalated.steps] == ["ticket"]
    runner.advance(session, escalated.id, ruleset=RULES, now=now)
    ticket = session.scalars(select(Ticket).where(Ticket.hostname == host.hostname)).first()
    assert ticket is not None, [(s.action, s.state) for s in escalated.steps]
    assert ticket.part_type == "gpu"
    assert gpu.serial in ticket.title
    part = ticket.evidence["part"]
    assert (part["index"], part["bdf"], part["uuid"], part["serial"]) == (gpu.index, gpu.spec.bdf, gpu.uuid, gpu.serial)
    assert (part["model"], part["vbios"]) == ("NVIDIA A100-SXM4-80GB", "92.00.45.00.03")
