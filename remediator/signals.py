"""Signals from consecutive reports: counter deltas turned into rates, safely.

Pure functions over the previous counter values; the ingest service loads and
stores those. Counters reset at reboot and driver reload, and reports go
missing: a rate is never negative, a decrease is recorded as a reset, and a
gap longer than MAX_GAP_S yields no rate (the delta spans too much to mean a rate).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from checker.schemas import Report

MAX_GAP_S = 6 * 3600
EDAC_COUNTER_MAX = 2**32 - 1  # the kernel's u32 counters


@dataclass(frozen=True)
class Counter:
    key: str
    value: int
    subject: str
    kind: str  # the rate signal it feeds: dimm_ce_rate / dimm_ue_rate
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PreviousCounter:
    value: int
    observed_at: dt.datetime
    boot_id: str | None


@dataclass(frozen=True)
class SignalValue:
    kind: str
    subject: str
    value: float
    detail: dict[str, Any] = field(default_factory=dict)


def counters_of(report: Report) -> list[Counter]:
    """The raw counters a report carries, keyed stably across reports."""
    counters: list[Counter] = []
    edac = report.observations.edac
    if edac is None:
        return counters
    for controller in edac.controllers:
        # Errors the driver could not pin on a DIMM: a rate per controller, with the DIMMs it could be.
        noinfo_detail = {
            "mc": controller.mc,
            "mc_name": controller.mc_name,
            "candidates": [d.label or f"mc{d.mc}/{d.name}" for d in controller.dimms][:24],
        }
        counters.append(
            Counter(
                f"edac:mc{controller.mc}:noinfo:ce",
                controller.ce_noinfo_count,
                f"mc{controller.mc}",
                "edac_noinfo_ce_rate",
                noinfo_detail,
            )
        )
        for dimm in controller.dimms:
            subject = dimm.label or f"mc{dimm.mc}/{dimm.name}"
            base = f"edac:mc{dimm.mc}:{dimm.name}"
            detail = {
                "mc": dimm.mc,
                "entry": dimm.name,
                "label": dimm.label,
                "location": dimm.location,
                "mem_type": dimm.mem_type,
            }
            counters.append(Counter(f"{base}:ce", dimm.ce_count, subject, "dimm_ce_rate", detail))
            counters.append(Counter(f"{base}:ue", dimm.ue_count, subject, "dimm_ue_rate", detail))
    return counters


def rate_signals(
    counters: list[Counter],
    previous: dict[str, PreviousCounter],
    *,
    now: dt.datetime,
    boot_id: str | None,
) -> list[SignalValue]:
    """Rates for counters that moved since the previous report, and resets.

    A counter seen for the first time has no rate (there is no interval yet),
    except a UE count above zero, which matters on its own.
    """
    signals: list[SignalValue] = []
    for counter in counters:
        before = previous.get(counter.key)
        if before is None:
            if counter.kind == "dimm_ue_rate" and counter.value > 0:
                signals.append(
                    SignalValue("dimm_ue", counter.subject, counter.value, {**counter.detail, "first_seen": True})
                )
            continue
        elapsed = (now - before.observed_at).total_seconds()
        rebooted = boot_id is not None and before.boot_id is not None and boot_id != before.boot_id
        if counter.value < before.value or rebooted:
            signals.append(
                SignalValue(
                    "counter_reset",
                    counter.subject,
                    counter.value,
                    {**counter.detail, "key": counter.key, "before": before.value, "rebooted": rebooted},
                )
            )
            # After a reset the new value counts from zero over an unknown span: no rate.
            if counter.kind == "dimm_ue_rate" and counter.value > 0:
                signals.append(SignalValue("dimm_ue", counter.subject, counter.value, counter.detail))
            continue
        delta = counter.value - before.value
        if delta == 0 or elapsed <= 0 or elapsed > MAX_GAP_S:
            continue
        detail = {**counter.detail, "delta": delta, "elapsed_s": round(elapsed, 3), "count": counter.value}
        if counter.value >= EDAC_COUNTER_MAX:
            detail["saturated"] = True
        signals.append(SignalValue(counter.kind, counter.subject, delta / elapsed, detail))
        if counter.kind == "dimm_ue_rate":
            signals.append(SignalValue("dimm_ue", counter.subject, delta, detail))
    return signals
