"""A host taken through reports, its ticket and its repair: located in the inventory, a CE storm on one
DIMM through the real ingest path, the technician's fix, healthy reports after it. The clock of each step
is the reports' own time, minutes after BASE (six hours ago, so reports are never from the future)."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import select
from sqlalchemy.orm import Session

from api.settings import load_central_settings
from checker.schemas import Report
from core.db import utcnow
from remediator import ingest, repair_load, runner
from remediator.inventory import HostInventory, apply_inventory
from remediator.models import Host, HostState, RemediationState, StepState
from remediator.rules import load_ruleset
from tests.builders.reports import LABEL, dimm_inventory_labels, edac_report
from ticketing import service as tickets
from ticketing.models import Ticket
from ticketing.schemas import Replacement, Resolution

RULES = load_ruleset([])
_SIX_HOURS_AGO = utcnow().replace(microsecond=0) - dt.timedelta(hours=6)
# Ten past an hour, six to seven hours ago: a test's minutes 50-109 lie in one clock hour, so the hourly
# buckets page and link-down counts keep (bucket start on the hour) fall the same way whenever the suite runs
# (tests/ticketing/test_repair_reopen_recheck.py's resolve at minute 60 straddles one of them by design).
BASE = _SIX_HOURS_AGO.replace(minute=10, second=0) - dt.timedelta(hours=1 if _SIX_HOURS_AGO.minute < 10 else 0)
SETTLE = dt.timedelta(seconds=load_central_settings().ticket_settle_s)


def at(minutes: float) -> dt.datetime:
    return BASE + dt.timedelta(minutes=minutes)


def located(session: Session, hostname: str = "web-1") -> Host:
    apply_inventory(
        session,
        [
            HostInventory(
                hostname=hostname,
                hardware_class="compute-skx-2s",
                datacenter="ams1",
                row="R12",
                rack="R12-07",
                slot="U21",
                labels=dimm_inventory_labels(),  # edac_report lists one DIMM where the class fills 12
            )
        ],
        actor="test",
    )
    return session.scalars(select(Host).where(Host.hostname == hostname)).one()


def send(session: Session, *reports: Report) -> list[int]:
    return ingest.ingest(session, list(reports), ruleset=RULES).remediations


def storm(hostname: str, start: float, *, ce0: int = 0, boot: str = "boot-1") -> list[Report]:
    """Three reports a minute apart at 50 CE/s on LABEL: the dimm-ce-storm rule fires on the third."""
    return [edac_report(hostname, ce=ce0 + 3000 * i, at=at(start + i), boot_id=boot, label=LABEL) for i in range(3)]


def ticketed(session: Session, hostname: str = "web-1") -> Ticket:
    """A host with a CE storm, handed to a technician by the remediator."""
    located(session, hostname)
    [remediation_id] = send(session, *storm(hostname, 0))
    assert runner.advance(session, remediation_id, ruleset=RULES) == RemediationState.running  # drained
    assert runner.advance(session, remediation_id, ruleset=RULES) == RemediationState.escalated
    return session.scalars(select(Ticket).where(Ticket.hostname == hostname)).one()


def repaired(session: Session, ticket: Ticket, when: dt.datetime) -> None:
    tickets.claim(session, ticket, actor="user:alice", now=when)
    resolution = Resolution(
        replacements=[Replacement(old_serial="1A2B3C4D", new_serial="77AA88BB")], note="replaced DIMM A1"
    )
    tickets.resolve(session, tickets.lock_ticket(session, ticket.id), resolution, actor="user:alice", now=when)


def healthy(hostname: str, start: float, end: float, *, boot: str = "boot-2") -> list[Report]:
    """Reports once a minute with no errors after the repair (a new boot: the counters start again)."""
    return [edac_report(hostname, ce=0, at=at(start + i), boot_id=boot) for i in range(int(end - start) + 1)]


def host_state(session: Session, hostname: str = "web-1") -> HostState:
    return session.scalars(select(Host.state).where(Host.hostname == hostname)).one()


def load_test_answers(session: Session, ticket_id: int, when: dt.datetime, verdict: str = "pass") -> None:
    """The host's answer to a resolved DIMM ticket's load test, handed on as remediator.host_results hands
    it (for tests about something else; tests/ticketing/test_repair_load.py sends the envelope and its result)."""
    ticket = tickets.lock_ticket(session, ticket_id)
    host = session.scalars(select(Host).where(Host.hostname == ticket.hostname)).one()
    run = repair_load.run_of(session, ticket_id, host)
    assert run is not None, f"no load test for ticket {ticket_id}"
    step = run.steps[0]
    step.state = StepState.succeeded if verdict == "pass" else StepState.failed
    step.finished_at = when
    step.result = {**step.result, "changed": {"verdict": verdict, "failures": [], "gaps": []}}
    repair_load.conclude(session, run, step, when)
