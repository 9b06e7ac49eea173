"""CRC errors on several hosts behind one switch point at the switch, not at each host's cable: one ticket
for the switch (part type `switch`) instead of one cable ticket per host.

A cut-through switch forwards a frame before its FCS has arrived; when the frame was bad on the way in
(a bad port, a bad ASIC, a bad uplink) the switch "stomps" its FCS on the way out, and every host behind it
counts CRC errors on the port that faces it. nic-crc-errors still fires on each host and its in-service
cable ticket is asked for; when SWITCH_HOSTS or more hosts of the datacenter saw rising CRC errors over
their allowance (`nic_crc_error_rate`, one-port, rising, over_allowance) within SWITCH_WINDOW on ports
whose LLDP neighbour is the same switch (chassis name or id), the request becomes the switch's: the open
`switch` ticket of that chassis gets the detection, or the first one opens listing every such host with
its interface and switch port, and the cable tickets its hosts already had (`host_tickets`). It is keyed
by the datacenter and switch, not the host (ticketing.groups), so two hosts asking at once open one.
Hosts stay in service. Without LLDP nothing is grouped: no switch is known. A later detection goes to the
switch's ticket while enough hosts err (this one among them), and reopens it when its repair is being
verified or it closed within the reopen window and enough hosts erred AFTER the repair's resolve (each
port's hour recounted from it: switch_ticket_for, repairs.route_detection), as a host's ticket is reopened.
Every path takes the switch's oldest open ticket (ticketing.groups.ticket_of_group).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from core.db import service_of
from remediator.models import Host, Signal
from remediator.recount import recounted
from remediator.rules import Rule
from remediator.runtime import Remediator
from remediator.settings import RemediatorSettings
from remediator.signals import SignalValue
from ticketing import groups, queries
from ticketing.schemas import TicketRequest

SWITCH_WINDOW = dt.timedelta(hours=1)
SWITCH_HOSTS = 3  # our own choice: two hosts can share a bad patch panel; three behind one switch rarely do
SWITCH_PART_TYPE = "switch"
NIC_PART_TYPE = "nic"
KIND = "nic_crc_error_rate"
MAX_HOSTS = 100
MAX_PORTS = 4  # a host's ports facing one switch: a bond's two, rarely more
REVERIFY_STATES = ("resolved", "verifying", "closed")  # remediator.repairs': its route reopens such a ticket


def _erring(detail: dict[str, Any] | None) -> bool:
    detail = detail or {}
    return detail.get("scope") == "one-port" and detail.get("rising") is True and detail.get("over_allowance") is True


def _rows_of_switch(
    session: Session, datacenter: str, switch: str, start: dt.datetime, now: dt.datetime, every_row: bool
) -> list[Any]:
    """(hostname, subject, value, detail) of the CRC signals within [start, now] on ports whose LLDP neighbour
    is `switch`, chosen in SQL: the datacenter's CRC rows of every switch, ordered by hostname and cut at
    4000, read a whole large datacenter and dropped the last hosts of this switch (issue 16 leftovers, as
    rack_heat._strongest before it). Each port's newest erring row only (ranked by a window function,
    PostgreSQL and SQLite alike); `every_row`: each port's newest row naming the switch, one-port, erring or
    not (a recount from a repair's resolve judges it anew, so no flag of the stored row may be filtered on;
    its `counted` holds the port's hour, so an older row adds nothing after the resolve the newest does not
    count). Every row since the resolve in hostname order, cut at 4000, dropped the last hosts of a switch
    with more than ~66 erring ports (review r4, finding 8). The rows come by ix_signals_host_kind_at (host,
    kind, time) for the datacenter's hosts; the switch and scope are JSON filters on those rows, not indexed."""
    names_switch = [
        Host.datacenter == datacenter,
        Signal.kind == KIND,
        Signal.observed_at >= start,
        Signal.observed_at <= now,
        Signal.detail["switch"].as_string() == switch,
        Signal.detail["scope"].as_string() == "one-port",
    ]
    newest = (
        func.row_number()
        .over(partition_by=(Signal.host_id, Signal.subject), order_by=(Signal.observed_at.desc(), Signal.id.desc()))
        .label("newest")
    )
    rows = select(Host.hostname, Signal.subject, Signal.value, Signal.detail, newest)
    rows = rows.join(Signal, Signal.host_id == Host.id).where(*names_switch)
    if not every_row:
        rows = rows.where(
            Signal.detail["rising"].as_boolean().is_(True), Signal.detail["over_allowance"].as_boolean().is_(True)
        )
    ranked = rows.subquery()
    chosen = (
        select(ranked.c.hostname, ranked.c.subject, ranked.c.value, ranked.c.detail)
        .where(ranked.c.newest == 1)
        .order_by(ranked.c.hostname, ranked.c.subject)
        .limit(MAX_HOSTS * MAX_PORTS)
    )
    return list(session.execute(chosen).all())


def erring_hosts(
    session: Session, datacenter: str, switch: str, now: dt.datetime, since: dt.datetime | None = None
) -> list[dict[str, Any]]:
    """The hosts of the datacenter whose ports facing `switch` erred within the window before `now`, each
    with its interfaces and switch ports (each port's newest erring hour), hostname order. With `since` (the
    switch's repair was resolved then), only signals observed after it, each recounted from it
    (remediator.recount: the port's hour without what it counted before the repair, its rising and
    over_allowance flags recomputed): one host still erring on its own cable plus its neighbours' errors from
    before the fix made three and reopened the switch's ticket (review of the group tickets, finding 2)."""
    start = now - SWITCH_WINDOW if since is None else max(now - SWITCH_WINDOW, since)
    rows = _rows_of_switch(session, datacenter, switch, start, now, every_row=since is not None)
    hosts: dict[str, dict[str, Any]] = {}
    for hostname, subject, value, detail in rows:
        if since is not None and (recount := recounted(SignalValue(KIND, subject, value, detail or {}), since)):
            value, detail = recount.value, recount.detail
        if not _erring(detail) or (detail or {}).get("switch") != switch:
            continue
        entry = hosts.setdefault(hostname, {"hostname": hostname, "ports": {}})
        entry["ports"][subject] = {"last_hour": value, "switch_port": (detail or {}).get("switch_port")}
    return list(hosts.values())[:MAX_HOSTS]


def switch_of(request: TicketRequest) -> str | None:
    """The switch a NIC ticket's port faces (its evidence's part), or None."""
    part = request.evidence.get("part") or {}
    switch = part.get("switch") if isinstance(part, dict) else None
    return str(switch) if switch else None


def open_switch_ticket(session: Session, datacenter: str, switch: str) -> Any:  # a Ticket or None (queries')
    """The switch's oldest open ticket, as ticketing.groups.ticket_of_group finds it (a database from before
    group keys can hold two: every path picks the same one; migration 0015 cancels the others)."""
    now = dt.datetime.now(dt.UTC)  # unused: no reopen window, closed ones never match
    part = f"switch {switch}"
    return groups.ticket_of_group(session, datacenter=datacenter, part_type=SWITCH_PART_TYPE, part=part, now=now)


def _resolved_at(ticket: Any) -> dt.datetime | None:
    """When the ticket's repair was resolved, for one being verified or closed: only what came after counts."""
    if ticket is None or ticket.state.value not in REVERIFY_STATES or ticket.resolved_at is None:
        return None
    resolved: dt.datetime = ticket.resolved_at
    return resolved if resolved.tzinfo else resolved.replace(tzinfo=dt.UTC)


def routes_to_switch(rule: Rule) -> bool:
    """A rule whose only steps are in-service NIC tickets (nic-crc-errors): its detections may go to the
    switch's ticket (repairs.route_detection)."""
    steps = [step for plan in (rule.plan, *(rung.plan for rung in rule.escalation)) for step in plan]
    return bool(steps) and all(
        step.action == "ticket" and step.params.get("part_type") == NIC_PART_TYPE and step.leaves_host_in_service
        for step in steps
    )


def switch_ticket_for(
    session: Session,
    host: Host,
    rule: Rule,
    detail: dict[str, Any],
    now: dt.datetime,
    reopen_window: dt.timedelta | None = None,
) -> Any:
    """The switch ticket a detection of this host goes to, when the rule may go there, its port faces a
    switch with one, and enough hosts behind that switch err now: the open one, else one closed within
    `reopen_window` (route_detection reopens it, as a host's ticket: the errors came back after the repair).
    Enough erring hosts are asked for every time, so an open one never goes stale as a rack's does."""
    switch = detail.get("switch")
    if not switch or not routes_to_switch(rule) or not _erring(detail):
        return None
    ticket = groups.ticket_of_group(
        session,
        datacenter=host.datacenter,
        part_type=SWITCH_PART_TYPE,
        part=f"switch {switch}",
        now=now,
        reopen_window=reopen_window,
    )
    if ticket is None:
        return None
    hosts = erring_hosts(session, host.datacenter, str(switch), now, since=_resolved_at(ticket))
    if len(hosts) < SWITCH_HOSTS or host.hostname not in {h["hostname"] for h in hosts}:
        return None
    return ticket


def has_heard_from(evidence: dict[str, Any] | None, hostname: str) -> bool:
    """Whether a switch ticket already lists the host: among the hosts it opened with, or the hosts it heard
    from since (`heard_from`, ticketing.groups; `detections`, the last 50 only, for a ticket opened before
    that list was kept: after 50 detections a host seen long ago was news again)."""
    evidence = evidence or {}
    if hostname in groups.heard_from(evidence):
        return True
    listed = {h.get("hostname") for h in (evidence.get("switch_errors") or {}).get("hosts") or []}
    listed |= {d.get("host") for d in evidence.get("detections") or []}
    return hostname in listed


def _host_tickets(session: Session, hosts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    found = []
    for entry in hosts[:MAX_HOSTS]:
        for ticket in queries.open_tickets_of_host(session, entry["hostname"]):
            if ticket.part_type == NIC_PART_TYPE and not ticket.holds_host:
                found.append({"id": ticket.id, "hostname": ticket.hostname, "title": ticket.title})
    return found[:20]


def _reopen_window(session: Session) -> dt.timedelta:
    """The remediator's ticket reopen window (the route's, repairs.route_detection), its default without one."""
    remediator = service_of(session, Remediator)
    seconds = (
        remediator.settings.ticket_reopen_window_s
        if remediator is not None
        else RemediatorSettings.model_fields["ticket_reopen_window_s"].default
    )
    return dt.timedelta(seconds=seconds)


def grouped(session: Session, host: Host, request: TicketRequest, now: dt.datetime | None) -> TicketRequest:
    """The in-service NIC ticket request as the switch's, when enough hosts behind its switch err within
    the window before `now` (the firing's report; the host's last report when the runner opens it); else
    as asked."""
    if request.part_type != NIC_PART_TYPE or request.holds_host:
        return request  # a port that is the host's only link, or every port at once, stays the host's
    switch = switch_of(request)
    if switch is None:
        return request
    now = now or dt.datetime.now(dt.UTC)
    now = now if now.tzinfo else now.replace(tzinfo=dt.UTC)
    # counted as the route counts (switch_ticket_for): from the resolve of the switch's ticket, a closed one
    # within the reopen window too; counting a closed one's hosts from before its repair opened a new switch
    # ticket listing hosts whose errors came before the fix (review r4, finding 5)
    last = groups.ticket_of_group(
        session,
        datacenter=host.datacenter,
        part_type=SWITCH_PART_TYPE,
        part=f"switch {switch}",
        now=now,
        reopen_window=_reopen_window(session),
    )
    existing = last if last is not None and last.state.value != "closed" else None
    hosts = erring_hosts(session, host.datacenter, switch, now, since=_resolved_at(last))
    if len(hosts) < SWITCH_HOSTS:
        return request
    names = ", ".join(f"{h['hostname']} ({', '.join(list(h['ports'])[:2])})" for h in hosts[:6])
    more = f" and {len(hosts) - 6} more" if len(hosts) > 6 else ""
    evidence = {
        **request.evidence,
        "part_type": SWITCH_PART_TYPE,
        "switch_errors": {
            "datacenter": host.datacenter,
            "switch": switch,
            "hosts": hosts,
            "window_s": int(SWITCH_WINDOW.total_seconds()),
            "detected_on": host.hostname,
            "host_tickets": _host_tickets(session, hosts),
        },
    }
    return request.model_copy(
        update={
            "hostname": existing.hostname if existing is not None else host.hostname,
            "rack": existing.rack if existing is not None else request.rack,
            "part_type": SWITCH_PART_TYPE,
            "part": f"switch {switch}",
            # one open ticket per switch (its key is the switch's); one opened before group keys keeps its own
            "group_key": existing.dedup_key
            if existing is not None
            else groups.group_key(groups.datacenter_scope(host.datacenter), SWITCH_PART_TYPE, f"switch {switch}"),
            "title": f"CRC errors on {len(hosts)} hosts behind switch {switch} ({host.datacenter}): {names}{more}: "
            "check the switch (a port, its ASIC, an uplink), not each cable",
            "holds_host": False,
            "evidence": evidence,
        }
    )
