"""Several hosts of one rack running hot at once point at the rack's cooling, not at each host: one
ticket for the rack (part type `rack_airflow`) instead of one airflow ticket per host.

The per-host rules still fire and are recorded as usual (sensor-critical-temperature,
cpu-package-throttling, thermal-throttling: their tickets leave the host in service). When such a
rule opens its `airflow` ticket in service (one that holds its host stays the host's: nvme-temperature's,
sensor-critical-temperature-nr's drain) and RACK_HOT_HOSTS or more hosts of the same datacenter and rack
ran hot within RACK_HOT_WINDOW of this host's newest heat signal, the request becomes the rack's: the
open `rack_airflow` ticket of that rack with a detection within the window gets the detection (its
hosts, sensors and signals), or the first one opens on this host, listing every hot host of the rack
with the sensors that showed it and the open airflow tickets its hosts already had (`host_tickets`).
Later detections of a hot host of the rack go to that ticket (repairs.route_detection).

A host counts as hot only at a heat rule's own threshold (HOT_AT: a temperature sensor past its
UPPER critical threshold, a package throttled 5% of ten minutes, three kernel throttle lines in an
hour): one throttle event on a neighbour is no rack fault. A host keeps its own ticket, whatever its
rack, when it has a cause of its own (`own_cause`): a fan signal in the window (a failed fan, a fan
sensor past its threshold), or it runs HOTTER_BY_C or more above the median of the rack's other hot
hosts. A host hot alone keeps its own airflow ticket.
"""

from __future__ import annotations

import datetime as dt
import statistics
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from remediator.models import Host, Signal
from remediator.rules import Rule
from ticketing import queries
from ticketing.schemas import TicketRequest

RACK_HOT_WINDOW = dt.timedelta(hours=1)
RACK_HOT_HOSTS = 2
RACK_PART_TYPE = "rack_airflow"
HOST_PART = "host"  # the heat rules' airflow ticket is the host's: one per host, whichever sensor showed it
HEAT_KINDS = ("sensor_critical", "cpu_throttle_percent", "kernel_event_count")
FAN_KINDS = ("fan_failure", "sensor_critical")
# the heat rules' own thresholds (remediator/default_rules.yaml; tests/decisions/test_rack_heat.py checks them)
HOT_AT = {"cpu_throttle_percent": 5.0, "kernel_event_count": 3.0}
HOTTER_BY_C = 10.0
# remediator/derive/sensors.py's `level`: past an upper threshold, or one the listing does not say
UPPER_LEVELS = frozenset({"upper_cr", "upper_nr", "unknown_cr", "unknown_nr"})
MAX_HOSTS = 100


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


def hot_hosts(session: Session, host: Host) -> list[dict[str, Any]]:
    """The hosts of this host's rack that ran hot within the window around its newest heat signal (this
    one among them), each with the sensors or packages that showed it, hostname order."""
    if not host.rack:
        return []
    latest = _latest_heat(session, host)
    if latest is None:
        return []
    rows = session.execute(
        select(Host.hostname, Signal.kind, Signal.subject, Signal.value, Signal.detail)
        .join(Signal, Signal.host_id == Host.id)
        .where(
            Host.datacenter == host.datacenter,
            Host.rack == host.rack,
            Signal.kind.in_(HEAT_KINDS),
            Signal.observed_at >= latest - RACK_HOT_WINDOW,
            Signal.observed_at <= latest + RACK_HOT_WINDOW,
        )
        .order_by(Host.hostname, Signal.observed_at)
        .limit(MAX_HOSTS * 20)
    ).all()
    hosts: dict[str, dict[str, Any]] = {}
    for hostname, kind, subject, value, detail in rows:
        if not is_heat(kind, subject, detail, value):
            continue
        entry = hosts.setdefault(hostname, {"hostname": hostname, "sensors": {}})
        reading = {"kind": kind, "value": value}
        if kind == "sensor_critical":
            reading.update(status=(detail or {}).get("status"), thresholds=(detail or {}).get("thresholds"))
        entry["sensors"][subject] = reading  # the newest reading of each sensor
    return list(hosts.values())[:MAX_HOSTS]


def _hottest(entry: dict[str, Any]) -> float | None:
    readings = [r["value"] for r in entry["sensors"].values() if r["kind"] == "sensor_critical"]
    return max(readings) if readings else None


def own_cause(session: Session, host: Host, hot: list[dict[str, Any]] | None = None) -> str | None:
    """Why this host's heat is its own, not its rack's: a fan signal within the window, or it runs much
    hotter than the rack's other hot hosts. None: nothing says so."""
    latest = _latest_heat(session, host)
    if latest is None:
        return None
    fans = session.scalars(
        select(Signal).where(
            Signal.host_id == host.id,
            Signal.kind.in_(FAN_KINDS),
            Signal.observed_at >= latest - RACK_HOT_WINDOW,
            Signal.observed_at <= latest + RACK_HOT_WINDOW,
        )
    ).all()
    fan = next((s for s in fans if _is_fan(s.kind, s.detail)), None)
    if fan is not None:
        return f"its own fan: {fan.kind} on {fan.subject}"
    hot = hot_hosts(session, host) if hot is None else hot
    mine = next((_hottest(h) for h in hot if h["hostname"] == host.hostname), None)
    others = [t for h in hot if h["hostname"] != host.hostname and (t := _hottest(h)) is not None]
    if mine is not None and others and mine - statistics.median(others) >= HOTTER_BY_C:
        return f"it runs {mine - statistics.median(others):.0f} C hotter than its rack's other hot hosts"
    return None


def routes_to_rack(session: Session, host: Host, rule: Rule) -> bool:
    """Whether a detection of this host may go to its rack's open cooling ticket (repairs.route_detection):
    a rule whose only steps are an in-service airflow ticket (never one that drains the host: past a
    non-recoverable threshold), on a host whose heat has no cause of its own."""
    steps = [step for plan in (rule.plan, *(rung.plan for rung in rule.escalation)) for step in plan]
    in_service_airflow = bool(steps) and all(
        step.action == "ticket" and step.params.get("part_type") == "airflow" and step.leaves_host_in_service
        for step in steps
    )
    return in_service_airflow and bool(host.rack) and own_cause(session, host) is None


def open_rack_ticket(session: Session, host: Host, now: dt.datetime) -> Any:  # a Ticket or None (queries')
    """The rack's open cooling ticket, if it heard of heat within the window before `now` (an older one is
    stale: that heat wave is not this one)."""
    since = now - RACK_HOT_WINDOW
    return queries.open_ticket_of_rack(session, host.datacenter, host.rack or "", RACK_PART_TYPE, detected_since=since)


def has_heard_from(evidence: dict[str, Any] | None, hostname: str, subject: str | None = None) -> bool:
    """Whether a rack ticket already lists the host (and the sensor, when given): among the hot hosts it
    opened with, or a detection. A new sensor of a listed host is news (an escalation)."""
    evidence = evidence or {}
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


def grouped(session: Session, host: Host, request: TicketRequest) -> TicketRequest:
    """The airflow ticket request as the rack's, when several hosts of the rack run hot and this one has
    no cause of its own; else as asked."""
    if request.part_type != "airflow" or request.holds_host or not host.rack:
        return request  # a ticket that holds its host (an NVMe's heat, a host past nr) stays the host's
    hot = hot_hosts(session, host)
    if len(hot) < RACK_HOT_HOSTS or own_cause(session, host, hot) is not None:
        return request
    latest = _latest_heat(session, host)
    existing = open_rack_ticket(session, host, latest) if latest is not None else None
    names = ", ".join(f"{h['hostname']} ({', '.join(list(h['sensors'])[:3])})" for h in hot[:6])
    more = f" and {len(hot) - 6} more" if len(hot) > 6 else ""
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
        },
        "signals": [{"host": host.hostname, **s} for s in request.evidence.get("signals", [])],
    }
    return request.model_copy(
        update={
            "hostname": existing.hostname if existing is not None else host.hostname,
            "part_type": RACK_PART_TYPE,
            "part": f"rack {host.rack}",
            "title": f"Cooling check of rack {host.rack} ({host.datacenter}): {len(hot)} hosts run hot: {names}{more}",
            "holds_host": False,  # the rack's cooling is fixed around its hosts; each keeps working
            "evidence": evidence,
        }
    )
