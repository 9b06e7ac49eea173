"""A firmware rollout of 20 compute-skx-2s hosts, halted by the system on its canary with a comparison and a
ticket id: what the rollout pages and the browser test show."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import select
from sqlalchemy.orm import Session

from checker.schemas import (
    BenchmarkResult,
    CputimeExcess,
    CputimeWatch,
    Firmware,
    HostIdentity,
    Identity,
    Observations,
    Report,
)
from core.db import Database
from remediator.decisions import SYSTEM
from remediator.ingest import ingest
from remediator.inventory import HostInventory, apply_inventory
from remediator.models import Rollout
from remediator.rollouts import halt
from remediator.rules import load_ruleset
from tests.builders.observations import OPTERON, cpu, identity
from tests.builders.reports import T0
from ticketing.schemas import TicketRequest
from ticketing.service import open_ticket

OPTERON_CLASS = "legacy-opteron-8356"
STOCK_KERNEL = "2.6.16.60-0.21-smp"  # SLES 10.2's, with the BIOS's erratum-298 workaround (INFN/CCR-11/01)
BENCHMARK = "fleetfix-cpumem-v1"


def opterons(session: Session, count: int = 10) -> list[str]:
    """`count` Opteron 8356 rev B2 hosts of one class, each in its own rack."""
    names = [f"opteron-{i:03d}" for i in range(count)]
    rows = [
        HostInventory(hostname=n, hardware_class=OPTERON_CLASS, datacenter="ams1", rack=f"r{i}")
        for i, n in enumerate(names)
    ]
    apply_inventory(session, rows, actor="test")
    return names


def opteron_report(
    hostname: str, at: dt.datetime, *, kernel: str = STOCK_KERNEL, flagged: int = 0, score: float | None = None
) -> Report:
    """An Opteron host's report with the cputime watch (`flagged` processes at the paper's ~22 Msec) and, when
    `score` is given, the agent's benchmark per core per GHz."""
    processes = [
        CputimeExcess(
            pid=4242 + i,
            comm="cmsRun",
            threads=1,
            scope="thread",
            cputime_s=22_000_000.0,
            elapsed_s=3600.0,
            excess_s=21_996_400.0,
        )
        for i in range(flagged)
    ]
    watch = CputimeWatch(
        checked=120, flagged=flagged, processes=processes, complete=True, tolerance_s=1.0, clk_tck=100, uptime_s=9e4
    )
    bench = (
        BenchmarkResult(name=BENCHMARK, score=score, duration_s=0.1, cpu=0, ghz=2.3, clock_source="x", ran_at=at)
        if score is not None
        else None
    )
    return Report(
        host=HostIdentity(hostname=hostname, boot_id=f"boot-{kernel}"),
        captured_at=at,
        observations=Observations(
            identity=identity(kernel=kernel, cpus=[cpu(**OPTERON)]), cputime=watch, benchmark=bench
        ),
    )


COMPARED = {
    "signal": "kernel_event_count",
    "subject_pattern": "panic",
    "measure": "share",
    "worse": "higher",
    "expect": "no_worse",
    "upgraded": {"checked": 1, "showing": 1, "examples": ["skx-000"], "host_hours": 5.0},
    "not_upgraded": {
        "checked": 19,
        "showing": 0,
        "examples": [],
        "host_hours": 95.0,
        "excluded": 1,
        "excluded_examples": ["skx-019: 2.6.23.17-amdpatch is withdrawn"],
    },
    "test": "Fisher's exact, one-sided",
    "p_value": 0.05,
    "support": "none",
    "halt": True,
    "why": "on 1 of 1 upgraded hosts and none of the 19 not yet upgraded: one host, no statistical support "
    "(Fisher p 0.05 > 0.01): halted as a precaution, not a significant difference; an operator should judge",
    "since": T0.isoformat(),
}


def halted_rollout(db: Database) -> tuple[int, int]:
    """The rollout's id and its ticket's."""
    names = [f"skx-{i:03d}" for i in range(20)]
    reports = [
        Report(
            host=HostIdentity(hostname=n, boot_id="b"),
            captured_at=T0,
            observations=Observations(
                identity=Identity(kernel="6.1.0-28-amd64", firmware=Firmware(bios_version="2.9.4"))
            ),
        )
        for n in names
    ]
    with db.session() as session:
        rows = [HostInventory(hostname=n, hardware_class="compute-skx-2s", datacenter="ams1") for n in names]
        apply_inventory(session, rows, actor="test")
        ingest(session, reports, ruleset=load_ruleset([]))
        rollout = session.scalars(select(Rollout)).one()
        rollout.comparison, rollout.compared_at = [COMPARED], T0
        halt(
            session, rollout, "side effect on bios 2.10.2: kernel_event_count: on 1 of 1 upgraded", actor=SYSTEM, now=T0
        )
        request = TicketRequest(
            hostname="skx-000",
            datacenter="ams1",
            part_type="firmware",
            part=rollout.change,
            title=f"Rollout of {rollout.change} on compute-skx-2s halted: kernel_event_count panic",
            priority=2,
            evidence={"rollout": {"id": rollout.id}, "comparison": [COMPARED]},
        )
        ticket, _ = open_ticket(session, request, actor=SYSTEM, now=T0)
        rollout.ticket_id = ticket.id
        return rollout.id, ticket.id
