"""Several hosts of one rack running hot at once point at the rack's cooling, not at each host: one
ticket for the rack (part type `rack_airflow`) instead of one airflow ticket per host.

The per-host rules still fire and are recorded as usual (sensor-critical-temperature,
cpu-package-throttling, thermal-throttling: their tickets leave the host in service). When such a
rule opens its `airflow` ticket in service (one that holds its host stays the host's: nvme-temperature's,
sensor-critical-temperature-nr's drain) and RACK_HOT_HOSTS or more hosts of the same datacenter and rack
ran hot within RACK_HOT_WINDOW of this host's newest heat signal, the request becomes the rack's: the
open `rack_airflow` ticket of that rack gets the detection (its hosts, sensors and signals), or the
first one opens on this host, listing every hot host of the rack with the sensors that showed it and the
open airflow tickets its hosts already had (`host_tickets`). It is keyed by the rack, not the host
(ticketing.groups), so two hosts of the rack asking at once open one. Later detections of a hot host of
the rack go to that ticket while it was detected within FRESH_WITHIN; an older one takes them only while
the rack runs hot as a rack (a lone hot host keeps its own ticket), the route and the request by the same
rule (open_rack_ticket, grouped), and the hosts of a wave that joins it go into its evidence and title, with
a comment when it was quiet (ticketing.groups.Join). The ticket is reopened when its repair is being
verified or it closed within the reopen window and RACK_HOT_HOSTS hosts ran hot after the repair's resolve
(open_rack_ticket, repairs.route_detection). Only a host that itself ran hot reaches the rack's ticket.

A host counts as hot only at a heat rule's own threshold (HOT_AT: a temperature sensor past its
UPPER critical threshold, a package throttled 5% of ten minutes, three kernel throttle lines in an
hour): one throttle event on a neighbour is no rack fault. A host keeps its own ticket, whatever its
rack, when it has a cause of its own (`own_cause`): a fan signal in the window (a failed fan, a fan
sensor past its threshold), or it runs HOTTER_BY_C or more above the median of the rack's other hot
hosts; such a host neither counts toward RACK_HOT_HOSTS nor is listed as the rack's heat (the rack's
ticket lists it apart, `own_cause_hosts`, with its own ticket). A host hot alone keeps its own airflow
ticket. The readings are the highest per host and sensor in the window, ranked in SQL (`_strongest`).
"""

from __future__ import annotations

import datetime as dt
import statistics
from typing import Any

from sqlalchemy import and_, func, or_, select
from sqlalchemy.orm import Session

from remediator.models import Host, Signal
from remediator.recount import recounted
from remediator.rules import Rule
from remediator.signals import SignalValue
from ticketing import groups, opening, queries
from ticketing.schemas import TicketRequest

RACK_HOT_WINDOW = dt.timedelta(hours=1)
FRESH_WITHIN = RACK_HOT_WINDOW + opening.DETECTION_EVERY
"""How recently a rack's ticket nobody has fixed yet must have been detected to take a hot host's detection:
the heat window, plus the hour within which detections are one and `last_detected_at` does not move
(ticketing.opening.DETECTION_EVERY). With the window alone, a rack hot for over an hour found its own
ticket stale between two refreshes and opened a second one (review of issue 16, M1)."""
REVERIFY_STATES = ("resolved", "verifying", "closed")  # remediator.repairs': its route reopens such a ticket
RACK_HOT_HOSTS = 2
RACK_PART_TYPE = "rack_airflow"
HOST_PART = "host"  # the heat rules' airflow ticket is the host's: one per host, whichever sensor showed it
HEAT_KINDS = ("sensor_critical", "cpu_throttle_percent", "kernel_event_count")
COUNTED_KINDS = ("cpu_throttle_percent", "kernel_event_count")  # carry a counted span (remediator.recount)
FAN_KINDS = ("fan_failure", "sensor_critical")
# the heat rules' own thresholds (remediator/default_rules.yaml; tests/decisions/test_rack_heat.py checks them)
HOT_AT = {"cpu_throttle_percent": 5.0, "kernel_event_count": 3.0}
HOTTER_BY_C = 10.0
# remediator/derive/sensors.py's `level`: past an upper threshold, or one the listing does not say
UPPER_LEVELS = frozenset({"upper_cr", "upper_nr", "unknown_cr", "unknown_nr"})
MAX_HOSTS = 100
MAX_SUBJECTS = 20  # heat sensors and packages read per host: a dual-socket host lists a handful


def is_heat(kind: str, subject: str, detail: dict[str, Any] | None, value: float | None = None) -> bool:
    """Whether a stored signal says the host ran hot, at a heat rule's threshold: a temperature sensor past
    an upper critical threshold (not a lower one: a cold inlet, a sensor reading 0), a package throttled
    for heat, the kernel's thermal-throttle lines."""
    detail = detail or {}
    if kind == "sensor_critical":
        return detail.get("kind") == "temperature" and detail.get("level", "unknown_cr") in UPPER_LEVELS
    if kind == "kernel_event_count" and subject != "thermal_throttle":
        return False
    if kind not in HOT_AT:
        return False
    return value is None or value >= HOT_AT[kind]


def _is_fan(kind: str, detail: dict[str, Any] | None) -> bool:
    return kind == "fan_failure" or (kind == "sensor_critical" and (detail or {}).get("kind") == "fan")


def _latest_heat(session: Session, host: Host) -> dt.datetime | None:
    newest = session.scalars(
        select(Signal)
        .where(Signal.host_id == host.id, Signal.kind.in_(HEAT_KINDS))
        .order_by(Signal.observed_at.desc())
        .limit(20)
    ).all()
    return next((s.observed_at for s in newest if is_heat(s.kind, s.subject, s.detail, s.value)), None)


def _strongest(
    session: Session,
    host: Host,
    kinds: tuple[str, ...],
    start: dt.datetime,
    end: dt.datetime,
    rack_wide: bool,
    every_row: bool = False,
    sensors: str = "temperature",
) -> list[Any]:
    """(hostname, kind, subject, value, detail) per host, kind and subject of the rack (or this host alone)
    within [start, end]: its highest reading there, the newest of equals. Ranked in SQL (a window function,
    PostgreSQL and SQLite alike), so the rack's every sensor of every report in the window (4 heat rows a
    minute per host) is never cut off by a row limit: a hostname-ordered limit dropped the rack's last hosts
    and with them the hottest host's own reading (review of the group tickets, finding 7). `every_row`: each
    row, not the highest (a counted signal recounted from a repair's resolve: its raw value ranks nothing).
    `sensors`: the critical sensors' kind read (temperature, fan), and of the kernel's counts only the
    thermal throttle, chosen in SQL: every critical sensor of a host (voltages, power, drives: ~45 on some)
    counted toward the row limit, and a 48-host rack's last hosts were dropped (second review, note 8)."""
    scope = and_(Host.datacenter == host.datacenter, Host.rack == host.rack) if rack_wide else Host.id == host.id
    rank = (
        func.row_number()
        .over(
            partition_by=(Signal.host_id, Signal.kind, Signal.subject),
            order_by=(func.coalesce(Signal.value, -1e18).desc(), Signal.observed_at.desc()),
        )
        .label("rank")
    )
    ranked = (
        select(Host.hostname, Signal.kind, Signal.subject, Signal.value, Signal.detail, rank)
        .join(Signal, Signal.host_id == Host.id)
        .where(scope, Signal.kind.in_(kinds), Signal.observed_at >= start, Signal.observed_at <= end)
        .where(or_(Signal.kind != "sensor_critical", Signal.detail["kind"].as_string() == sensors))
        .where(or_(Signal.kind != "kernel_event_count", Signal.subject == "thermal_throttle"))
        .subquery()
    )
    chosen = select(ranked.c.hostname, ranked.c.kind, ranked.c.subject, ranked.c.value, ranked.c.detail)
    if not every_row:
        chosen = chosen.where(ranked.c.rank == 1).limit(MAX_HOSTS * MAX_SUBJECTS)
    rows = session.execute(chosen.order_by(ranked.c.hostname, ranked.c.kind, ranked.c.subject)).all()
    return list(rows)


def _readings(
    session: Session, host: Host, since: dt.datetime | None, rack_wide: bool = True
) -> dict[str, dict[str, Any]]:
    """The hosts that ran hot within the window around this host's newest heat signal, each with the
    sensors or packages that showed it (their highest reading), hostname order. With `since` (a repair's
    resolve), only signals observed after it, each recounted from it when it counts a span
    (remediator.recount: a throttle share, kernel lines), so heat from before the repair makes no host
    hot (review of the group tickets, finding 2)."""
    if not host.rack:
        return {}
    latest = _latest_heat(session, host)
    if latest is None:
        return {}
    start = latest - RACK_HOT_WINDOW if since is None else max(latest - RACK_HOT_WINDOW, _aware(since))
    end = latest + RACK_HOT_WINDOW
    if since is None:
        rows = _strongest(session, host, HEAT_KINDS, start, end, rack_wide)
    else:
        # a counted signal's rows are each recounted from the resolve and the highest recount kept: ranked by
        # raw value, a row just after the resolve, its count nearly all from before, won and recounted to ~0,
        # hiding the later rows wholly after the repair (second review of repair-reopen, finding 2). Every
        # row of the window since the resolve (an hour at most: RACK_HOT_WINDOW), only for a resolved ticket.
        plain = tuple(k for k in HEAT_KINDS if k not in COUNTED_KINDS)
        rows = _strongest(session, host, plain, start, end, rack_wide)
        best: dict[tuple[str, str, str], Any] = {}
        for row in _strongest(session, host, COUNTED_KINDS, start, end, rack_wide, every_row=True):
            found = recounted(SignalValue(row.kind, row.subject, row.value, row.detail or {}), since)
            value = found.value if found is not None else row.value
            key = (row.hostname, row.kind, row.subject)
            if key not in best or value >= best[key][3]:
                best[key] = (row.hostname, row.kind, row.subject, value, row.detail)
        rows = sorted([*rows, *best.values()], key=lambda r: (r[0], r[1], r[2]))
    hosts: dict[str, dict[str, Any]] = {}
    for hostname, kind, subject, value, detail in rows:
        if not is_heat(kind, subject, detail, value):
            continue
        entry = hosts.setdefault(hostname, {"hostname": hostname, "sensors": {}})
        reading = {"kind": kind, "value": value}
        if kind == "sensor_critical":
            reading.update(status=(detail or {}).get("status"), thresholds=(detail or {}).get("thresholds"))
        entry["sensors"][subject] = reading
    return hosts


def _aware(at: dt.datetime) -> dt.datetime:
    return at if at.tzinfo else at.replace(tzinfo=dt.UTC)


def _fans(session: Session, host: Host, rack_wide: bool, since: dt.datetime | None = None) -> dict[str, str]:
    """Hostname -> the fan signal (a failed fan, a fan sensor past its threshold) within the window around
    this host's newest heat signal: that host's heat is its own fan's. With `since` (a repair's resolve), only
    fan signals after it: a fan replaced in the repair no longer marks its host (second review, note 9)."""
    latest = _latest_heat(session, host)
    if latest is None:
        return {}
    found: dict[str, str] = {}
    start = latest - RACK_HOT_WINDOW if since is None else max(latest - RACK_HOT_WINDOW, _aware(since))
    rows = _strongest(session, host, FAN_KINDS, start, latest + RACK_HOT_WINDOW, rack_wide, sensors="fan")
    for hostname, kind, subject, _value, detail in rows:
        if _is_fan(kind, detail) and hostname not in found:
            found[hostname] = f"its own fan: {kind} on {subject}"
    return found


def _hottest(entry: dict[str, Any]) -> float | None:
    readings = [r["value"] for r in entry["sensors"].values() if r["kind"] == "sensor_critical"]
    return max(readings) if readings else None


def _hotter(hostname: str, hot: dict[str, dict[str, Any]]) -> str | None:
    mine = _hottest(hot[hostname]) if hostname in hot else None
    others = [t for name, h in hot.items() if name != hostname and (t := _hottest(h)) is not None]
    if mine is not None and others and mine - statistics.median(others) >= HOTTER_BY_C:
        return f"it runs {mine - statistics.median(others):.0f} C hotter than its rack's other hot hosts"
    return None


def rack_heat_of(
    session: Session, host: Host, since: dt.datetime | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The rack's hot hosts around this host's newest heat: those that count toward RACK_HOT_HOSTS, and
    those whose heat has a cause of its own (`cause`: their fan, or running HOTTER_BY_C above the others),
    which keep their own ticket and neither count nor are listed as the rack's heat: a host with a failed
    fan made a lone hot neighbour look like a hot rack (review of the group tickets, finding 6)."""
    hot = _readings(session, host, since)
    fans = _fans(session, host, rack_wide=True, since=since) if hot else {}
    counted, own = [], []
    for hostname, entry in hot.items():
        cause = fans.get(hostname) or _hotter(hostname, hot)
        if cause is None:
            counted.append(entry)
        else:
            own.append({"hostname": hostname, "cause": cause})
    return counted[:MAX_HOSTS], own[:MAX_HOSTS]


def hot_hosts(session: Session, host: Host, since: dt.datetime | None = None) -> list[dict[str, Any]]:
    """The hosts of this host's rack that ran hot within the window around its newest heat signal without a
    cause of their own, each with the sensors or packages that showed it, hostname order (rack_heat_of)."""
    return rack_heat_of(session, host, since)[0]


def own_cause(
    session: Session, host: Host, hot: list[dict[str, Any]] | None = None, since: dt.datetime | None = None
) -> str | None:
    """Why this host's heat is its own, not its rack's: a fan signal within the window, or it runs much
    hotter than the rack's other hot hosts (as rack_heat_of judges it). None: nothing says so. The host's
    own reading comes from its own query, never from a rack-wide list that could miss it (finding 7); `hot`,
    when given, is the rack's hot hosts to compare with; `since`, a repair's resolve: only what came after."""
    fan = _fans(session, host, rack_wide=False, since=since).get(host.hostname)
    if fan is not None:
        return fan
    mine = _readings(session, host, since, rack_wide=False).get(host.hostname)
    if mine is None:
        return None
    others = {h["hostname"]: h for h in hot} if hot is not None else _readings(session, host, since)
    return _hotter(host.hostname, {**others, host.hostname: mine})


def airflow_in_service(rule: Rule) -> bool:
    """A rule whose only steps are in-service airflow tickets (never one that drains the host: past a
    non-recoverable threshold): its detections may go to a rack's cooling ticket."""
    steps = [step for plan in (rule.plan, *(rung.plan for rung in rule.escalation)) for step in plan]
    return bool(steps) and all(
        step.action == "ticket" and step.params.get("part_type") == "airflow" and step.leaves_host_in_service
        for step in steps
    )


def routes_to_rack(session: Session, host: Host, rule: Rule) -> bool:
    """Whether a detection of this host may go to its rack's open cooling ticket (repairs.route_detection):
    a rule whose only steps are an in-service airflow ticket (never one that drains the host: past a
    non-recoverable threshold), on a host whose heat has no cause of its own."""
    if not airflow_in_service(rule) or not host.rack:
        return False
    rack = queries.open_ticket_of_rack(session, host.datacenter, host.rack, RACK_PART_TYPE)
    return own_cause(session, host, since=_repair_resolved_at(rack)) is None


def _repair_resolved_at(ticket: Any) -> dt.datetime | None:
    """When the ticket's repair was resolved, for one being verified or closed: only what came after counts."""
    return ticket.resolved_at if ticket is not None and ticket.state.value in REVERIFY_STATES else None


def open_rack_ticket(
    session: Session, host: Host, now: dt.datetime, reopen_window: dt.timedelta | None = None
) -> Any:  # a Ticket or None (ticketing.groups')
    """The rack's cooling ticket a detection of this host at `now` goes to (repairs.route_detection), by the
    rule `grouped` applies, so the route and the ticket request pick the same ticket. Only when this host
    itself ran hot (a CXL device's temperature on a cool host is that device's: finding 5). Its open one:
    detected within FRESH_WITHIN before `now`, whoever is hot; older (nobody has said it is fixed yet), only
    when the rack runs hot as a rack again (RACK_HOT_HOSTS hosts): then it takes the heat whatever its age, as
    `grouped` would give it the ticket's request anyway (refusing it made every hot host of the batch plan a
    remediation, which tripped the heat rule's breaker for the datacenter: finding 1); a lone hot host keeps
    its own. One resolved or being verified, or closed within `reopen_window`: when RACK_HOT_HOSTS hosts ran
    hot AFTER its repair was resolved (finding 2): the route reopens it, as it reopens a host's ticket whose
    fault returned (ticketing.opening.ticket_for_detection)."""
    ticket = groups.ticket_of_group(
        session,
        datacenter=host.datacenter,
        rack=host.rack or "",
        part_type=RACK_PART_TYPE,
        now=now,
        reopen_window=reopen_window,
    )
    if ticket is None:
        return None
    hot = hot_hosts(session, host, since=_repair_resolved_at(ticket))
    if host.hostname not in {h["hostname"] for h in hot}:
        return None
    as_a_rack = len(hot) >= RACK_HOT_HOSTS
    if ticket.state.value in REVERIFY_STATES:
        return ticket if as_a_rack else None
    last = _aware(ticket.last_detected_at or ticket.created_at)
    fresh = now - last <= FRESH_WITHIN
    return ticket if fresh or as_a_rack else None


def has_heard_from(evidence: dict[str, Any] | None, hostname: str, subject: str | None = None) -> bool:
    """Whether a rack ticket already lists the host (and the sensor, when given): among the hot hosts it
    opened with, or the hosts it heard from since (`heard_from`, ticketing.groups; `detections`, the last 50
    only, for a ticket opened before that list was kept). A new sensor of a listed host is news (an
    escalation)."""
    evidence = evidence or {}
    heard = groups.heard_from(evidence)
    if hostname in heard and (subject is None or subject in heard[hostname]):
        return True
    listed: set[tuple[Any, Any]] = set()
    for entry in (evidence.get("rack_heat") or {}).get("hosts") or []:
        listed.update((entry.get("hostname"), s) for s in entry.get("sensors") or {})
        listed.add((entry.get("hostname"), None))
    for detection in evidence.get("detections") or []:
        listed.update({(detection.get("host"), detection.get("subject")), (detection.get("host"), None)})
    return (hostname, subject) in listed


def _host_tickets(session: Session, hot: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The open airflow tickets the rack's hot hosts already have (the first hot host's, opened alone)."""
    found = []
    for entry in hot[:MAX_HOSTS]:
        for ticket in queries.open_tickets_of_host(session, entry["hostname"]):
            if ticket.part_type == "airflow" and not ticket.holds_host:
                found.append({"id": ticket.id, "hostname": ticket.hostname, "title": ticket.title})
    return found[:20]


def title_of(host: Host, hot: list[dict[str, Any]]) -> str:
    names = ", ".join(f"{h['hostname']} ({', '.join(list(h['sensors'])[:3])})" for h in hot[:6])
    more = f" and {len(hot) - 6} more" if len(hot) > 6 else ""
    return f"Cooling check of rack {host.rack} ({host.datacenter}): {len(hot)} hosts run hot: {names}{more}"


def join_of(session: Session, host: Host, ticket: Any) -> groups.Join:
    """What a hot host's detection brings to the rack's ticket it joins (repairs.route_detection): the rack's
    hot hosts now, merged into the ticket's list, and its title (ticketing.groups.Join)."""
    hot = hot_hosts(session, host, since=_repair_resolved_at(ticket))
    mine: dict[str, Any] = next((h for h in hot if h["hostname"] == host.hostname), {"sensors": {}})
    return groups.Join(
        section="rack_heat",
        hosts=tuple(hot),
        title=title_of(host, hot),
        host=host.hostname,
        subjects=tuple(mine["sensors"]),
        host_tickets=tuple(_host_tickets(session, hot)),
    )


def grouped(session: Session, host: Host, request: TicketRequest) -> TicketRequest:
    """The airflow ticket request as the rack's, when several hosts of the rack run hot and this one has
    no cause of its own; else as asked. The rack's open ticket is taken whatever its age (one open ticket
    per rack: its key is the rack's), by the rule open_rack_ticket applies; one whose repair was resolved
    counts only the heat that came after it."""
    if request.part_type != "airflow" or request.holds_host or not host.rack:
        return request  # a ticket that holds its host (an NVMe's heat, a host past nr) stays the host's
    # the rack's oldest open ticket; its own key is kept (one opened before group keys is keyed by its first host)
    existing = queries.open_ticket_of_rack(session, host.datacenter, host.rack, RACK_PART_TYPE)
    hot, own = rack_heat_of(session, host, since=_repair_resolved_at(existing))
    if len(hot) < RACK_HOT_HOSTS or host.hostname not in {h["hostname"] for h in hot}:
        return request  # hot alone, or with a cause of its own (a fan, much hotter than the rest): its ticket
    part = f"rack {host.rack}"
    key = groups.group_key(groups.rack_scope(host.datacenter, host.rack), RACK_PART_TYPE, part)
    evidence = {
        **request.evidence,
        "part_type": RACK_PART_TYPE,
        "rack_heat": {
            "datacenter": host.datacenter,
            "rack": host.rack,
            "hosts": hot,
            "window_s": int(RACK_HOT_WINDOW.total_seconds()),
            "detected_on": host.hostname,
            "host_tickets": _host_tickets(session, hot),  # folded in here: the hosts' own airflow tickets
            # hot too, but with a cause of their own: not the rack's heat, each keeps its own ticket
            "own_cause_hosts": [{**entry, "tickets": _host_tickets(session, [entry])} for entry in own],
        },
        "signals": [{"host": host.hostname, **s} for s in request.evidence.get("signals", [])],
    }
    return request.model_copy(
        update={
            "hostname": existing.hostname if existing is not None else host.hostname,
            "part_type": RACK_PART_TYPE,
            "part": part,
            "group_key": existing.dedup_key if existing is not None else key,
            "title": title_of(host, hot),
            "holds_host": False,  # the rack's cooling is fixed around its hosts; each keeps working
            "evidence": evidence,
        }
    )
