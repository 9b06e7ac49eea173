"""The chaos bench's figures: reports acknowledged vs stored, remediations and tickets per fault,
caps, host actions, the stall sweep, and the faults' recovery times."""

from __future__ import annotations

import collections
import datetime as dt
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import create_engine, text

from bench._chaos_agents import read_starts
from bench._chaos_caps import CapWatch, print_caps
from bench._chaos_envelopes import print_envelopes, print_host_actions, print_stalls
from bench._chaos_faults import Fault, stored
from bench._chaos_fleet import Run


@dataclass
class Scene:
    """Where the run's records are."""

    url: str
    api: str
    work: Path  # agents' specs, logs and starts files
    state: Path  # the hosts' journals and simulated state
    logs: Path  # the services' logs
    started: float  # monotonic, when the first round began
    wall0: float  # the same instant, wall clock


def metric(api: str, name: str) -> dict[str, float]:
    values: dict[str, float] = collections.defaultdict(float)
    for line in httpx.get(f"{api}/metrics", timeout=30).text.splitlines():
        if line.startswith(name + "{"):
            label = line[line.index("{") + 1 : line.index("}")]
            values[label] += float(line.rsplit(" ", 1)[1])
    return values


def print_reports(run: Run, scene: Scene) -> int:
    acked = dict(run.acked)
    found = stored(scene.url, list(acked))
    lost = [rid for rid in acked if rid not in found]
    engine = create_engine(scene.url)
    with engine.connect() as conn:
        rows, repeats = conn.execute(text("SELECT count(*), coalesce(sum(repeats), 0) FROM reports")).one()
    engine.dispose()
    by_path = collections.Counter(a.path for a in acked.values())
    outcomes = metric(scene.api, "fleetfix_reports_total")
    print("\nreports")
    print(
        f"  acknowledged            {len(acked):8d}  (stream {by_path['stream']}, http {by_path['http']}, "
        f"probes {by_path['probe']}); sent again after an error: {run.resent}"
    )
    print(f"  stored (id in reports)  {len(found):8d}  rows in reports {rows}, repeats {repeats}")
    print(f"  lost                    {len(lost):8d}  {' '.join(map(str, lost[:5]))}")
    print(f"  refused                 {len(run.refused):8d}  {run.refused[:3]}")
    print(
        "  ingest outcomes (/metrics, all processes): "
        + ", ".join(f"{k.split('=')[1].strip(chr(34))} {v:.0f}" for k, v in sorted(outcomes.items()))
    )
    return len(lost) + len(run.refused)


STALE = text(
    "SELECT prev.id, h.hostname, prev.rule_id, d.at, nxt.id, (SELECT max(s.finished_at) FROM remediation_steps s"
    " WHERE s.remediation_id = prev.id) FROM decisions d JOIN remediations nxt ON nxt.id = d.remediation_id"
    " JOIN remediations prev ON prev.id = nxt.previous_id JOIN hosts h ON h.id = prev.host_id"
    " WHERE d.outcome = 'escalated' AND d.reason LIKE 'fault returned while verifying%' ORDER BY d.at"
)


def print_stale_escalations(conn: Any) -> None:
    """Remediations failed as "fault returned while verifying" by a firing whose report was captured
    (the decision's time) before the remediation's last step had even finished: evidence from before the fix."""
    rows = [r for r in conn.execute(STALE).all() if r[5] is not None and r[3] < r[5]]
    print(f"  escalated 'fault returned while verifying' on a report captured before the fix finished: {len(rows)}")
    for prev, host, rule, at, nxt, finished in rows[:5]:
        print(
            f"    #{prev} {host} {rule}: its last step finished {finished:%H:%M:%S.%f}, the firing report was captured "
            f"{at:%H:%M:%S.%f} ({(finished - at).total_seconds():.1f} s before); escalated to #{nxt}"
        )


def print_remediations(conn: Any, faults: list[Fault], scene: Scene) -> int:
    remediations = conn.execute(
        text(
            "SELECT r.id, h.hostname, r.rule_id, r.subject, r.rung, r.previous_id, r.state::text,"
            " r.evidence->>'report_id', r.created_at, r.held_reason, r.updated_at"
            " FROM remediations r JOIN hosts h ON h.id = r.host_id"
        )
    ).all()
    tickets = conn.execute(text("SELECT id, dedup_key, remediation_id, state::text, created_at FROM tickets")).all()
    counted = conn.execute(
        text(
            "SELECT ticket_id, detail->>'remediation_id' AS rem, count(*) FROM ticket_events"
            " WHERE kind IN ('opened', 'detected_again') AND detail->>'remediation_id' IS NOT NULL"
            " GROUP BY 1, 2 HAVING count(*) > 1"
        )
    ).all()
    injected = [f for f in faults if f.at]
    bounds = [scene.wall0, *(f.wall for f in injected), float("inf")]
    phases = ["before faults", *(f"after {f.name}" for f in injected)]

    def phase_of(created: dt.datetime) -> str:
        return next(p for p, hi in zip(phases, bounds[1:], strict=False) if created.timestamp() < hi)

    same_firing = collections.Counter((r[1], r[2], r[7]) for r in remediations if r[4] == 0 and r[7])
    same_escalation = collections.Counter(r[5] for r in remediations if r[5] is not None)
    dup_firings = {k: n for k, n in same_firing.items() if n > 1}
    dup_escalations = {k: n for k, n in same_escalation.items() if n > 1}
    repeated = collections.Counter((r[1], r[2], r[3]) for r in remediations)
    same_ticket = collections.Counter((t[1], t[2]) for t in tickets if t[2] is not None)
    dup_tickets = {k: n for k, n in same_ticket.items() if n > 1}
    open_keys = collections.Counter(t[1] for t in tickets if t[3] not in ("closed", "cancelled"))
    dup_open = {k: n for k, n in open_keys.items() if n > 1}
    print("\nremediations and tickets, by when they were created")
    print(f"  {'phase':<38} {'remediations':>12} {'tickets':>8}  most of them")
    for phase in phases:
        rules = collections.Counter(r[2] for r in remediations if phase_of(r[8]) == phase)
        print(
            f"  {phase:<38} {sum(rules.values()):12d} {sum(phase_of(t[4]) == phase for t in tickets):8d}  "
            + ", ".join(f"{rule} {n}" for rule, n in rules.most_common(3))
        )
    states = collections.Counter(r[6] for r in remediations)
    print(f"  remediation states at the end: {dict(sorted(states.items()))}")
    for r in [r for r in remediations if r[6] in ("detected", "planned", "running")][:6]:
        print(
            f"    still {r[6]:<8} #{r[0]} {r[1]} {r[2]}, last change {r[10]:%H:%M:%S}: {r[9][:100] or 'no reason held'}"
        )
    print(f"  one firing (host, rule, report) planned twice:        {len(dup_firings)} {list(dup_firings)[:3]}")
    print(f"  one remediation escalated twice:                      {len(dup_escalations)}")
    print(
        f"  (host, rule, subject) with more than one remediation: "
        f"{sum(n > 1 for n in repeated.values())} (escalation rungs and re-fires after an end; not duplicates)"
    )
    print(f"  tickets opened twice by one remediation:              {len(dup_tickets)} {list(dup_tickets)[:3]}")
    print(f"  open tickets sharing a dedup key (host, part):        {len(dup_open)}")
    print(f"  a remediation's detection counted twice on a ticket:  {len(counted)} {counted[:3]}")
    print_stale_escalations(conn)
    return len(dup_firings) + len(dup_escalations) + len(dup_tickets) + len(dup_open) + len(counted)


def print_errors(logs: Path) -> None:
    """Error-level lines the services logged (a fault's expected errors, and anything else)."""
    print("\nerror-level log lines of the services (by service; the first distinct messages)")
    for path in sorted(logs.glob("*.log")):
        messages: collections.Counter[str] = collections.Counter()
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            if '"level": "error"' in line or '"level": "critical"' in line:
                try:
                    doc = json.loads(line)
                except ValueError:
                    continue
                messages[str(doc.get("message") or doc.get("event"))[:110]] += 1
        if messages:
            print(
                f"  {path.name}: {sum(messages.values())}: "
                + "; ".join(f"{n} x {m}" for m, n in messages.most_common(3))
            )


def print_faults(faults: list[Fault], scene: Scene) -> int:
    print("\nfaults and recovery")
    problems = 0
    for fault in faults:
        if not fault.at:
            print(f"  {fault.name:<34} {fault.detail}")
            continue
        recovered = f"{fault.recovered - fault.at:6.1f} s" if fault.recovered else "  never"
        print(f"  {fault.name:<34} at +{fault.wall - scene.wall0:4.0f} s, recovered in {recovered} ({fault.recovery})")
        print(f"  {'':<34} {fault.detail}")
        problems += fault.recovered is None
    return problems


def figures(run: Run, scene: Scene, faults: list[Fault], watch: CapWatch, held_runs: set[int]) -> int:
    """Prints the tables; returns how many problems (loss, duplication, a double start) were found."""
    problems = print_reports(run, scene)
    engine = create_engine(scene.url)
    with engine.connect() as conn:
        problems += print_remediations(conn, faults, scene)
        problems += print_caps(watch, conn)
        problems += print_host_actions(read_starts(scene.work))
        print_envelopes(conn, scene.work, scene.state, faults, scene.wall0)  # the same starts, by step
        print_stalls(conn, scene.logs, faults, held_runs, scene.wall0)
    engine.dispose()
    problems += print_faults(faults, scene)
    print_errors(scene.logs)
    print(f"\nfigures read {time.strftime('%H:%M:%S')}")
    return problems
