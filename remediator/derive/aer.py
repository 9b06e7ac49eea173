"""PCIe AER errors from rasdaemon's aer_event table, for hosts whose kernel log the agent cannot read.

The kernel prints every AER error it handles (aer_print_error) and raises the `ras:aer_event` trace
event rasdaemon records, so on a host whose kernel log is read the two are the same errors, counted
once from the log (remediator/derive/kernel.py). Where the report has no kernel log (the collector
failed or is off), rasdaemon's rows stand in: new rows, by id, become the same per-device counts,
`device_event_count` of kind pcie_aer_corrected or pcie_aer_uncorrected, with the row as the line. The
first sight of a database records its last id only (its history spans an unknown time); ids going
backwards mean a recreated database, read from its start. Pure.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict

from checker.parsers.rasdaemon import ras_timestamp
from checker.schemas import KernelEvent, KernelEventKind, Observations, RasAerEvent
from remediator.derive.kernel import device_signals
from remediator.derive.memory import Bucket
from remediator.signals import SignalValue

K = KernelEventKind


def aer_kind(event: RasAerEvent) -> KernelEventKind | None:
    """rasdaemon's err_type: "Corrected", "Uncorrected (Non-Fatal)", "Uncorrected (Fatal)"."""
    words = event.err_type.strip().lower()
    if words.startswith("uncorrected") or "fatal" in words:
        return K.pcie_aer_uncorrected
    if words.startswith("corrected"):
        return K.pcie_aer_corrected
    return None


def new_rows(obs: Observations, cursor: int | None) -> tuple[list[RasAerEvent], int | None]:
    """The aer_event rows this report adds, and the cursor to keep."""
    ras = obs.rasdaemon
    if ras is None:
        return [], cursor
    reported = [e.id for e in ras.aer_events]
    top = ras.last_ids.get("aer_event")
    reported_max = max([*reported, *([top] if top is not None else [])], default=None)
    if cursor is None:
        return [], reported_max  # first sight: history over an unknown span
    if reported_max is not None and reported_max < cursor:
        return list(ras.aer_events), reported_max  # a recreated database
    fresh = [e for e in ras.aer_events if e.id > cursor]
    return fresh, cursor if reported_max is None else max(cursor, reported_max)


def aer_signals(
    obs: Observations,
    cursor: int | None,
    devices: dict[str, dict[str, list[Bucket]]],
    *,
    now: dt.datetime,
) -> tuple[list[SignalValue], int | None, dict[str, dict[str, list[Bucket]]]]:
    """Device counts from the new rows when the report has no kernel log; the cursor moves either way."""
    fresh, kept = new_rows(obs, cursor)
    if obs.kernel_log is not None or not fresh:
        return [], kept, devices
    events: dict[KernelEventKind, list[KernelEvent]] = defaultdict(list)
    for row in fresh:
        kind = aer_kind(row)
        if kind is None or not row.dev_name:
            continue
        line = f"rasdaemon aer_event {row.id}: {row.dev_name} {row.err_type}: {row.err_msg}"[:1000]
        stamp = ras_timestamp(row.timestamp) if row.timestamp else None
        events[kind].append(KernelEvent(kind=kind, subject=row.dev_name, timestamp=stamp, lines=[line]))
    if not events:
        return [], kept, devices
    found, devices = device_signals(events, devices, now)
    for signal in found:
        signal.detail["source"] = "rasdaemon aer_event (no kernel log in this report)"
    return found, kept, devices
