"""Which rules fire on a host's signals: thresholds, `for` durations and windows.

Pure: the per-rule timers and window samples live in the host's derivation
memory (a JSON document), passed in and returned, so evaluation costs no query.

A rule about a device (remediator.parts.fires_per_device: a DIMM, a disk, a port, a GPU ...) fires once for
each device whose signal holds, each with its own `for` timer: two ports down in one report are two faults, and
a signal counted from events is not repeated in the next report, so firing on the worst alone lost the other.
Any other rule fires once, on its highest signal (its subjects are views of one host-wide fault).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from remediator.parts import fires_per_device
from remediator.rules import Rule
from remediator.signals import SignalValue

MAX_SAMPLES = 256  # per rule and host: windows are bounded in memory too
MAX_DEVICES = 32  # firings of one rule in one evaluation, nearest to firing first; timers are bounded alike


@dataclass(frozen=True)
class Firing:
    rule: Rule
    signal: SignalValue  # the signal that decided it; for windows, value is the aggregate


def _nearest_first(rule: Rule, values: list[SignalValue]) -> list[SignalValue]:
    """Highest first, or lowest first for a rule that fires below its value; ties by subject."""
    low = rule.when.op in ("<", "<=")
    return sorted(values, key=lambda s: (s.value if low else -s.value, s.subject))


def _windowed(rule: Rule, samples: list[list[Any]], hits: list[SignalValue]) -> list[SignalValue]:
    """The window's aggregate per subject (one disk's growth, one core's errors: never several parts
    added together), nearest to firing first, each with its subject's latest detail."""
    when = rule.when
    by_subject: dict[str, list[float]] = {}
    for _, value, subject in samples:
        by_subject.setdefault(subject, []).append(value)
    out = []
    for subject, values in by_subject.items():
        latest = next((s for s in reversed(hits) if s.subject == subject), None)
        detail = {
            **(latest.detail if latest is not None else {}),
            "aggregate": when.aggregate,
            "window_s": when.window_s,
            "samples": len(values),
        }
        out.append(SignalValue(when.signal, subject, _aggregate(when.aggregate, values), detail))
    return _nearest_first(rule, out)


def _per_subject(rule: Rule, hits: list[SignalValue]) -> list[SignalValue]:
    """Each subject's signal nearest to firing (a report may carry two of one part), nearest first."""
    best: dict[str, SignalValue] = {}
    for signal in _nearest_first(rule, hits):
        best.setdefault(signal.subject, signal)
    return list(best.values())


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
        per_device = fires_per_device(rule)
        candidates: list[SignalValue] = []
        if when.window_s:
            horizon = (now - dt.timedelta(seconds=when.window_s)).isoformat()
            samples = [x for x in entry.get("samples", []) if x[0] >= horizon]
            samples += [[now.isoformat(), s.value, s.subject] for s in hits]
            samples = samples[-MAX_SAMPLES:]
            entry["samples"] = samples
            if samples:
                candidates = _windowed(rule, samples, hits)
        elif hits:
            candidates = _per_subject(rule, hits) if per_device else [max(hits, key=lambda s: s.value)]
        if per_device:
            fired += _fire_each(rule, candidates, entry, now)
        else:
            decisive = candidates[0] if candidates else None
            entry.pop("since_by", None)  # the rule was about a device before a pack change
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


def _fire_each(rule: Rule, candidates: list[SignalValue], entry: dict[str, Any], now: dt.datetime) -> list[Firing]:
    """Fire for each device whose signal holds and has held for the rule's `for`: a timer per device
    (entry["since_by"]), dropped when its device stops holding. A timer kept from before the rule fired per
    device (entry["since"]) goes to the device nearest to firing, the one it was timing."""
    when = rule.when
    holding = [c for c in candidates if when.holds(c.value)][:MAX_DEVICES]
    before: dict[str, str] = dict(entry.pop("since_by", {}) or {})
    legacy = entry.pop("since", None)
    if isinstance(legacy, str) and holding:
        before.setdefault(holding[0].subject, legacy)
    timers: dict[str, str] = {}
    fired = []
    for signal in holding:
        since = before.get(signal.subject) or now.isoformat()
        timers[signal.subject] = since
        if (now - dt.datetime.fromisoformat(since)).total_seconds() >= when.for_s:
            fired.append(Firing(rule, signal))
    if timers:
        entry["since_by"] = timers
    return fired
