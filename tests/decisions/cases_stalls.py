"""The stall probe's scenarios (rule all-core-stalls), registered into tests/decisions/cases.py's CASES.

The probe's results file is what checker/agent/stallprobe.py writes (one JSON line per window, its
format 1), at the path the `stalls` collector reads when it has no state directory of its own (the
agent's default, /var/lib/fleetfix-agent); the figures are ours: the corpus has no probe output.
Each cycle appends the window that ended at the report's time.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from checker.schemas import Report
from remediator.models import Host, Signal
from tests.decisions.cases import case
from tests.decisions.harness import T0, Expect, SnapHost

RESULTS = "/var/lib/fleetfix-agent/stalls.jsonl"
QUIET = {"max_ms": 0.4, "total_ms": 0.0, "count": 0, "wakeups": 30000}


class ProbeFile:
    def __init__(self, host: SnapHost) -> None:
        self.host = host
        self.lines: list[str] = []

    def window(self, minute: int, cpus: dict[int, dict[str, float]], coincident: list[float]) -> None:
        end = (T0 + dt.timedelta(minutes=minute)).timestamp()
        events = [{"at": end - 60 * (i + 1), "ms": ms} for i, ms in enumerate(coincident)]
        line = {
            "format": 1,
            "start": end - 600,
            "end": end,
            "period_ms": 20.0,
            "threshold_ms": 5.0,
            "cpus": {str(cpu): figures for cpu, figures in cpus.items()},
            "coincident": events,
            "coincident_count": len(events),
            "probe_cpu_s": 1.5,
        }
        self.lines.append(json.dumps(line))
        self.host.file(RESULTS, "\n".join(self.lines) + "\n")


def stall_signals(session: Session, hostname: str) -> list[tuple[str, str, float, bool | None]]:
    rows = session.scalars(
        select(Signal)
        .join(Host, Host.id == Signal.host_id)
        .where(Host.hostname == hostname, Signal.kind == "cpu_stall")
    ).all()
    return [(row.kind, row.subject, row.value, row.detail.get("coincident")) for row in rows]


def _all_cores(stalls_ms: list[float]) -> dict[int, dict[str, float]]:
    figures = {"max_ms": max(stalls_ms, default=0.4), "total_ms": sum(stalls_ms), "count": len(stalls_ms)}
    return {0: {**QUIET, **figures}, 2: {**QUIET, **figures}}


@case("two 150-300 ms stalls on every probed CPU at once, each 10 minutes: an SMI ticket", "all-core-stalls")
def smi_stalls(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    probe = ProbeFile(host)
    reports = []
    for minute in range(0, 30, 10):
        probe.window(minute, _all_cores([180.0, 290.0]), [180.0, 290.0])
        reports.append(host.cycle(minute))
    return host, reports, Expect("all-core-stalls", "ticket", title="all-core stalls", part_type="host")


@case("300 ms stalls on one CPU only (a CMCI or the EDAC poll): no SMI ticket", None)
def one_core_stalls(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    probe = ProbeFile(host)
    reports = []
    for minute in range(0, 40, 10):
        cpus = {0: {**QUIET, "max_ms": 300.0, "total_ms": 600.0, "count": 2}, 2: dict(QUIET)}
        probe.window(minute, cpus, [])
        reports.append(host.cycle(minute))

    def check(session: Session, host: SnapHost) -> None:
        assert ("cpu_stall", "cpu0", 300.0, False) in stall_signals(session, host.hostname)
        assert all(subject != "all-cores" for _, subject, _, _ in stall_signals(session, host.hostname))

    return host, reports, Expect(None, never=frozenset({"all-core-stalls"}), then=check)


@case("many all-core stalls of 20-40 ms (short SMIs): below the rule's 100 ms, no ticket", None)
def short_all_core_stalls(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    probe = ProbeFile(host)
    reports = []
    for minute in range(0, 40, 10):
        stalls = [20.0, 35.0, 40.0, 25.0]
        probe.window(minute, _all_cores(stalls), stalls)
        reports.append(host.cycle(minute))

    def check(session: Session, host: SnapHost) -> None:
        assert ("cpu_stall", "all-cores", 40.0, True) in stall_signals(session, host.hostname)

    return host, reports, Expect(None, never=frozenset({"all-core-stalls"}), then=check)
