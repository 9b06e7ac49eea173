"""The simulated fleet (`fleetfix up`'s demo) shows it: a host with a fault for its owners (a workload's
TLB shootdowns, CE reporting switched off) gets its ticket and stays in service; one with a failed PSU
waits for the technician."""

from __future__ import annotations

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from remediator import runner
from remediator.ingest import ingest
from remediator.models import Host, HostState, Remediation, RemediationState
from tests.remediator.test_default_pack import RULES, START, STEP, faulty_host, register
from ticketing.models import Ticket

KINDS = {"isolated_tlb": True, "corrected_errors_ignored": True, "psu_failure": False}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_demo_host_keeps_working_with_a_ticket_for_owners(session: Session, kind: str) -> None:
    fleet, virtual = faulty_host(kind)
    register(session, fleet)
    host = remediation = None
    for step in range(60):
        ingest(session, fleet.reports(START + step * STEP, interval_s=600), ruleset=RULES)
        host = session.scalars(select(Host).where(Host.hostname == virtual.hostname)).one()
        remediation = session.scalars(select(Remediation).where(Remediation.host_id == host.id)).first()
        if remediation is not None:
            break
    assert host is not None
    assert remediation is not None, f"{kind} planned nothing"
    assert runner.advance(session, remediation.id, ruleset=RULES) == RemediationState.escalated
    ticket = session.scalars(select(Ticket).where(Ticket.remediation_id == remediation.id)).one()
    assert ticket.holds_host is not KINDS[kind]
    assert host.state == (HostState.in_service if KINDS[kind] else HostState.awaiting_repair)
