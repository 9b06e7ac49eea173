"""The chaos bench's figures on host actions: driver starts per envelope and per step, what became of
every non-idempotent envelope, and the remediations the scheduler's stall sweep sent again."""

from __future__ import annotations

import collections
import datetime as dt
import json
from pathlib import Path
from typing import Any

from sqlalchemy import text

from bench._chaos_agents import read_journal, read_starts
from bench._chaos_faults import NON_IDEMPOTENT, Fault
from remediator.stalls import STALL_S

STEPS = text(
    "SELECT s.remediation_id, s.index, s.action, s.state::text, s.result, r.state::text, r.rule_id, r.rung,"
    " h.hostname, s.finished_at, r.admitted_at FROM remediation_steps s JOIN remediations r ON r.id = s.remediation_id"
    " JOIN hosts h ON h.id = r.host_id WHERE s.action = ANY(:actions) ORDER BY s.remediation_id, s.index"
)
ESCALATED = text(
    "SELECT d.at, d.reason FROM decisions d JOIN remediations r ON r.id = d.remediation_id"
    " WHERE r.previous_id = :r AND d.outcome = 'escalated' ORDER BY d.at LIMIT 1"
)


def _why_escalated(conn: Any, rid: int, finished: dt.datetime) -> str:
    """After a step that succeeded: why its remediation escalated, and when the report that fired was
    captured (a decision's time is its report's captured_at) relative to the step's end."""
    escalated = conn.execute(ESCALATED, {"r": rid}).first()
    if escalated is None:
        return ""
    at, reason = escalated
    return (
        f"\n  {'':<18} escalated: {reason[:80]}; the report that fired was captured "
        f"{(at - finished).total_seconds():+.1f} s from the step's end"
    )


def print_host_actions(starts: list[dict[str, Any]]) -> int:
    """Every envelope the agents ran; returns the non-idempotent ones started twice (envelope or step)."""
    per_envelope = collections.Counter(s["envelope"] for s in starts)
    per_step: dict[tuple[int, int], set[str]] = collections.defaultdict(set)
    for s in starts:
        if not s["idempotent"]:
            per_step[(s["remediation"], s["step"])].add(s["envelope"])
    twice = {e for e, n in per_envelope.items() if n > 1}
    twice_bad = {s["envelope"] for s in starts if s["envelope"] in twice and not s["idempotent"]}
    steps_twice = {k: v for k, v in per_step.items() if len(v) > 1}
    actions = collections.Counter(s["action"] for s in starts)
    print("\nhost actions (the faulty hosts' cyborg agents, child processes, simulated driver, journal on disk)")
    print(f"  envelopes run {len(per_envelope)}, driver starts {len(starts)}: {dict(actions)}")
    print(f"  envelopes whose driver started more than once: {len(twice)} (non-idempotent: {len(twice_bad)})")
    print(f"  non-idempotent steps run under two envelopes:  {len(steps_twice)} {list(steps_twice.items())[:3]}")
    return len(twice_bad) + len(steps_twice)


def _chains(conn: Any) -> tuple[dict[int, list[tuple[int, str, int, str]]], dict[int, int]]:
    """Escalations by the remediation they came from: (id, state, rung, actions); tickets by remediation."""
    rows = conn.execute(
        text(
            "SELECT r.id, r.previous_id, r.state::text, r.rung, string_agg(s.action, '+' ORDER BY s.index)"
            " FROM remediations r JOIN remediation_steps s ON s.remediation_id = r.id"
            " WHERE r.previous_id IS NOT NULL GROUP BY r.id"
        )
    ).all()
    nexts: dict[int, list[tuple[int, str, int, str]]] = collections.defaultdict(list)
    for rid, previous, state, rung, actions in rows:
        nexts[previous].append((rid, state, rung, actions))
    tickets = dict(conn.execute(text("SELECT remediation_id, id FROM tickets WHERE remediation_id IS NOT NULL")).all())
    return nexts, tickets


def _then(rid: int, nexts: dict[int, list[tuple[int, str, int, str]]], tickets: dict[int, int]) -> str:
    """What followed a remediation: its escalation rungs to the end, and any ticket."""
    parts, current = [], rid
    while nexts.get(current):
        current, state, _rung, actions = nexts[current][0]
        parts.append(f"#{current} {actions} {state}" + (f" (ticket {tickets[current]})" if current in tickets else ""))
    return " -> ".join(parts)


def _outcome(step_state: str, result: dict[str, Any], journal: dict[str, Any] | None) -> str:
    report = (journal or {}).get("report") or {}
    if step_state == "succeeded":
        across = (report.get("changed") or {}).get("completed_across_restart")
        return "succeeded" + (" (across the agent's restart: verified, not run again)" if across else "")
    if step_state == "failed":
        return f"failed: {str(result.get('error') or report.get('error') or '')[:70]}"
    return step_state + (" (waiting on its host)" if step_state == "running" else "")


def print_envelopes(conn: Any, work: Path, state: Path, faults: list[Fault], wall0: float) -> int:
    """Every non-idempotent host step: its envelope, runs, driver starts, what hit it, how it ended.
    Returns how many started twice (for one envelope, or one step under two envelopes)."""
    starts = read_starts(work)
    by_envelope = collections.Counter(s["envelope"] for s in starts)
    started_at: dict[str, list[float]] = collections.defaultdict(list)
    for s in starts:
        started_at[s["envelope"]].append(s["at"] - wall0)
    by_step: dict[tuple[int, int], set[str]] = collections.defaultdict(set)
    for s in starts:
        by_step[(s["remediation"], s["step"])].add(s["envelope"])
    hits: dict[tuple[int, int], list[str]] = collections.defaultdict(list)
    for fault in faults:
        for hit in fault.hit:
            hits[(hit["remediation"], hit["step"])].append(f"{fault.name} at +{fault.wall - wall0:.0f} s")
    rows = conn.execute(STEPS, {"actions": list(NON_IDEMPOTENT)}).all()
    nexts, tickets = _chains(conn)
    problems = 0
    outcomes: collections.Counter[str] = collections.Counter()
    lockups = [r for r in rows if r[6] == "soft-lockups" and r[7] == 0]
    print(
        f"\nnon-idempotent host steps ({', '.join(NON_IDEMPOTENT)}): {len(rows)}; the soft-lockups reboots: planned "
        f"{len(lockups)}, admitted {sum(r[10] is not None for r in lockups)}, envelope sent "
        f"{sum(bool((r[4] or {}).get('envelope_id')) for r in lockups)}, run (driver started) "
        f"{sum(by_envelope[(r[4] or {}).get('envelope_id')] > 0 for r in lockups)}"
    )
    print(f"  {'remediation':<18} {'host':<22} {'envelope':<9} runs starts  kills / outcome / what followed")
    for rid, index, action, step_state, result, _rstate, rule, rung, host, finished, _admitted in rows:
        result = result or {}
        envelope = result.get("envelope_id")
        entry = read_journal(state, host).get(envelope) if envelope else None
        n = by_envelope[envelope] if envelope else 0
        envelopes = by_step[(rid, index)]
        bad = n > 1 or len(envelopes) > 1
        problems += bad
        outcome = _outcome(step_state, result, entry)
        outcomes["succeeded across the agent's restart" if "across" in outcome else outcome[:70]] += 1
        then = _then(rid, nexts, tickets)
        when = ", ".join(f"+{t:.0f} s" for t in started_at.get(envelope or "", [])) or "never"
        print(
            f"  #{rid:<5} {rule[:11]:<11} {host:<22} {(envelope or '-')[:8]:<9} {(entry or {}).get('runs', 0):4d}"
            f" {n:6d}{'  TWICE' if bad else ''}  started {when}; {'; '.join(hits[(rid, index)]) or 'no kill'}"
        )
        why = _why_escalated(conn, rid, finished) if step_state == "succeeded" and then else ""
        print(f"  {'':<18} {action} step {index} rung {rung}: {outcome}" + (f"; then {then}" if then else "") + why)
    print(f"  outcomes: {dict(outcomes)}")
    print(f"  driver started twice for one envelope or one step: {problems}")
    return problems


def redriven(logs: Path) -> list[tuple[float, int]]:
    """(wall time, remediation) of every `remediator.remediation.redriven` the workers logged."""
    found = []
    for path in sorted(logs.glob("worker.*.log")):
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            if "remediator.remediation.redriven" not in line:
                continue
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            found.append((dt.datetime.fromisoformat(doc["ts"]).timestamp(), int(doc["remediation"])))
    return sorted(found)


def print_stalls(conn: Any, logs: Path, faults: list[Fault], held_runs: set[int], wall0: float) -> None:
    """The runs the killed worker held, and what the scheduler's stall sweep sent again."""
    sent = redriven(logs)
    kill = next((f for f in faults if f.name == "kill -9 worker"), None)
    print(f"\nstall sweep (remediator.redrive_stalled every 60 s: a run re-sent after STALL_S={STALL_S} s unchanged)")
    print(f"  remediations re-sent (worker log `remediator.remediation.redriven`): {len(sent)}")
    for at, rid in sent:
        print(
            f"    #{rid} at +{at - wall0:.0f} s"
            + (" (its run was held by the killed worker)" if rid in held_runs else "")
        )
    if kill is None:
        return
    rows = conn.execute(
        text(
            "SELECT r.id, r.rule_id, r.state::text, (SELECT min(s.started_at) FROM remediation_steps s"
            " WHERE s.remediation_id = r.id AND s.started_at > to_timestamp(:k))"
            " FROM remediations r WHERE r.id = ANY(:ids)"
        ),
        {"ids": list(held_runs), "k": kill.wall},
    ).all()
    print(f"  runs the killed worker held (killed at +{kill.wall - wall0:.0f} s): {len(rows)}")
    for rid, rule, state, next_started in rows:
        again = next((at for at, r in sent if r == rid and at > kill.wall), None)
        waited = f"re-sent after {again - kill.wall:.0f} s" if again else "not re-sent"
        moved = (
            f", next step started {next_started.timestamp() - kill.wall:.0f} s after the kill" if next_started else ""
        )
        print(f"    #{rid} {rule}: {waited}{moved}; now {state}")
