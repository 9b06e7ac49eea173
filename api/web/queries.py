"""Read-only views the pages need beyond the services' own reads: counts, series, a host's signals by kind.

Nothing here changes anything; every change a page makes goes through the same
service functions as the API.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter, defaultdict
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, selectinload

from api.web.host_signals import CE_RATE as CE_RATE  # one name for the kind; queries.CE_RATE for the ticket page
from remediator.models import Decision, Host, Remediation, RemediationState, Signal
from ticketing.models import Ticket


def datacenters(session: Session) -> list[str]:
    return [dc for dc in session.scalars(select(Host.datacenter).distinct().order_by(Host.datacenter)) if dc]


def ticket_part_types(session: Session) -> list[str]:
    """The part types tickets have, by a walk of ix_tickets_part_type: one index probe per part type
    (a recursive query), where SELECT DISTINCT read every ticket ever opened (152 ms at 100k tickets)."""
    walk = select(func.min(Ticket.part_type).label("part")).cte("walk", recursive=True)
    following = select(func.min(Ticket.part_type)).where(Ticket.part_type > walk.c.part).scalar_subquery()
    walk = walk.union_all(select(following).where(walk.c.part.is_not(None)))
    return [part for part in session.scalars(select(walk.c.part).where(walk.c.part.is_not(None))) if part]


def hosts_by_state(session: Session) -> list[tuple[str, Counter[str]]]:
    rows = session.execute(select(Host.datacenter, Host.state, func.count()).group_by(Host.datacenter, Host.state))
    by_dc: dict[str, Counter[str]] = defaultdict(Counter)
    for datacenter, state, count in rows:
        by_dc[datacenter][state.value] += count
    return sorted(by_dc.items())


def hostnames(session: Session, host_ids: set[int]) -> dict[int, str]:
    if not host_ids:
        return {}
    rows = session.execute(select(Host.id, Host.hostname).where(Host.id.in_(host_ids)))
    return {row.id: row.hostname for row in rows}


def remediations_in(session: Session, states: set[RemediationState], *, limit: int = 100) -> list[Remediation]:
    query = (
        select(Remediation)
        .where(Remediation.state.in_(states))
        .options(selectinload(Remediation.steps))
        .order_by(Remediation.id.desc())
        .limit(limit)
    )
    return list(session.scalars(query))


def active_remediations(session: Session, *, limit: int = 50) -> list[Remediation]:
    query = (
        select(Remediation)
        .where(Remediation.active.is_(True))
        .options(selectinload(Remediation.steps))
        .order_by(Remediation.id.desc())
        .limit(limit)
    )
    return list(session.scalars(query))


@dataclass(frozen=True)
class RuleActivity:
    rule_id: str
    outcomes: dict[str, int]
    hosts: int
    last_at: dt.datetime

    @property
    def total(self) -> int:
        return sum(self.outcomes.values())


def rules_firing(session: Session, since: dt.datetime) -> list[RuleActivity]:
    """Per rule: its decisions since `since` by outcome, and on how many hosts."""
    rows = session.execute(
        select(
            Decision.rule_id,
            Decision.outcome,
            func.count(),
            func.count(Decision.host_id.distinct()),
            func.max(Decision.at),
        )
        .where(Decision.at >= since)
        .group_by(Decision.rule_id, Decision.outcome)
    ).all()
    by_rule: dict[str, dict[str, Any]] = {}
    for rule_id, outcome, count, hosts, last_at in rows:
        entry = by_rule.setdefault(rule_id, {"outcomes": {}, "hosts": 0, "last_at": last_at})
        entry["outcomes"][outcome] = count
        entry["hosts"] = max(entry["hosts"], hosts)
        entry["last_at"] = max(entry["last_at"], last_at)
    found = [RuleActivity(rule_id=rule_id, **entry) for rule_id, entry in by_rule.items()]
    return sorted(found, key=lambda r: (-r.total, r.rule_id))


def ce_rate_samples(session: Session, since: dt.datetime) -> list[tuple[dt.datetime, float]]:
    """The fleet's correctable-error rate, one value per hour: each DIMM's mean rate in the hour, summed.

    A DIMM reports a rate every interval; averaging within the hour first keeps
    a host that reports more often from counting more.
    """
    rows = session.execute(
        select(Signal.observed_at, Signal.host_id, Signal.subject, Signal.value).where(
            Signal.kind == CE_RATE, Signal.observed_at >= since
        )
    )
    per_dimm: dict[tuple[dt.datetime, int, str], list[float]] = defaultdict(list)
    for observed_at, host_id, subject, value in rows:
        hour = observed_at.replace(minute=0, second=0, microsecond=0)
        per_dimm[(hour, host_id, subject)].append(value)
    return [(hour, sum(values) / len(values)) for (hour, _, _), values in per_dimm.items()]


def ticket_openings(session: Session, since: dt.datetime) -> list[dt.datetime]:
    return list(session.scalars(select(Ticket.created_at).where(Ticket.created_at >= since)))


def subject_signals(session: Session, host_id: int, subject: str, *, limit: int = 500) -> list[Signal]:
    query = (
        select(Signal)
        .where(Signal.host_id == host_id, Signal.subject == subject)
        .order_by(Signal.observed_at.desc())
        .limit(limit)
    )
    return list(session.scalars(query))


def host_signals(
    session: Session, host_id: int, kinds: Collection[str], *, exclude: bool = False, limit: int = 500
) -> list[Signal]:
    """The host's newest signals of these kinds (exclude: of every other kind), newest first.

    The host page reads facts, charted measurements and the rest apart: one LIMIT over
    all of them was filled by whatever repeats most often (ix_signals_host_kind_at serves each).
    """
    wanted = Signal.kind.not_in(kinds) if exclude else Signal.kind.in_(kinds)
    query = (
        select(Signal)
        .where(Signal.host_id == host_id, wanted)
        .order_by(Signal.observed_at.desc(), Signal.id.desc())
        .limit(limit)
    )
    return list(session.scalars(query))
