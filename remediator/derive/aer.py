"""PCIe AER errors from rasdaemon's aer_event table, the preferred source where rasdaemon runs.

The kernel prints the AER errors it handles (aer_print_error, rate-limited per device in current
kernels) and raises the `ras:aer_event` trace event for each, which rasdaemon records as one row: so
on a host whose rasdaemon database the agent reads, the rows are the count, and the kernel log's AER
lines are not counted per device again (remediator/derive/kernel.py leaves them to this module);
without rasdaemon the kernel log counts them. New rows, by id, become `device_event_count` of kind
pcie_aer_corrected or pcie_aer_uncorrected, with the row as the line. The first sight of a database
records its last id only (its history spans an unknown time); ids going backwards mean a recreated
database, read from its start. Rows the agent could not carry (`truncated`) make the counts floors,
and the detail says so. Pure.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Collection, Mapping

from checker.parsers.rasdaemon import ras_timestamp
from checker.schemas import KernelEvent, KernelEventKind, Observations, RasAerEvent
from remediator.derive.aer_disposition import disposition, merge, short_name
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


def counts_aer(obs: Observations) -> bool:
    """Whether this report's AER count comes from rasdaemon: the agent read its aer_event table."""
    return obs.rasdaemon is not None and "aer_event" in obs.rasdaemon.last_ids


def aer_signals(
    obs: Observations,
    cursor: int | None,
    devices: dict[str, dict[str, list[Bucket]]],
    *,
    now: dt.datetime,
    counted: Collection[str] = (),
    links: Mapping[str, str] | None = None,
) -> tuple[list[SignalValue], int | None, dict[str, dict[str, list[Bucket]]]]:
    """Device counts from the new rows when the agent read rasdaemon's aer_event table. Corrected rows of
    the functions in `counted` are left to their sysfs counters (remediator/derive/pcie.py); uncorrected
    rows always count. Each row counts on its link (`links`), an uncorrected one with its disposition
    (remediator/derive/aer_disposition.py) from the row's error types."""
    fresh, kept = new_rows(obs, cursor)
    if not fresh or not counts_aer(obs):
        return [], kept, devices
    events: dict[KernelEventKind, list[KernelEvent]] = defaultdict(list)
    outcomes: dict[str, list[dict[str, object]]] = defaultdict(list)
    for row in fresh:
        kind = aer_kind(row)
        if kind is None or not row.dev_name:
            continue
        if kind is K.pcie_aer_corrected and row.dev_name in counted:
            continue
        if kind is K.pcie_aer_uncorrected:
            types = {short_name(t) for t in row.err_msg.replace(",", "|").split("|") if t.strip()}
            fatal = "non-fatal" not in row.err_type.lower() and "fatal" in row.err_type.lower()
            key = (links or {}).get(row.dev_name, row.dev_name)
            outcomes[key].append(disposition(types, [], fatal=fatal))
        line = f"rasdaemon aer_event {row.id}: {row.dev_name} {row.err_type}: {row.err_msg}"[:1000]
        stamp = ras_timestamp(row.timestamp) if row.timestamp else None
        events[kind].append(KernelEvent(kind=kind, subject=row.dev_name, timestamp=stamp, lines=[line]))
    if not events:
        return [], kept, devices
    found, devices = device_signals(events, devices, now, links=links)
    truncated = obs.rasdaemon.truncated if obs.rasdaemon is not None else 0
    for signal in found:
        signal.detail["source"] = "rasdaemon aer_event"
        if signal.detail.get("kind") == K.pcie_aer_uncorrected.value and outcomes.get(signal.subject):
            signal.detail.update(merge(outcomes[signal.subject]))
        if truncated:
            signal.detail["truncated"] = truncated  # rows the report could not carry: the count is a floor
    return found, kept, devices
