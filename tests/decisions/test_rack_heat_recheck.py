"""The rack's cooling ticket under the second review of repair-reopen, findings 2 and 4.

Finding 4, through the real ingest path (the reviewer's probe /tmp/r6-recheck/test_reopen_picture.py): a rack
ticket reopened by heat after its repair takes the rack's picture now. Before: the reopen returned without
the join, so the reopened ticket's title still named the hosts hot before the fix, it had heard from nobody,
and the own airflow ticket of a host hot alone after the fix was not among its `host_tickets`.
Finding 2 (probe test_rank.py): the rows of a counted heat signal since a resolve are each recounted, the
highest recount kept."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from sqlalchemy.orm import Session

from remediator import rack_heat
from remediator.models import Host, Signal
from tests.decisions.harness import T0 as SCENARIO_T0
from tests.decisions.test_rack_heat import on_the_scenario_clock, quiet_datacenter, run_hot, signal_on, ticket_of
from ticketing import groups
from ticketing import service as tickets
from ticketing.schemas import Resolution


def test_a_rack_ticket_reopened_after_its_repair_names_the_hosts_hot_after_it(session: Session, tmp_path: Path) -> None:
    quiet_datacenter(session)
    run_hot(session, tmp_path, "dt-hot-01", "r12")
    run_hot(session, tmp_path, "dt-hot-02", "r12")
    rack = ticket_of(session, "dt-hot-02")
    on_the_scenario_clock(session, rack)
    fixed = SCENARIO_T0 + dt.timedelta(minutes=20)
    tickets.claim(session, rack, actor="user:tech", now=fixed)
    tickets.resolve(session, rack, Resolution(note="CRAC fixed"), actor="user:tech", now=fixed)
    run_hot(session, tmp_path, "dt-hot-07", "r12", minute=30)  # hot alone after the fix: its own ticket
    own = ticket_of(session, "dt-hot-07")
    assert own.part_type == "airflow"
    assert own.id != rack.id
    run_hot(session, tmp_path, "dt-hot-08", "r12", minute=31)  # the rack runs hot again: its ticket reopens
    session.refresh(rack)
    assert (rack.state.value, rack.reopened) == ("open", 1)
    assert rack.title.endswith("2 hosts run hot: dt-hot-07 (CPU2 Temp), dt-hot-08 (CPU2 Temp)"), rack.title
    assert groups.heard_from(rack.evidence) == {"dt-hot-08": {"CPU2 Temp"}}
    listed = [h["hostname"] for h in rack.evidence["rack_heat"]["hosts"]]
    assert listed[-2:] == ["dt-hot-07", "dt-hot-08"]
    assert own.id in {t["id"] for t in rack.evidence["rack_heat"]["host_tickets"]}


def throttle_row(session: Session, hostname: str, value: float, detail: dict[str, object], at: dt.datetime) -> None:
    host_id = session.query(Host.id).filter(Host.hostname == hostname).scalar()
    row = Signal(host_id=host_id, kind="cpu_throttle_percent", subject="package 0", value=value, detail=detail)
    row.observed_at = at
    session.add(row)
    session.flush()


def test_a_later_row_wholly_after_the_resolve_is_not_hidden_by_an_earlier_higher_one(session: Session) -> None:
    """Two hosts each report at resolve+1 min 80 % throttled (all of it before the fix, recounted to 0) and
    at resolve+20 min 20 % (its window wholly after the fix). Before: the 80 % row won the ranking by raw
    value and recounted to 0, so hot_hosts(since=resolve) returned none and each host planned its own
    airflow remediation."""
    quiet_datacenter(session)
    resolve = SCENARIO_T0
    minute = dt.timedelta(minutes=1)
    early = {  # a 10 min window since resolve-9 min: throttled throughout until the resolve, nothing after
        "since": (resolve - 9 * minute).isoformat(),
        "counted_percent_of_s": 600.0,
        "counted": [[(resolve - minute).timestamp(), 1.0], [(resolve + minute).timestamp(), 0.0]],
    }
    late = {  # a window wholly after the fix, 20 % throttled: the heat is back
        "since": (resolve + 10 * minute).isoformat(),
        "counted_percent_of_s": 600.0,
        "counted": [[(resolve + 20 * minute).timestamp(), 0.2]],
    }
    for hostname in ("dt-a", "dt-b", "dt-c"):
        signal_on(session, hostname, "r12", "fan_speed_dummy", "x", 0.0)
        throttle_row(session, hostname, 80.0, early, resolve + minute)
    for hostname in ("dt-a", "dt-b"):  # dt-c: only heat from before the fix
        throttle_row(session, hostname, 20.0, late, resolve + 20 * minute)
    host = session.query(Host).filter(Host.hostname == "dt-a").one()
    hot = rack_heat.hot_hosts(session, host, since=resolve)
    assert [h["hostname"] for h in hot] == ["dt-a", "dt-b"]
    assert hot[0]["sensors"]["package 0"]["value"] == 20.0


def test_a_rack_of_hosts_with_many_critical_sensors_keeps_its_last_hosts(session: Session) -> None:
    """Note 8: 48 hosts of one rack, each with 45 critical sensors that are not temperatures (voltages,
    power), and the last three in name order with a CPU past its upper critical temperature. Before: every
    critical sensor counted toward the 2000-row limit, ordered by hostname, and the three hot hosts were cut."""
    names = [f"dt-v-{n:02d}" for n in range(48)]
    for hostname in names:
        signal_on(session, hostname, "r12", "fan_speed_dummy", "x", 0.0)
    ids = dict(session.query(Host.hostname, Host.id).filter(Host.hostname.in_(names)).all())
    volts = {"kind": "voltage", "level": "upper_cr"}
    rows = [
        Signal(host_id=ids[h], kind="sensor_critical", subject=f"P{n}V", value=13.0, detail=volts)
        for h in names
        for n in range(45)
    ]
    hot = {"kind": "temperature", "level": "upper_cr", "status": "cr"}
    rows += [
        Signal(host_id=ids[h], kind="sensor_critical", subject="CPU2 Temp", value=95.0, detail=hot) for h in names[-3:]
    ]
    for n, row in enumerate(rows):
        row.observed_at = SCENARIO_T0 + dt.timedelta(seconds=1 if row.subject == "CPU2 Temp" else 0, microseconds=n)
    session.add_all(rows)
    session.flush()
    host = session.query(Host).filter(Host.hostname == names[-1]).one()
    assert [h["hostname"] for h in rack_heat.hot_hosts(session, host)] == names[-3:]


def test_a_fan_replaced_in_the_rack_repair_no_longer_marks_its_host(session: Session) -> None:
    """Note 9: dt-f had a failed fan 5 min before the rack's repair was resolved (replaced in it); after the
    resolve dt-f and dt-g run hot. Before: the fan from before the repair still gave dt-f a cause of its own,
    so it neither counted toward the rack nor routed to it. A fan failing after the resolve still does."""
    resolve = SCENARIO_T0
    minute = dt.timedelta(minutes=1)
    hot = {"kind": "temperature", "level": "upper_cr", "status": "cr"}
    for hostname in ("dt-f", "dt-g"):
        signal_on(session, hostname, "r12", "fan_speed_dummy", "x", 0.0)
    ids = dict(session.query(Host.hostname, Host.id).filter(Host.hostname.in_(["dt-f", "dt-g"])).all())
    rows = [Signal(host_id=ids[h], kind="sensor_critical", subject="CPU2 Temp", value=95.0, detail=hot) for h in ids]
    rows.append(Signal(host_id=ids["dt-f"], kind="fan_failure", subject="FAN3", value=1.0, detail={}))
    for row in rows:
        row.observed_at = resolve - 5 * minute if row.kind == "fan_failure" else resolve + 10 * minute
    session.add_all(rows)
    session.flush()
    host = session.query(Host).filter(Host.hostname == "dt-g").one()
    counted, own = rack_heat.rack_heat_of(session, host, since=resolve)
    assert [h["hostname"] for h in counted] == ["dt-f", "dt-g"]
    assert own == []
    fan_f = session.query(Host).filter(Host.hostname == "dt-f").one()
    assert rack_heat.own_cause(session, fan_f, since=resolve) is None
    assert rack_heat.own_cause(session, fan_f) == "its own fan: fan_failure on FAN3"  # without a repair: its own
