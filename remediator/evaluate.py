"""Which rules fire on a host's signals: thresholds, `for` durations and windows.

Pure: the per-rule timers and window samples live in the host's derivation
memory (a JSON document), passed in and returned, so evaluation costs no query.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from remediator.rules import Rule
from remediator.signals import SignalValue

MAX_SAMPLES = 256  # per rule and host: windows are bounded in memory too


@dataclass(frozen=True)
class Firing:
    rule: Rule
    signal: SignalValue  # the signal that decided it; for windows, value is the aggregate


def _windowed(rule: Rule, samples: list[list[Any]], hits: list[SignalValue]) -> SignalValue:
    """The window's aggregate per subject (one disk's growth, one core's errors: never several parts
    added together), and the subject that comes nearest to firing, with its latest detail."""
    when = rule.when
    by_subject: dict[str, list[float]] = {}
    for _, value, subject in samples:
        by_subject.setdefault(subject, []).append(value)
    totals = {subject: _aggregate(when.aggregate, values) for subject, values in by_subject.items()}
    pick = min if when.op in ("<", "<=") else max
    subject = pick(sorted(totals), key=lambda name: totals[name])
    latest = next((s for s in reversed(hits) if s.subject == subject), None)
    detail = {
        **(latest.detail if latest is not None else {}),
        "aggregate": when.aggregate,
        "window_s": when.window_s,
        "samples": len(by_subject[subject]),
    }
    return SignalValue(when.signal, subject, totals[subject], detail)


def _aggregate(kind: str, values: list[float]) -> float:
    if kind == "count":
        return float(len(values))
    if kind == "sum":
        return sum(values)
    if kind == "avg":
        return sum(values) / len(values)
    if kind == "min":
        return min(values)
    return max(values)


def evaluate(
    rules: list[Rule],
    signals: list[SignalValue],
    *,
    hardware_class: str,
    datacenter: str,
    labels: dict[str, Any],
    memory: dict[str, Any],
    now: dt.datetime,
) -> list[Firing]:
    """Rules that fire now, highest priority first. Updates memory["rules"] in place."""
    state: dict[str, Any] = memory.setdefault("rules", {})
    fired: list[Firing] = []
    for rule in rules:
        if not rule.selector.selects(hardware_class=hardware_class, datacenter=datacenter, labels=labels):
            continue
        when = rule.when
        hits = [s for s in signals if when.matches(s)]
        entry = state.get(rule.id, {})
        decisive: SignalValue | None = None
        if when.window_s:
            horizon = (now - dt.timedelta(seconds=when.window_s)).isoformat()
            samples = [x for x in entry.get("samples", []) if x[0] >= horizon]
            samples += [[now.isoformat(), s.value, s.subject] for s in hits]
            samples = samples[-MAX_SAMPLES:]
            entry["samples"] = samples
            if samples:
                decisive = _windowed(rule, samples, hits)
        elif hits:
            decisive = max(hits, key=lambda s: s.value)
        if decisive is not None and when.holds(decisive.value):
            since = entry.get("since") or now.isoformat()
            entry["since"] = since
            if (now - dt.datetime.fromisoformat(since)).total_seconds() >= when.for_s:
                fired.append(Firing(rule, decisive))
        else:
            entry.pop("since", None)
        if entry:
            state[rule.id] = entry
        else:
            state.pop(rule.id, None)
    fired.sort(key=lambda f: f.rule.priority)
    return fired
