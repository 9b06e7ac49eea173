"""A host's timeline for its page: what changed and what happened, not every report's restatement.

An agent reports every few seconds and most signals repeat with each report, so
a raw list of signals is mostly the same line (issue 18). Here a run of one
signal (kind and subject) from consecutive reports becomes one line with a count
and a time span; a run ends when the value changes (for charted measurements,
whose value moves every report, only when the reports stop) or when the host
went quiet for more than three report intervals. Facts (host_signals.FACT_KINDS)
are left out: the facts panel shows them. Remediations and ticket events are
never collapsed.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import quote

from sqlalchemy import select
from sqlalchemy.orm import Session

from api.web.common import format_age
from api.web.host_signals import CHARTED_KINDS, SignalRow, is_fact
from remediator.models import Host, Remediation, Signal
from ticketing.models import Ticket, TicketEvent

GAP_INTERVALS = 3
"""Reports missed before a run is broken: a signal seen again after the host was quiet is news."""
GROUPS = ("signal", "remediation", "ticket")


@dataclass(frozen=True)
class TimelineItem:
    at: dt.datetime
    """The newest moment of the line (a collapsed run's last report)."""
    group: str  # signal, remediation, ticket
    kind: str
    """The signal kind, or the group for remediations and tickets: what the filter selects on."""
    title: str
    detail: str = ""
    link: str = ""
    count: int = 1
    first_at: dt.datetime | None = None
    """A collapsed run's first report; None for a single line."""

    @property
    def span(self) -> str:
        """How long a collapsed run lasted ('12m'); empty for a single line."""
        return format_age(self.first_at, now=self.at) if self.first_at is not None else ""


def _value(value: float) -> str:
    return f"{value:.3g}"


def collapse_signals(signals: Iterable[SignalRow], *, interval_s: float) -> list[TimelineItem]:
    """Runs of repeated signals as one line each: same kind and subject, reports no more than
    GAP_INTERVALS intervals apart, and the same value (any value for a charted measurement)."""
    gap = dt.timedelta(seconds=max(interval_s, 1) * GAP_INTERVALS)
    runs: dict[tuple[str, str], list[SignalRow]] = {}
    done: list[list[SignalRow]] = []
    for signal in sorted(signals, key=lambda s: s.observed_at):
        if is_fact(signal.kind):
            continue
        key = (signal.kind, signal.subject)
        run = runs.get(key)
        if run is not None:
            last = run[-1]
            same = signal.kind in CHARTED_KINDS or _value(signal.value) == _value(last.value)
            if same and signal.observed_at - last.observed_at <= gap:
                run.append(signal)
                continue
            done.append(run)
        runs[key] = [signal]
    done.extend(runs.values())
    return [_line(run) for run in done]


def _line(run: Sequence[SignalRow]) -> TimelineItem:
    first, last = run[0], run[-1]
    values = [s.value for s in run]
    low, high = min(values), max(values)
    shown = _value(last.value) if _value(low) == _value(high) else f"{_value(low)} to {_value(high)}"
    return TimelineItem(
        at=last.observed_at,
        group="signal",
        kind=last.kind,
        title=f"{last.kind} {shown}",
        detail=last.subject,
        count=len(run),
        first_at=first.observed_at if len(run) > 1 else None,
    )


def host_timeline(
    session: Session, host: Host, signals: list[Signal], remediations: list[Remediation], *, limit: int = 300
) -> list[TimelineItem]:
    """Everything that happened to a host, newest first: signal runs, remediations' starts and ends,
    ticket events."""
    items = collapse_signals(signals, interval_s=host.report_interval_s)
    for r in remediations:
        link = f"/hosts/{quote(host.hostname)}#remediation-{r.id}"
        plan = " → ".join(step.action for step in r.steps)
        items.append(
            TimelineItem(
                at=r.created_at,
                group="remediation",
                kind="remediation",
                title=f"remediation {r.id} planned: {r.rule_id}",
                detail=f"{plan} — {r.reason}",
                link=link,
            )
        )
        if r.finished_at is not None:
            items.append(
                TimelineItem(
                    at=r.finished_at,
                    group="remediation",
                    kind="remediation",
                    title=f"remediation {r.id} {r.state.value}",
                    detail=r.held_reason or r.subject,
                    link=link,
                )
            )
    events = session.execute(
        select(TicketEvent, Ticket.id, Ticket.title)
        .join(Ticket, Ticket.id == TicketEvent.ticket_id)
        .where(Ticket.hostname == host.hostname)
        .order_by(TicketEvent.id.desc())
        .limit(limit)
    ).all()
    for event, ticket_id, title in events:
        items.append(
            TimelineItem(
                at=event.at,
                group="ticket",
                kind="ticket",
                title=f"ticket {ticket_id} {event.kind} by {event.actor}",
                detail=event.note or title,
                link=f"/tickets/{ticket_id}",
            )
        )
    items.sort(key=lambda item: item.at, reverse=True)
    return items[:limit]


def kinds_present(items: Iterable[TimelineItem]) -> list[tuple[str, int]]:
    """The filter's choices: each kind on the timeline with its number of lines, groups first."""
    counts = Counter(item.kind for item in items)
    groups = [(g, counts[g]) for g in GROUPS if g in counts and g != "signal"]
    return groups + sorted((k, n) for k, n in counts.items() if k not in GROUPS)


def only(items: Sequence[TimelineItem], kind: str) -> list[TimelineItem]:
    """The lines of one kind ('signal': every signal line); '' keeps everything."""
    if not kind:
        return list(items)
    if kind == "signal":
        return [item for item in items if item.group == "signal"]
    return [item for item in items if item.kind == kind]
