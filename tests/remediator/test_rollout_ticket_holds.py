"""A halted rollout's ticket is for the change's owners: it never holds the host it names (the upgraded
canary); whether the canary is held is its own rule's ladder's decision."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import select
from sqlalchemy.orm import Session

from remediator import rollouts
from remediator.ingest import ingest
from remediator.models import Host, HostState, RemediationState, Rollout, RolloutState
from tests.builders.reports import T0
from tests.builders.rollouts import opteron_report, opterons
from tests.remediator.test_rollout_halt import (  # noqa: F401 - first_build: the class's configured build
    FIRST_BUILD,
    RULES,
    first_build,
    upgrade_canary,
)
from ticketing import service as tickets
from ticketing.models import Ticket


def test_the_halt_ticket_does_not_hold_the_canary(session: Session) -> None:
    names = opterons(session)
    ingest(session, [opteron_report(n, T0) for n in names], ruleset=RULES)
    remediation, canary = upgrade_canary(session, T0 + dt.timedelta(minutes=10))
    later = T0 + dt.timedelta(minutes=20)
    ingest(session, [opteron_report(canary, later, kernel=FIRST_BUILD, flagged=2)], ruleset=RULES)
    ingest(session, [opteron_report(n, later) for n in names if n != canary], ruleset=RULES)
    rollouts.evaluate(session, RULES, later + dt.timedelta(minutes=1))
    rollout = session.scalars(select(Rollout)).one()
    assert rollout.state == RolloutState.halted
    ticket = session.get_one(Ticket, rollout.ticket_id)
    assert (ticket.hostname, ticket.holds_host) == (canary, False)
    host = session.scalars(select(Host).where(Host.hostname == canary)).one()
    assert host.state != HostState.awaiting_repair
    assert ticket.id not in {t.id for t in tickets.holding_tickets_of_host(session, canary)}
    # the canary's own ladder goes on beside it (its escalation rung's ticket, a host ticket, holds it)
    assert remediation.state == RemediationState.failed
