"""Which fan ticket a lost fan redundancy goes to (review r4, finding 4).

The redundancy's own key (`detail.fan_part`: its one failing fan, else the group) moves from report to report
while one fan fails: a fan the BMC stops reading (`ns`) leaves no failing fan, a fan pulled for its swap leaves
the sensors (the Redfish parser drops an Absent member), a second fan failing makes two; each time the key fell
back to the group and a second ticket opened for the same fan, mid-repair too. So before planning, a lost
redundancy with no ticket of its own key goes to an open fan ticket of the host whose fan is one of its
candidates (failing, unreadable, or read ok when none is) or is missing from the sensors (being swapped),
else to an open ticket keyed by the group (one opened before this rule keyed by the fan). With none, the
rule plans and its ticket is keyed as before.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from remediator.signals import SignalValue
from ticketing import queries
from ticketing.schemas import TicketRequest

FAN_PART_TYPE = "fan"
SETTLING_STATES = ("resolved", "verifying")  # repaired, waiting for the fan to be proven: not a new failure's


def fan_ticket_for(session: Session, hostname: str, signal: SignalValue) -> Any | None:
    """The open fan ticket a lost fan redundancy belongs to (module docstring), or None. One read of the
    host's open tickets, only for a fan_redundancy_lost signal. Review r7, finding 1: the oldest ticket of any
    candidate won, so a slowing fan's in-service ticket took the redundancy (and the host) while another fan
    read 240 cr; now a failing candidate's ticket, in candidate order, comes first, and a failing fan with no
    ticket of its own opens one (the rule's key is that fan) rather than joining another fan's; an unreadable
    candidate's ticket next; a slowing or read-ok candidate's only when it is the host's only fan ticket, and a
    read-ok one only when that ticket holds the host (a fan being repaired, not one merely flagged slowing); a
    fan missing from the sensors only when the report lists fans (none listed says nothing of any fan); and a
    resolved or verifying ticket only for a fan that is failing again (the BMC's redundancy lags a swap)."""
    if signal.kind != "fan_redundancy_lost":
        return None
    detail = signal.detail
    candidates = [
        (str(c.get("sensor")), str(c.get("candidate")))
        for c in detail.get("fan_candidates") or []
        if isinstance(c, dict)
    ]
    seen = detail.get("fans_seen")
    fans = [t for t in queries.open_tickets_of_host(session, hostname) if t.part_type == FAN_PART_TYPE]
    live = [t for t in fans if t.state.value not in SETTLING_STATES]
    of_fan = {t.part: t for t in reversed(live)}  # oldest first wins: the fan's first ticket
    failing = [sensor for sensor, why in candidates if why == "failing"]
    for sensor in failing:
        ticket = next((t for t in fans if t.part == sensor), None)  # a failing fan's ticket, settling or not
        if ticket is not None:
            return ticket
    if not failing:
        for sensor, why in candidates:
            ticket = of_fan.get(sensor)
            if ticket is None or (why != "unreadable" and len(fans) != 1):
                continue
            if why == "read ok" and not ticket.holds_host:
                continue  # an in-service ticket (a slowing fan's) of a fan that now reads ok: not the failed one
            return ticket
        if isinstance(seen, list) and seen:
            for ticket in live:
                if ticket.part and ticket.part != signal.subject and ticket.part not in seen:
                    return ticket  # a fan gone from the sensors: pulled for its swap, or no longer listed
    return next((t for t in live if t.part == signal.subject), None)


def rekeyed(session: Session, request: TicketRequest, signal: dict[str, Any] | None) -> TicketRequest:
    """A lost fan redundancy's ticket request, keyed by the open fan ticket it belongs to (fan_ticket_for), so
    opening it adds a detection there: the path of a plan's ticket (the runner's, one opened beside a running
    remediation), where route_detection did not see that ticket yet (a fan's critical sensor and the lost
    redundancy in one report). Any other request unchanged."""
    if request.part_type != FAN_PART_TYPE or not signal or signal.get("kind") != "fan_redundancy_lost":
        return request
    detail = signal.get("detail")
    value = SignalValue(
        "fan_redundancy_lost", str(signal.get("subject") or ""), 1.0, detail if isinstance(detail, dict) else {}
    )
    ticket = fan_ticket_for(session, request.hostname, value)
    return (
        request if ticket is None or ticket.part == request.part else request.model_copy(update={"part": ticket.part})
    )
