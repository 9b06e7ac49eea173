"""What the storm bench prints at the end: the caps against the most hosts out at once, the breaker, the
decisions on the storm's hosts, and the Slack messages the local receiver heard (bench/storm.py)."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from itertools import pairwise

from sqlalchemy import func, select
from sqlalchemy.engine import Engine

from bench._storm_probe import SCOPES, OutOfService
from remediator.models import Decision, Host, Remediation, RuleState
from ticketing.models import Ticket
from ticketing.notify.models import AlertDelivery, AlertOutbox
from ticketing.notify.receiver import SlackReceiver

RULE = "dimm-ce-storm"


def report(
    engine: Engine,
    probe: OutOfService,
    storm: set[str],
    receiver: SlackReceiver,
    t0_wall: float,
    elapsed: float,
    max_hosts: int,
) -> bool:
    """Print what happened; True if a cap was exceeded or no breaker tripped."""

    def since_t0(at: dt.datetime | None) -> str:
        return f"t+{at.timestamp() - t0_wall:.1f}s" if at is not None else "-"

    print(f"\nrun: {elapsed:.0f}s after t0; {probe.samples} samples of hosts out of service (every 200 ms)")
    print("hosts out of service at once (admitted disruptive remediation, or drained), max per unit vs its cap:")
    for scope in SCOPES:
        peak = probe.peaks[scope]
        limit = peak.limit or probe.tightest(scope)
        where = f" ({peak.unit} at t+{peak.at:.1f}s)" if peak.out else ""
        verdict = "EXCEEDED" if peak.out > limit else ("at the cap" if peak.out == limit else "below the cap")
        print(f"  {scope:<10} max {peak.out:3d}  cap {limit:3d}  {verdict}{where}")
    for line in probe.over[:10]:
        print(f"  OVER: {line}")

    with engine.connect() as conn:
        states = conn.execute(select(RuleState).where(RuleState.breaker_open.is_(True))).all()
        rows = conn.execute(
            select(Remediation.host_id, Remediation.state, Remediation.created_at, Remediation.evidence).where(
                Remediation.rule_id == RULE
            )
        ).all()
        hostnames = dict(conn.execute(select(Host.id, Host.hostname)).all())
        decisions = conn.execute(select(Decision.host_id, Decision.outcome, Decision.reason, Decision.rule_id)).all()
        drained = int(conn.scalar(select(func.count()).select_from(Host).where(Host.drained_at.is_not(None))) or 0)
        tickets = int(conn.scalar(select(func.count()).select_from(Ticket)) or 0)
        outbox = conn.execute(select(AlertOutbox.kind, func.count()).group_by(AlertOutbox.kind)).all()
        deliveries = conn.execute(
            select(
                AlertDelivery.id,
                AlertDelivery.kind,
                AlertDelivery.channel,
                AlertDelivery.count,
                AlertDelivery.state,
                AlertDelivery.sent_at,
                AlertDelivery.digest,
            ).order_by(AlertDelivery.id)
        ).all()
        others = conn.execute(
            select(Remediation.rule_id, func.count()).where(Remediation.rule_id != RULE).group_by(Remediation.rule_id)
        ).all()

    print("\nbreaker:")
    ours = [s for s in states if s.rule_id == RULE]
    for state in states:
        print(f"  {state.rule_id} opened {since_t0(state.breaker_opened_at)}: {state.breaker_reason}")
    if probe.breaker_seen_at is not None:
        print(f"  first seen open by the sampler at t+{probe.breaker_seen_at:.1f}s")
    planned_hosts = {hostnames[r.host_id] for r in rows}
    by_state = Counter(r.state.value for r in rows)
    extra = len(planned_hosts) - max_hosts
    over_breaker = f"OVER by {extra}" if extra > 0 else "within"
    not_drained = sum(1 for r in rows if "not_drained" in (r.evidence or {}))
    print(
        f"  {RULE}: {len(rows)} remediations planned on {len(planned_hosts)} hosts"
        f" (the breaker allows {max_hosts}: {over_breaker});"
        f" states {dict(by_state)}"
    )
    why = Counter(
        str(r.evidence["not_drained"]).split(":")[1].split("(")[0].strip()
        for r in rows
        if "not_drained" in (r.evidence or {})
    )
    print(f"  {not_drained} of them not drained (ticket only, host left in service): {dict(why)}")
    outcomes: dict[str, set[str]] = {}
    reasons: Counter[str] = Counter()
    for d in decisions:
        if d.rule_id == RULE:
            outcomes.setdefault(d.outcome, set()).add(hostnames[d.host_id])
            if d.outcome in ("skipped", "held"):
                reasons[f"{d.outcome}: {d.reason.split(':')[0]}"] += 1
    print(f"  decisions on storm hosts: { {k: len(v & storm) for k, v in sorted(outcomes.items())} }")
    for reason, n in reasons.most_common():
        print(f"    {n:4d}  {reason}")
    decided = set().union(*outcomes.values()) if outcomes else set()
    print(
        f"  storm hosts: {len(storm)}; planned {len(planned_hosts & storm)};"
        f" skipped or held without a plan {len((decided - planned_hosts) & storm)};"
        f" no decision {len(storm - decided)}"
    )
    print(f"  other rules' remediations: {dict(others) or 'none'}; hosts drained now {drained}; tickets {tickets}")

    print("\nSlack:")
    print(f"  alerts written: { {k.value: n for k, n in outbox} }")
    for d in deliveries:
        kinds = (d.digest or {}).get("kinds") or {d.kind.value: d.count}
        print(f"  message {d.id}: to {d.channel}, {d.count} alerts {kinds}, {d.state.value}")
    received = receiver.messages()
    print(f"  received by the local receiver: {len(received)} messages ({len(receiver.received)} requests)")
    for message in received:
        blocks = message.body.get("blocks", [])
        body = blocks[1]["text"]["text"] if len(blocks) > 1 else ""
        tail = [line for line in body.splitlines() if not line.startswith("•")]
        print(f"  t+{message.at - t0_wall:7.3f}s {message.channel}: {message.body.get('text', '')!r}  {tail}")
    arrivals: dict[str, list[float]] = {}
    for message in received:
        arrivals.setdefault(message.channel, []).append(message.at)
    for channel, times in arrivals.items():
        gaps = [b - a for a, b in pairwise(times)]
        if gaps:
            pace = "kept" if min(gaps) >= 1.0 else "NOT kept"
            print(
                f"  {channel}: closest two arrivals at the receiver {min(gaps):.3f}s apart"
                f" (pace of 1 per channel per second {pace}; the receiver shares the bench's busy process)"
            )
    sent: dict[str, list[dt.datetime]] = {}
    for d in deliveries:
        if d.sent_at is not None:
            sent.setdefault(d.channel, []).append(d.sent_at)
    for channel, stamps in sent.items():
        gaps = [(b - a).total_seconds() for a, b in pairwise(sorted(stamps))]
        if gaps:
            pace = "kept" if min(gaps) >= 1.0 else "NOT kept"
            print(f"  {channel}: closest two sends by the workers' clocks (sent_at) {min(gaps):.3f}s apart ({pace})")
    channels = Counter(d.channel for d in deliveries)
    several = {channel: n for channel, n in channels.items() if n > 1}
    verdict = "one grouped message per channel" if not several else f"SEVERAL messages in a channel: {several}"
    print(f"  {verdict}")

    exceeded = [s for s in SCOPES if probe.peaks[s].out > (probe.peaks[s].limit or probe.tightest(s))]
    no_trip = not ours
    print(
        f"\nverdict: caps {'EXCEEDED in ' + ', '.join(exceeded) if exceeded else 'never exceeded'};"
        f" breaker {'DID NOT TRIP' if no_trip else 'tripped'}; {len(received)} Slack messages"
    )
    return bool(exceeded or probe.over or no_trip)
