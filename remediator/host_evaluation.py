"""A host's signals from one report, and the rules that fire on them.

Signals come from the report and the host's derivation memory (one JSON document on the host row):
EDAC counter rates, the derivers of remediator.derive, and storms across both. Ingest and the
backtest use them alike.
"""

from __future__ import annotations

import datetime as dt
import functools
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import object_session

from checker.schemas import Report
from core.db import service_of
from remediator.baselines import FirmwareBaselines, load_baselines, with_override
from remediator.derive import HostFacts, derive
from remediator.derive.reporting import reporting_signals
from remediator.derive.storms import storm_signals
from remediator.evaluate import Firing, evaluate
from remediator.models import Host, Remediation, RemediationStep, StepState
from remediator.offlined_pages import with_offlined_pages
from remediator.rules import RuleSet
from remediator.runtime import Remediator
from remediator.signals import PreviousCounter, SignalValue, counters_of, rate_signals


@functools.cache
def firmware_baselines() -> FirmwareBaselines:
    return load_baselines()


@functools.cache
def _overridden(path: Path) -> FirmwareBaselines:
    """The built-in baselines with the operator's file over them (read once per process, like the built-in)."""
    return with_override(firmware_baselines(), load_baselines(path))


def baselines_of(host: Host) -> FirmwareBaselines:
    """The baselines that apply to a host: the built-in file, with `FLEETFIX_BASELINES_PATH` over it when the
    runtime its session belongs to sets one."""
    session = object_session(host)
    remediator = service_of(session, Remediator) if session is not None else None
    path = remediator.settings.baselines_path if remediator is not None else None
    return _overridden(path) if path is not None else firmware_baselines()


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
    derived = derive(report, memory.get("derive") or {}, facts, baselines=baselines_of(host))
    if derived.changed:
        memory["derive"] = derived.memory
    signals += derived.signals
    signals += storm_signals(report, signals)  # needs the DIMM rates of both EDAC and rasdaemon
    # pages offlined per DIMM, and offlined pages counted from their offline: the host's own soft_offline_page
    # results (this boot); asked while pages are tracked, not only when the memory changed (a held DIMM count
    # is asked again at the next report)
    signals = with_offlined_pages(host, signals, memory, report.host.boot_id)
    baseline = baselines_of(host).for_class(host.hardware_class)
    found, kept = reporting_signals(  # needs every error source derived above
        report,
        signals,
        memory.get("smi") or {},
        expected=baseline.error_reporting if baseline is not None else None,
        hardware_class=host.hardware_class,
        ppr_active=lambda: hard_ppr_running(host),
    )
    if kept:
        memory["smi"] = kept
    else:
        memory.pop("smi", None)
    return signals + found


def hard_ppr_running(host: Host) -> bool:
    """A hard-PPR step of the host's active remediation is running: its firmware-first window is on
    purpose. Asked only of hosts seen firmware-first, so ingest pays the query rarely."""
    session = object_session(host)
    if session is None or host.id is None:
        return False
    query = (
        select(RemediationStep.id)
        .join(Remediation, Remediation.id == RemediationStep.remediation_id)
        .where(
            Remediation.host_id == host.id,
            Remediation.active.is_(True),
            RemediationStep.action == "hard_ppr",
            RemediationStep.state == StepState.running,
        )
        .limit(1)
    )
    return session.scalar(query) is not None


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
