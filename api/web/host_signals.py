"""Which signal kinds the host page treats as facts (a panel) and which it charts, in one place.

A fact is a signal that restates the host's configuration every report while it
holds (docs/signals.md, "Signal kinds": their "emitted" column reads "every
report while …" a setting, a version or a CPU model is what it is). Repeated
every cycle it said nothing new and buried the timeline (issue 18:
`edac_poll_interval 37` every 5 s), so the page shows its current value once, in
the facts panel, with how long it has held. Every other kind is an event or a
measurement and stays in the timeline.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

FACT_KINDS: Mapping[str, str] = {
    # kind: why it is a configuration fact (each row's wording in docs/signals.md)
    "edac_poll_interval": "the EDAC driver's edac_mc_poll_msec setting, restated every report",
    "firmware_below_baseline": "BIOS / BMC / NIC firmware against the class baseline, every report while below",
    "microcode_below_baseline": "the CPU microcode revision against the class baseline, every report while below",
    "errata_match": "the CPU model and kernel build match an erratum, every report while the build is not the fix",
    "error_reporting_mode": "how corrected errors are reported (firmware-first or CMCI), a firmware setting",
    "corrected_errors_ignored": "machinecheck ignore_ce is set, every report while it holds",
    "capacity_inventory": "the measures the host has (MemTotal, DIMMs, CPUs, disks, NICs): 'not a finding'",
    "irq_affinity_isolated": "an IRQ's affinity list includes isolated CPUs, every report",
    "cxl_demotion_disabled": "memory-tiering demotion is off for a CPU-less node, every report while off",
    "numa_balancing_tiering_off": "the numa_balancing sysctl lacks the tiering bit, every report while it does",
    "interleave_weights_mismatch": "weighted-interleave weights differ from the class's, every report",
    "interleave_weights_default": "weighted-interleave weights all equal with none configured, every report",
    "gpu_ecc_disabled": "the GPU's ECC mode is off ('a configuration fact' in docs/signals.md)",
}

CE_RATE = "dimm_ce_rate"
SMART_GROWTH_KINDS: Mapping[str, str] = {
    # kind: the counter its detail's `current` holds (docs/signals.md, smart_* and nvme_* rows)
    "smart_reallocated_growth": "reallocated sectors",
    "smart_pending_growth": "pending sectors",
    "smart_grown_defects_growth": "grown defects",
    "nvme_media_errors_growth": "media errors",
}
ISOLATED_IRQ = "isolated_cpu_irq_rate"
CHARTED_KINDS = frozenset({CE_RATE, ISOLATED_IRQ, *SMART_GROWTH_KINDS})
"""Measurements drawn as charts: their repeats collapse in the timeline even when the value moves."""


class SignalRow(Protocol):
    kind: str
    subject: str
    value: float
    detail: dict[str, Any]
    observed_at: dt.datetime


def is_fact(kind: str) -> bool:
    return kind in FACT_KINDS


@dataclass(frozen=True)
class Fact:
    """The newest value of one fact kind and subject, and since when it has held that value."""

    kind: str
    subject: str
    value: float
    detail: Mapping[str, Any]
    since: dt.datetime
    last_at: dt.datetime
    reports: int
    """Reports in a row (of those read) that stated this value."""

    @property
    def summary(self) -> str:
        """A few scalar detail fields, enough to read the fact without the API."""
        shown = [f"{k}={v}" for k, v in self.detail.items() if isinstance(v, str | int | float | bool) and v != ""]
        return ", ".join(shown[:5])


def host_facts(signals: Iterable[SignalRow]) -> list[Fact]:
    """Signals of fact kinds, newest first, reduced to one Fact per (kind, subject), sorted by kind."""
    found: dict[tuple[str, str], Fact] = {}
    settled: set[tuple[str, str]] = set()
    for signal in signals:
        key = (signal.kind, signal.subject)
        fact = found.get(key)
        if fact is None:
            found[key] = Fact(
                kind=signal.kind,
                subject=signal.subject,
                value=signal.value,
                detail=signal.detail or {},
                since=signal.observed_at,
                last_at=signal.observed_at,
                reports=1,
            )
        elif key not in settled and signal.value == fact.value:
            found[key] = replace(fact, since=signal.observed_at, reports=fact.reports + 1)
        else:
            settled.add(key)  # an older, different value: the current one holds since the last step
    return sorted(found.values(), key=lambda f: (f.kind, f.subject))
