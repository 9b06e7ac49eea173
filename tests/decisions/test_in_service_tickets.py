"""A ticket for the owners of a workload, a kernel or a hardware class leaves its host in service; a
ticket for a part a technician replaces still holds it (docs/rules.md, "Tickets that leave the host in
service"). The default pack's own scenarios, run through the real ingest path to their tickets."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from remediator import host_evaluation
from remediator.baselines import parse_baselines
from remediator.models import Decision, Host, HostState, RemediationState
from tests.decisions import cases_benchmark_class, cases_performance  # noqa: F401 - register their cases
from tests.decisions.cases import CASES
from tests.decisions.harness import SnapHost, check, register, remediations, run
from ticketing.models import Ticket

# case name -> (its rule, whether the host keeps working while the ticket is open)
SCENARIOS = {
    "TLB shootdowns on isolated cores: the workload's owner, never an IRQ move": True,
    "a whole class at 1.66-1.73 where 3.65 is expected (seed 001): one ticket for the class, no outlier": True,
    "a job with 22 million seconds of CPU time an hour after it started: a ticket to the kernel's owner": True,
    "a DIMM at 50 CE/s on the real i10nm listing: drained and ticketed, and no serial guessed": False,
    "an uncorrectable error on the real i10nm listing: the host out, the DIMM goes": False,
    "a host at 60 % of its class's benchmark median: a ticket with the class's distribution": False,
    # the same harm to the workload as all-core-stalls, on one CPU's MSR_SMI_COUNT read: the host held
    "long all-core stalls on bare metal, MSR_SMI_COUNT flat: not SMI, a ticket that holds the host": False,
    # no SMI counter and a saturated host: ambiguous evidence, a person looks while the host works
    "long all-core stalls, saturated host, no SMI counter: ambiguous, a low-priority ticket, in service": True,
}


def scenario(session: Session, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> tuple[SnapHost, Ticket]:
    rule, build = CASES[name]
    host, reports, expect = build(tmp_path)
    if host.baselines is not None:
        monkeypatch.setattr(host_evaluation, "firmware_baselines", lambda: parse_baselines(host.baselines or ""))
    register(session, host)
    run(session, host, reports)
    check(session, host, expect)  # runs the plan to its ticket
    ticket = session.scalars(
        select(Ticket).where(Ticket.hostname == host.hostname, Ticket.remediation_id.is_not(None))
    ).one()
    assert next(r for r in remediations(session, host.hostname) if r.id == ticket.remediation_id).rule_id == rule
    return host, ticket


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_owners_tickets_leave_the_host_working_and_part_tickets_hold_it(
    session: Session, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    host, ticket = scenario(session, tmp_path, monkeypatch, name)
    in_service = SCENARIOS[name]
    row = session.scalars(select(Host).where(Host.hostname == host.hostname)).one()
    assert ticket.holds_host is not in_service
    if in_service:
        assert (row.state, row.drained_at) == (HostState.in_service, None)
    else:
        assert row.state == HostState.awaiting_repair


def test_a_workload_ticket_does_not_hold_back_the_hosts_next_remediation(
    session: Session, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host, ticket = scenario(session, tmp_path, monkeypatch, next(n for n in SCENARIOS if n.startswith("TLB")))
    assert (ticket.part_type, ticket.state.value) == ("workload", "open")
    # later the same host's IRQ 16 is allowed on its isolated cores too (the real affinity 0-3):
    # the pack narrows it, and nothing holds that remediation back
    host.snap.files("/proc/irq", {"16/smp_affinity_list": "0-3\n"})
    run(session, host, [host.cycle(2)])
    [irq] = [r for r in remediations(session, host.hostname) if r.rule_id == "irq-affinity-isolated"]
    assert irq.state in (RemediationState.planned, RemediationState.running), irq.state
    held = session.scalars(select(Decision.reason).where(Decision.outcome == "held")).all()
    assert not [reason for reason in held if "awaiting_repair" in reason], held
    assert ticket.state.value == "open"  # the owners' ticket stays as it was
