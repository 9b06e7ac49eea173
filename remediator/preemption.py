"""When a rule fires on a host that already has an active remediation.

A host has at most one active remediation. What a new firing does about it:
- the same rule while the fix is being verified: the fault returned (planning escalates);
- a higher-priority plan preempts a lower-priority remediation that has started nothing
  disruptive and has no step on the host: the lower one is cancelled with the reason recorded
  (its rule fires again once the host is back in service if its fault is still there);
- a plan of a person's work only (`ticket`, with or without `drain`) never waits: if it cannot
  preempt, its ticket opens beside the active remediation;
- anything else is held until the active remediation ends.

An outside review found a host at 30 CE/s on one DIMM that got no ticket because an EDAC polling
tweak (priority 4) was active on it; these rules are what makes that impossible.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any, Literal

from sqlalchemy.orm import Session

from checker.schemas import Report
from core import audit
from remediator import draining, fan_tickets, linked_parts, rack_heat, switch_errors
from remediator.actions import ACTIONS
from remediator.decisions import SYSTEM, finish, record, render_template, template_values
from remediator.evaluate import Firing
from remediator.evidence import part_evidence, ticket_title
from remediator.gpu_parts import ticket_part
from remediator.models import Host, HostState, Remediation, RemediationState, StepState
from remediator.rules import Rule, RuleSet, Step
from ticketing import service as tickets
from ticketing.schemas import TicketRequest

log = logging.getLogger(__name__)
PERSON_ACTIONS = frozenset({"ticket", "drain"})
"""Plans made only of these hand the host to a person: they never wait behind a host action."""

Verdict = Literal["preempt", "beside", "hold"]


def person_only(steps: list[Step] | list[str]) -> bool:
    """Whether a plan (its steps, or their action names) only hands the host to a person."""
    actions = [s if isinstance(s, str) else s.action for s in steps]
    return bool(actions) and set(actions) <= PERSON_ACTIONS and actions[-1] == "ticket"


def priority_of(remediation: Remediation, ruleset: RuleSet) -> int:
    rule = ruleset.get(remediation.rule_id)
    if rule is not None:
        return rule.priority
    return min((int(s.params.get("priority", 5)) for s in remediation.steps), default=5)


def why_not_preemptible(remediation: Remediation) -> str | None:
    """None when the remediation can be cancelled without leaving anything half-done on the host."""
    for step in remediation.steps:
        if step.state in (StepState.pending, StepState.skipped):
            continue
        if ACTIONS[step.action].disruptive:
            return f"it has started {step.action} (step {step.index})"
        if step.state == StepState.running:
            return f"its step {step.index} ({step.action}) is in flight"
    return None


def verdict(
    active: Remediation, rule: Rule, steps: list[Step], ruleset: RuleSet, subject: str = ""
) -> tuple[Verdict, str]:
    """What a firing of `rule` (planning `steps`) on `subject` does about the host's active remediation, and why."""
    theirs = priority_of(active, ruleset)
    what = f"remediation {active.id} ({active.rule_id}, priority {theirs})"
    if person_only(steps) and active.subject == subject and active.steps and active.steps[-1].action == "ticket":
        return "hold", f"{what} opens the ticket for {subject or 'the host'}"  # one ticket per part
    blocker = why_not_preemptible(active)
    if rule.priority < theirs and blocker is None:
        return "preempt", f"preempts {what}: priority {rule.priority} before {theirs}, nothing disruptive started"
    if person_only(steps):
        why = blocker or f"priority {rule.priority} does not outrank {theirs}"
        return "beside", f"ticket opened beside {what}, which cannot be preempted: {why}"
    why = blocker or f"priority {rule.priority} does not outrank {theirs}"
    return "hold", f"{what} is active ({why})"


def preempt(session: Session, active: Remediation, host: Host, reason: str, now: dt.datetime) -> None:
    """Cancel the lower-priority remediation, say so in its decision log, and give the host back."""
    for step in active.steps:
        if step.state == StepState.pending:
            step.state = StepState.skipped
            step.result = {"skipped": reason}
    finish(session, active, RemediationState.cancelled, reason, now)
    record(session, host, active.rule_id, "preempted", reason, remediation_id=active.id, now=now)
    audit.record(
        session,
        actor=SYSTEM,
        action="remediator.remediation.preempted",
        object_type="remediation",
        object_id=active.id,
        reason=reason,
    )
    if host.state == HostState.remediating:
        host.state = HostState.in_service
    draining.undrain(session, host, active, now)
    session.flush()


def ticket_beside(
    session: Session, host: Host, firing: Firing, steps: list[Step], report: Report | None, now: dt.datetime
) -> int:
    """Open the plan's ticket now, without waiting for the host's active remediation to end."""
    rule, signal = firing.rule, firing.signal
    ticket_step = steps[-1]
    values = template_values(host.hostname, rule.id, signal.subject, signal.value, signal.detail)
    part_type = str(ticket_step.params.get("part_type", "host"))
    title = render_template(str(ticket_step.params.get("title", rule.description)), values)
    reason = f"{rule.id}: {signal.kind} {signal.value:.3g} on {signal.subject or host.hostname}"
    evidence = part_evidence(session, host, part_type, signal.subject, reason=reason, rule=rule.id)
    evidence["signal"] = {
        "kind": signal.kind,
        "subject": signal.subject,
        "value": signal.value,
        "detail": signal.detail,
    }
    if report is not None:
        evidence["report_id"] = str(report.report_id)
    request = TicketRequest(
        hostname=host.hostname,
        datacenter=host.datacenter,
        rack=host.rack,
        part_type=part_type,
        part=_ticket_key_part(ticket_step.params.get("part"), part_type, signal.subject, values),
        title=ticket_title(title, evidence),
        priority=rule.priority,
        evidence=evidence,
        holds_host=ticket_step.params.get("in_service") is not True,
    )
    request = rack_heat.grouped(session, host, request)  # several hot hosts of a rack: the rack's ticket
    request = switch_errors.grouped(session, host, request, now)  # CRC errors behind one switch: the switch's
    request = fan_tickets.rekeyed(session, request, evidence["signal"])  # a lost fan redundancy: its fan's ticket
    if (
        linked := linked_parts.onto_linked_ticket(session, host, request, rule=rule.id, actor=SYSTEM, now=now)
    ) is not None:
        return int(linked.id)  # an NVMe drive's other name has its open ticket (review r4, finding 3)
    ticket, _created = tickets.open_ticket(session, request, actor=SYSTEM, now=now)
    return ticket.id


def _ticket_key_part(part: object, part_type: str, subject: str, values: dict[str, Any]) -> str:
    """The part a beside ticket is keyed by, as the runner and route_detection key it: the step's `part`
    template filled (`part: host`, the heat rules' one ticket; "{detail.dimm}", a page's DIMM), and where
    it names none or the signal lacks its detail, the subject in the part type's one form (a GPU's address)."""
    named = render_template(str(part), values) if part else ""
    return named if named.strip() and "{" not in named else ticket_part(part_type, subject)
