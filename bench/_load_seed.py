"""The stored state bench/load.py runs against: a migrated database of its own, a fleet's hosts, a year of
repair tickets (COPY, in seconds), the people who sign in and the credentials that post reports."""

from __future__ import annotations

import datetime as dt
import json
import random
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text

from bench._databases import issue_host_tokens
from checker.sim import SimulatedFleet
from checker.sim.host import VirtualHost
from core.accounts import create_user
from core.auth import hash_password, issue_token
from core.db import Database
from core.models import Role, User
from remediator.inventory import HostInventory, apply_inventory

REPO = Path(__file__).resolve().parent.parent
PASSWORD = "load-bench-password-1"  # noqa: S105 - a throwaway account's password in a throwaway database

# How a year of tickets ends up: most were repaired and closed, a few are being worked.
STATES = {
    "closed": 0.80,
    "cancelled": 0.05,
    "open": 0.07,
    "claimed": 0.03,
    "in_progress": 0.02,
    "resolved": 0.01,
    "verifying": 0.02,
}
OPEN_STATES = ("open", "claimed", "in_progress", "resolved", "verifying")
PART_TYPES = {"dimm": 0.45, "disk": 0.25, "host": 0.10, "psu": 0.08, "fan": 0.07, "cpu": 0.05}
PRIORITIES = {1: 0.05, 2: 0.20, 3: 0.50, 4: 0.20, 5: 0.05}
RULES = {
    "dimm": "dimm-ce-storm",
    "disk": "smart-realloc-growing",
    "host": "repeated-panics",
    "psu": "psu-failure",
    "fan": "fan-failure",
    "cpu": "cpu-core-errors",
}


@dataclass
class Seeded:
    url: str
    fleet: SimulatedFleet
    hostnames: list[str]
    host_tokens: dict[str, str]
    viewer_token: str
    operator_token: str
    technicians: list[tuple[str, str]]  # (username, datacenter)
    victims: list[str]  # accounts the wrong-password flood aims at
    datacenters: list[str]
    racks: list[str]
    ticket_ids: list[int]
    open_ticket_ids: list[int]
    timings: dict[str, float] = field(default_factory=dict)


def migrate(url: str, env: dict[str, str]) -> None:
    """`fleetfix db upgrade`, as a deployment's migrate job runs it."""
    done = subprocess.run(
        [sys.executable, "-m", "api", "db", "upgrade"],
        env={**env, "FLEETFIX_DATABASE_URL": url},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode != 0:
        raise SystemExit(f"fleetfix db upgrade failed:\n{done.stdout}\n{done.stderr}")


def _pick(rng: random.Random, weights: dict[Any, float]) -> Any:
    return rng.choices(list(weights), weights=list(weights.values()))[0]


def _part(rng: random.Random, host: VirtualHost, part_type: str) -> str:
    if part_type == "dimm":
        return rng.choice(host.dimms).label
    if part_type == "disk":
        return rng.choice(host.disks).serial if host.disks else "nvme0n1"
    if part_type == "psu":
        return rng.choice(("PS1", "PS2"))
    if part_type == "fan":
        return f"System Fan {rng.randrange(1, 7)}"
    if part_type == "cpu":
        return f"cpu{rng.randrange(0, 2)}:core{rng.randrange(0, 32)}"
    return ""


def _evidence(rng: random.Random, host: VirtualHost, part_type: str, part: str, at: dt.datetime) -> dict[str, Any]:
    """An evidence bundle of the shape remediator.evidence.part_evidence freezes (about 2-3 KB of JSON)."""
    signals = [
        {
            "kind": "dimm_ce_rate" if part_type == "dimm" else f"{part_type}_errors",
            "value": round(rng.uniform(0.5, 80), 2),
            "at": (at - dt.timedelta(minutes=5 * i)).isoformat(),
            "detail": {"subject": part, "window_s": 300},
        }
        for i in range(rng.randrange(4, 10))
    ]
    counters = [
        {"at": (at - dt.timedelta(minutes=10 * i)).isoformat(), "ce": 1000 * (8 - i), "ue": 0} for i in range(6)
    ]
    when = at.isoformat()
    return {
        "location": {
            "datacenter": host.datacenter,
            "row": host.row,
            "rack": host.rack,
            "slot": host.slot,
            "hardware_class": host.hardware.name,
            "cluster": host.cluster,
        },
        "host": {"hostname": host.hostname, "machine_id": host.machine_id, "kernel": "6.1.0-28-amd64"},
        "part_type": part_type,
        "part": {
            "locator": part,
            "bank_locator": "NODE 0 CHANNEL 2 DIMM 0",
            "part_number": "M393A4K40CB2-CVF",
            "serial": f"S{rng.getrandbits(40):010X}",
            "manufacturer": "Samsung",
            "size_mb": 32768,
        },
        "reason": f"{RULES[part_type]}: sustained errors on {part or host.hostname}",
        "rule": RULES[part_type],
        "remediation_id": None,
        "signals": signals,
        "counter_history": counters,
        "sel": [
            {
                "record_id": 100 + i,
                "timestamp": when,
                "sensor_type": "Memory",
                "sensor_name": "DIMM_B3",
                "event": "Correctable ECC",
                "direction": "Asserted",
                "component": part,
                "raw": "0x0c 0x6f 0xa0",
            }
            for i in range(3)
        ],
        "kernel_log": [
            {
                "timestamp": when,
                "kind": "edac_ce",
                "subject": part,
                "count": 12,
                "lines": [f"EDAC MC0: 12 CE memory read error on {part} (channel:2 slot:0 page:0x{i:x})"],
            }
            for i in range(3)
        ],
        "remediations": [],
    }


def _copy(url: str, table: str, columns: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    engine = create_engine(url)
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        with cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        raw.commit()
    finally:
        raw.close()
        engine.dispose()


TICKET_COLUMNS = (
    "id",
    "dedup_key",
    "open_key",
    "hostname",
    "datacenter",
    "rack",
    "part_type",
    "part",
    "title",
    "priority",
    "state",
    "version",
    "assignee",
    "evidence",
    "detections",
    "reopened",
    "created_at",
    "updated_at",
    "claimed_at",
    "resolved_at",
    "verify_started_at",
    "verify_until",
    "last_detected_at",
    "closed_at",
)


def seed_tickets(url: str, fleet: SimulatedFleet, count: int, now: dt.datetime, seed: int = 13) -> list[str]:
    """`count` tickets over the past year, with their events and the repairs of the closed ones; returns
    each ticket's state, by id - 1."""
    rng = random.Random(seed)
    tickets: list[tuple[object, ...]] = []
    events: list[tuple[object, ...]] = []
    repairs: list[tuple[object, ...]] = []
    states: list[str] = []
    held: set[str] = set()  # one open ticket per host and part (tickets.open_key is unique)
    for ticket_id in range(1, count + 1):
        host = rng.choice(fleet.hosts)
        state = _pick(rng, STATES)
        part_type = _pick(rng, PART_TYPES)
        part = _part(rng, host, part_type)
        dedup = f"{host.hostname}:{part_type}:{part}"
        if state in OPEN_STATES and dedup in held:
            state = "closed"
        age_days = rng.uniform(0, 30) if state in OPEN_STATES else rng.uniform(0, 365)
        created = now - dt.timedelta(days=age_days)
        claimed = created + dt.timedelta(hours=rng.uniform(0.1, 12)) if state != "open" else None
        resolved = (
            claimed + dt.timedelta(hours=rng.uniform(0.5, 48))
            if claimed and state not in ("claimed", "in_progress", "cancelled")
            else None
        )
        closed = resolved + dt.timedelta(minutes=30) if resolved and state == "closed" else None
        if state == "cancelled":
            closed = claimed
        assignee = f"user:tech-{host.datacenter}" if claimed else None
        open_key = dedup if state in OPEN_STATES else None
        if open_key:
            held.add(dedup)
        title = f"Replace {part_type} {part} on {host.hostname}".strip() if part else f"Check {host.hostname}"
        tickets.append(
            (
                ticket_id, dedup, open_key, host.hostname, host.datacenter, host.rack, part_type, part, title,
                _pick(rng, PRIORITIES), state, 1, assignee,
                json.dumps(_evidence(rng, host, part_type, part, created)),
                rng.randrange(1, 5), 0, created, closed or resolved or claimed or created, claimed, resolved,
                resolved, resolved + dt.timedelta(minutes=30) if resolved else None, created, closed,
            )
        )  # fmt: skip
        states.append(state)
        events.append((ticket_id, created, "system:remediator", "opened", "", "{}"))
        if claimed:
            events.append((ticket_id, claimed, assignee, "claimed", "", "{}"))
        if resolved:
            events.append((ticket_id, resolved, assignee, "resolved", "replaced the part", "{}"))
        if closed:
            kind = "cancelled" if state == "cancelled" else "closed"
            events.append((ticket_id, closed, "system:verifier", kind, "", "{}"))
        if resolved and part_type in ("dimm", "disk", "psu", "fan"):
            repairs.append(
                (
                    ticket_id, host.hostname, host.datacenter, part_type, part, "Samsung", "M393A4K40CB2-CVF",
                    f"S{rng.getrandbits(40):010X}", f"S{rng.getrandbits(40):010X}", "", assignee, resolved,
                    closed,
                )
            )  # fmt: skip
    _copy(url, "tickets", TICKET_COLUMNS, tickets)
    _copy(url, "ticket_events", ("ticket_id", "at", "actor", "kind", "note", "detail"), events)
    _copy(
        url,
        "ticket_repairs",
        (
            "ticket_id",
            "hostname",
            "datacenter",
            "part_type",
            "part",
            "vendor",
            "model",
            "old_serial",
            "new_serial",
            "note",
            "replaced_by",
            "replaced_at",
            "verified_at",
        ),
        repairs,
    )
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text("SELECT setval(pg_get_serial_sequence('tickets', 'id'), :n)"), {"n": count})
        # what autovacuum leaves behind on a table that has been there for a year
        conn.execute(text("VACUUM ANALYZE tickets, ticket_events, ticket_repairs"))
    engine.dispose()
    return states


def seed(url: str, *, hosts: int, tickets: int, victims: int = 10) -> Seeded:
    timings: dict[str, float] = {}
    began = time.perf_counter()
    fleet = SimulatedFleet(hosts, seed=3, fault_fraction=0.02)
    database = Database(url, pool_size=1)
    with database.session() as session:
        apply_inventory(session, [HostInventory(**row) for row in fleet.inventory()], actor="bench")
    timings["hosts"] = time.perf_counter() - began

    began = time.perf_counter()
    now = dt.datetime.now(dt.UTC)
    states = seed_tickets(url, fleet, tickets, now)
    timings["tickets"] = time.perf_counter() - began

    began = time.perf_counter()
    datacenters = sorted({h.datacenter for h in fleet.hosts})
    technicians = [(f"tech-{dc}", dc) for dc in datacenters]
    with database.session() as session:
        create_user(session, username="ops-bench", role=Role.operator, password=PASSWORD, actor="bench", reason="bench")
        create_user(session, username="viewer-bench", role=Role.viewer, password=PASSWORD, actor="bench", reason="b")
        for username, dc in technicians:
            create_user(
                session,
                username=username,
                role=Role.technician,
                password=PASSWORD,
                datacenter=dc,
                actor="bench",
                reason="bench",
            )
        one_hash = hash_password(PASSWORD)
        victim_names = [f"victim-{i:02d}" for i in range(victims)]
        session.add_all(
            User(username=name, role=Role.viewer, password_hash=one_hash, active=True) for name in victim_names
        )
        _, viewer_token = issue_token(session, name="dashboards", role=Role.viewer)
        _, operator_token = issue_token(session, name="inventory-sync", role=Role.operator)
    database.dispose()
    host_tokens = issue_host_tokens(url, (h.hostname for h in fleet.hosts))
    timings["people and credentials"] = time.perf_counter() - began
    ids = list(range(1, tickets + 1))
    return Seeded(
        url=url,
        fleet=fleet,
        hostnames=[h.hostname for h in fleet.hosts],
        host_tokens=host_tokens,
        viewer_token=viewer_token,
        operator_token=operator_token,
        technicians=technicians,
        victims=victim_names,
        datacenters=datacenters,
        racks=sorted({h.rack for h in fleet.hosts}),
        ticket_ids=ids,
        open_ticket_ids=[i for i, s in zip(ids, states, strict=True) if s in OPEN_STATES],
        timings=timings,
    )
