"""The stall probe's scenarios (rule all-core-stalls), registered into tests/decisions/cases.py's CASES.

The probe's results file is what checker/agent/stallprobe.py writes (one JSON line per window, its
format 1), at the path the `stalls` collector reads when it has no state directory of its own (the
agent's default, /var/lib/fleetfix-agent); the figures are ours: the corpus has no probe output.
Each cycle appends the window that ended at the report's time.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from checker.schemas import Report
from remediator.models import Host, Remediation, Signal
from tests.decisions.cases import case
from tests.decisions.harness import T0, Expect, SnapHost
from ticketing.models import Ticket

RESULTS = "/var/lib/fleetfix-agent/stalls.jsonl"
QUIET = {"max_ms": 0.4, "total_ms": 0.0, "count": 0, "wakeups": 6000}  # 600 s at the default 100 ms


class ProbeFile:
    def __init__(self, host: SnapHost, active_share: float = 1.0) -> None:
        self.host = host
        self.active_share = active_share
        self.lines: list[str] = []

    def window(
        self,
        minute: int,
        cpus: dict[int, dict[str, float]],
        coincident: list[float],
        around: int | None = None,
        **seen: Any,
    ) -> None:
        """One window line; `around`: the SMIs the probe counted around each all-core stall (over 1.2 s);
        `seen`: what else it recorded over the window (steal_ms, throttled_ms, smis, hypervisor …)."""
        end = (T0 + dt.timedelta(minutes=minute)).timestamp()
        counted = {"smis": around, "smis_span_s": 1.2} if around is not None else {}
        events = [{"at": end - 60 * (i + 1), "ms": ms, **counted} for i, ms in enumerate(coincident)]
        line = {
            "format": 1,
            "start": end - 600,
            "end": end,
            "period_ms": 100.0,
            "threshold_ms": 5.0,
            "active_share": self.active_share,
            "cpus": {str(cpu): figures for cpu, figures in cpus.items()},
            "coincident": events,
            "coincident_count": len(events),
            "probe_cpu_s": 0.6,
            "cpus_asked": sorted(cpus),
            **seen,
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


BARE_METAL = {
    "hypervisor": False,
    "steal_ms": 0.0,
    "throttled_ms": 0.0,
    "nr_throttled": 0,
    "load1": 2.0,
    "online_cpus": 16,
}


def not_smi_subjects(session: Session, hostname: str) -> list[str]:
    rows = session.scalars(
        select(Signal)
        .join(Host, Host.id == Signal.host_id)
        .where(Host.hostname == hostname, Signal.kind == "all_core_stalls_not_smi")
    ).all()
    return sorted({row.subject for row in rows})


def all_core_details(session: Session, hostname: str) -> list[dict]:
    rows = session.scalars(
        select(Signal)
        .join(Host, Host.id == Signal.host_id)
        .where(Host.hostname == hostname, Signal.kind == "all_core_stalls")
    ).all()
    return [row.detail for row in rows]


def _all_cores(stalls_ms: list[float]) -> dict[int, dict[str, float]]:
    figures = {"max_ms": max(stalls_ms, default=0.4), "total_ms": sum(stalls_ms), "count": len(stalls_ms)}
    return {0: {**QUIET, **figures}, 2: {**QUIET, **figures}}


@case("two 150-300 ms stalls on every probed CPU at once, each 10 minutes: an SMI ticket", "all-core-stalls")
def smi_stalls(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    probe = ProbeFile(host)
    reports = []
    for minute in range(0, 30, 10):
        probe.window(minute, _all_cores([180.0, 290.0]), [180.0, 290.0], around=1, **BARE_METAL, smis=2)
        reports.append(host.cycle(minute))

    def check(session: Session, host: SnapHost) -> None:
        detail = all_core_details(session, host.hostname)[-1]  # what the probe could see, on the evidence
        assert (detail["period_ms"], detail["active_share"], detail["counts_all_from_ms"]) == (100.0, 1.0, 200.0)
        assert "awake all the interval" in detail["sees"]
        assert (detail["smi_counter"], detail["smis_around"], detail["not_smi"]) == ("moved", [1, 1], {})
        assert detail["smis_span_s"] == [1.2, 1.2]
        assert not_smi_subjects(session, host.hostname) == []

    title = "all-core stalls.*SMI. suspect, the SMI counter moved around each"
    return host, reports, Expect("all-core-stalls", "ticket", title=title, part_type="host", then=check)


@case("a duty-cycled probe (awake a quarter of the time) still sees three long all-core stalls", "all-core-stalls")
def duty_cycled_smi_stalls(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    probe = ProbeFile(host, active_share=0.25)
    reports = []
    for minute in range(0, 30, 10):
        probe.window(minute, _all_cores([240.0]), [240.0])
        reports.append(host.cycle(minute))

    def check(session: Session, host: SnapHost) -> None:
        detail = all_core_details(session, host.hostname)[-1]
        assert detail["active_share"] == 0.25
        assert "awake 25% of the interval (stalls in the rest are not seen)" in detail["sees"]

    title = "SMI. suspect, no SMI counter read to confirm it"  # no counter in these lines: an older probe, or AMD
    return host, reports, Expect("all-core-stalls", "ticket", title=title, part_type="host", then=check)


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


def _explained(tmp: Path, around: int | None = None, **seen: Any) -> tuple[SnapHost, list[Report]]:
    """Three 180-290 ms all-core stalls every 10 minutes, with `seen` in every window."""
    host = SnapHost(tmp)
    probe = ProbeFile(host)
    reports = []
    for minute in range(0, 40, 10):
        stalls = [180.0, 250.0, 290.0]
        probe.window(minute, _all_cores(stalls), stalls, around, **{**BARE_METAL, **seen})
        reports.append(host.cycle(minute))
    return host, reports


def _not_smi(cause: str) -> Callable[[Session, SnapHost], None]:
    def check(session: Session, host: SnapHost) -> None:
        assert not_smi_subjects(session, host.hostname) == [cause]
        assert all_core_details(session, host.hostname) == []  # no SMI suspect at all

    return check


NOT_SMI_RULES = frozenset({"all-core-stalls", "all-core-stalls-not-smi", "all-core-stalls-saturated"})


def _holds(holds: bool) -> Callable[[Session, Remediation | None, Ticket | None], None]:
    def also(session: Session, remediation: Remediation | None, ticket: Ticket | None) -> None:
        assert ticket is not None
        assert ticket.holds_host is holds

    return also


@case("long all-core stalls on a VM (the CPU's hypervisor flag): not SMI, no ticket", None)
def vm_stalls(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host, reports = _explained(tmp, hypervisor=True, smis=None)
    return host, reports, Expect(None, never=NOT_SMI_RULES, then=_not_smi("hypervisor"))


@case("long all-core stalls with steal time in their windows: the hypervisor, no ticket", None)
def steal_stalls(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host, reports = _explained(tmp, hypervisor=None, steal_ms=620.0, smis=None)
    return host, reports, Expect(None, never=NOT_SMI_RULES, then=_not_smi("steal"))


@case(
    "long all-core stalls while the agent's cgroup was throttled (CPUQuota=), SMI counter flat: the probe's own", None
)
def throttled_stalls(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host, reports = _explained(tmp, around=0, throttled_ms=880.0, nr_throttled=14, smis=0)
    return host, reports, Expect(None, never=NOT_SMI_RULES, then=_not_smi("throttled"))


@case(
    "long all-core stalls with throttling and steal in their windows, SMI counter moved: still SMI suspects",
    "all-core-stalls",
)
def throttled_smi_stalls(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    # SMM time is charged to the running task: an SMI storm can itself throttle the agent's CPUQuota
    host, reports = _explained(tmp, around=1, throttled_ms=880.0, nr_throttled=14, steal_ms=40.0, smis=3)

    def check(session: Session, host: SnapHost) -> None:
        detail = all_core_details(session, host.hostname)[-1]
        assert (detail["smi_counter"], detail["not_smi"]) == ("moved", {})
        assert detail["also_present"] == ["steal", "throttling"]
        assert not_smi_subjects(session, host.hostname) == []

    title = "SMI. suspect, the SMI counter moved around each .steal and throttling in their windows too."
    expect = Expect(
        "all-core-stalls",
        "ticket",
        title=title,
        part_type="host",
        never=frozenset({"all-core-stalls-not-smi", "all-core-stalls-saturated"}),
        also=_holds(True),
        then=check,
    )
    return host, reports, expect


@case(
    "long all-core stalls, saturated host, no SMI counter: ambiguous, a low-priority ticket, in service",
    "all-core-stalls-saturated",
)
def saturated_stalls(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host, reports = _explained(tmp, load1=40.0, smis=None)
    expect = Expect(
        "all-core-stalls-saturated",
        "ticket",
        title="no SMI counter and load ≥ 1 per CPU: cannot tell SMI from saturation",
        part_type="host",
        never=frozenset({"all-core-stalls", "all-core-stalls-not-smi"}),
        also=_holds(False),
        then=_not_smi("saturated"),
    )
    return host, reports, expect


@case(
    "long all-core stalls without an SMI counter below one runnable task per CPU: an SMI suspect, not saturated",
    "all-core-stalls",
)
def unsaturated_no_counter_stalls(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host, reports = _explained(tmp, load1=8.0, smis=None)  # 8 tasks on 16 CPUs
    expect = Expect(
        "all-core-stalls",
        "ticket",
        title="SMI. suspect, no SMI counter read to confirm it",
        never=frozenset({"all-core-stalls-saturated", "all-core-stalls-not-smi"}),
    )
    return host, reports, expect


@case(
    "long all-core stalls on bare metal, MSR_SMI_COUNT flat: not SMI, a ticket that holds the host",
    "all-core-stalls-not-smi",
)
def flat_counter_stalls(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host, reports = _explained(tmp, around=0, smis=1)  # a background SMI in the window, none around the stalls
    title = r"not SMI .counter flat, one CPU's MSR_SMI_COUNT read.: look at power management, the kernel"
    expect = Expect(
        "all-core-stalls-not-smi",
        "ticket",
        title=title,
        part_type="host",
        never=frozenset({"all-core-stalls", "all-core-stalls-saturated"}),
        also=_holds(True),  # the same harm to the workload as all-core-stalls: the same hold
        then=_not_smi("smi-counter-flat"),
    )
    return host, reports, expect


@case("one CPU probed (the agent found one housekeeping CPU): a gap, never 'no all-core stalls'", None)
def one_cpu_probed(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    probe = ProbeFile(host)
    reports = []
    for minute in range(0, 30, 10):
        probe.window(minute, {0: {**QUIET, "max_ms": 290.0, "total_ms": 580.0, "count": 2}}, [], **BARE_METAL, smis=2)
        reports.append(host.cycle(minute))

    def check(session: Session, host: SnapHost) -> None:
        [*_, gap] = all_core_details(session, host.hostname)
        assert gap["coincidence_unknown"] is True
        assert "one housekeeping CPU" in gap["one_cpu"]
        assert ("cpu_stall", "cpu0", 290.0, None) in stall_signals(session, host.hostname)

    return host, reports, Expect(None, never=NOT_SMI_RULES, then=check)
