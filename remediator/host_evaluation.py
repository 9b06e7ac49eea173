"""A host's signals from one report, and the rules that fire on them.

Signals come from the report and the host's derivation memory (one JSON document on the host row):
EDAC counter rates, the derivers of remediator.derive, and storms across both. Ingest and the
backtest use them alike.
"""

from __future__ import annotations

import datetime as dt
import functools
from typing import Any

from checker.schemas import Report
from remediator.baselines import FirmwareBaselines, load_baselines
from remediator.derive import HostFacts, derive
from remediator.derive.storms import storm_signals
from remediator.evaluate import Firing, evaluate
from remediator.models import Host
from remediator.rules import RuleSet
from remediator.signals import PreviousCounter, SignalValue, counters_of, rate_signals


@functools.cache
def firmware_baselines() -> FirmwareBaselines:
    return load_baselines()


def report_signals(host: Host, report: Report, memory: dict[str, Any]) -> list[SignalValue]:
    """Every signal of a report, given what the host's memory kept from the reports before it.

    EDAC counter rates keep their state under memory["edac"]; the other
    derivers (remediator.derive) under memory["derive"].
    """
    signals = edac_signals(report, memory)
    facts = HostFacts(
        hostname=host.hostname,
        hardware_class=host.hardware_class,
        datacenter=host.datacenter,
        labels={str(k): str(v) for k, v in (host.labels or {}).items()},
    )
    derived = derive(report, memory.get("derive") or {}, facts, baselines=firmware_baselines())
    if derived.changed:
        memory["derive"] = derived.memory
    signals += derived.signals
    return signals + storm_signals(report, signals)  # needs the DIMM rates of both EDAC and rasdaemon


def evaluate_host(
    host: Host, signals: list[SignalValue], ruleset: RuleSet, memory: dict[str, Any], now: dt.datetime
) -> list[Firing]:
    """The rules that fire for this host now (its selectors' facts come from its inventory)."""
    return evaluate(
        ruleset.rules,
        signals,
        hardware_class=host.hardware_class,
        datacenter=host.datacenter,
        labels=host.labels,
        memory=memory,
        now=now,
    )


def edac_signals(report: Report, memory: dict[str, Any]) -> list[SignalValue]:
    """EDAC counter rates against the counters this host reported last time."""
    counters = counters_of(report)
    if not counters:
        return []
    state = memory.get("edac") or {}
    at = dt.datetime.fromisoformat(state["at"]) if "at" in state else None
    previous = (
        {key: PreviousCounter(value, at, state.get("boot")) for key, value in state.get("counters", {}).items()}
        if at is not None
        else {}
    )
    signals = rate_signals(counters, previous, now=report.captured_at, boot_id=report.host.boot_id)
    memory["edac"] = {
        "at": report.captured_at.isoformat(),
        "boot": report.host.boot_id,
        "counters": {c.key: c.value for c in counters},
    }
    return signals
