"""What firmware took out of use, from the SEL, and how it meets the inventory check (class 6, lost capacity).

`sel_kind` classifies an entry (remediator/derive/sel.py calls it first). IPMI 2.0 table 42-3, as ipmitool
and FreeIPMI print it:

- Memory (0Ch): 04h Memory Device Disabled, 06h Presence Detected, 07h Configuration Error. A Presence
  Detected *deasserted* is a DIMM that went away; asserted, one that arrived.
- Processor (07h): 00h IERR, 01h Thermal Trip, 02h FRB1/BIST failure, 03h FRB2/Hang in POST failure,
  04h FRB3/Processor startup/init failure, 05h Configuration Error, 06h SM BIOS Uncorrectable CPU-complex
  Error, 07h Presence detected, 08h Processor disabled. IERR, FRB1/BIST, FRB3, the uncorrectable
  CPU-complex error and a disabled processor say the CPU itself failed (`sel_processor_fault`). FRB2 is the
  BIOS's POST watchdog (a hang in POST: firmware, an option ROM, long memory training) and a Configuration
  Error is a CPU mismatch or missing microcode found at POST: `sel_processor_post`, a firmware question,
  not a CPU to pull. Thermal Trip belongs to the heat class.

`fold_sel` gives one ticket per lost part where the SEL and the inventory see the same loss:

- a DIMM: the SEL entry and a DIMM count short in the same report are one ticket, capacity-dimm-missing's
  (it names the slot and serial from the inventory), with the SEL entries in its detail. A DIMM count that
  goes short within SEL_EXPLAINS after the SEL's own ticket is `capacity_explained` (no rule), and a SEL
  entry for a host whose DIMM count was already short is `sel_memory_noted` (no rule).
- a Presence Detected deassertion alone (some BMCs log deasserts around power-off) is a lost DIMM only
  when the inventory confirms it: dmidecode no longer lists a DIMM it listed before. Otherwise
  `sel_memory_noted`; if the DIMM is really gone, the next inventory shows it and capacity-dimm-missing
  has it.
- a CPU: sel-processor-fault's ticket comes first (it drains); CPUs short in the same report or within
  SEL_EXPLAINS after it are `capacity_explained`, part of that ticket.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from checker.schemas import Report, SelEntry
from remediator.derive.capacity import MISSING, CapacityMemory
from remediator.signals import SignalValue

SEL_MEMORY, SEL_PROCESSOR, SEL_POST = "sel_memory_disabled", "sel_processor_fault", "sel_processor_post"
EXPLAINED, SEL_NOTED = "capacity_explained", "sel_memory_noted"
SEL_EXPLAINS = dt.timedelta(days=7)  # our own choice: a ticket for the same loss stays the one ticket a week
MAX_FOLDED = 8

_MEMORY_LOST = ("memory device disabled", "configuration error")
_PROCESSOR_FAILED = ("ierr", "frb1", "frb3", "uncorrectable cpu-complex", "disabled")
_PROCESSOR_POST = ("frb2", "configuration error")


def sel_kind(entry: SelEntry) -> str | None:
    """The lost-capacity signal kind of an entry, or None (see the module's docstring for the offsets)."""
    kind, event = entry.sensor_type.lower(), entry.event.lower()
    if kind == "memory":
        if entry.direction == "deasserted":
            return SEL_MEMORY if "presence detected" in event else None
        return SEL_MEMORY if any(text in event for text in _MEMORY_LOST) else None
    if kind == "processor" and entry.direction != "deasserted":
        if any(text in event for text in _PROCESSOR_POST):
            return SEL_POST
        return SEL_PROCESSOR if any(text in event for text in _PROCESSOR_FAILED) else None
    return None


def presence_only(signal: SignalValue) -> bool:
    events = signal.detail.get("events") or []
    return bool(events) and all("presence detected" in str(e).lower() for e in events)


def dimm_gone(report: Report, previous: CapacityMemory | None) -> bool:
    """dmidecode, in this report, no longer lists a DIMM it listed before."""
    identity = report.observations.identity
    if previous is None or not previous.dimms or identity is None or not identity.dimms:
        return False
    return bool(set(previous.dimms) - {d.locator for d in identity.dimms})


def explain(signal: SignalValue, kept: CapacityMemory | None, now: dt.datetime) -> SignalValue:
    """A DIMM or CPU count short within SEL_EXPLAINS of the SEL's own ticket for it: `capacity_explained`."""
    at = (kept.sel_at if kept is not None else {}).get(signal.subject)
    if signal.kind != MISSING or at is None or not (dt.timedelta(0) <= now - at <= SEL_EXPLAINS):
        return signal
    detail = {**signal.detail, "explained_by": f"the SEL's ticket of {at.isoformat()} ({_rule_of(signal.subject)})"}
    return SignalValue(EXPLAINED, signal.subject, signal.value, detail)


def _rule_of(measure: str) -> str:
    return "sel-memory-disabled" if measure == "dimms" else "sel-processor-fault"


def _folded(signal: SignalValue) -> dict[str, object]:
    keys = ("sensor", "events", "record_ids", "last_timestamp", "raw")
    return {"kind": signal.kind, "subject": signal.subject, **{k: signal.detail.get(k) for k in keys}}


def fold_sel(
    signals: Sequence[SignalValue],
    previous: CapacityMemory | None,
    kept: CapacityMemory | None,
    report: Report,
    *,
    now: dt.datetime,
) -> tuple[list[SignalValue], CapacityMemory | None]:
    """The report's signals with the SEL's and the inventory's findings of one loss made one (module doc)."""
    dimms = next((s for s in signals if s.kind == MISSING and s.subject == "dimms"), None)
    cpu_fault = any(s.kind == SEL_PROCESSOR for s in signals)
    sel_at = dict(kept.sel_at) if kept is not None else {}
    short_before = set(previous.short) if previous is not None else set()
    out: list[SignalValue] = []
    for signal in signals:
        if signal.kind == SEL_MEMORY:
            if dimms is not None:  # one ticket: the inventory's, which names the slot and serial
                folded = dimms.detail.setdefault("sel", [])
                if len(folded) < MAX_FOLDED:
                    folded.append(_folded(signal))
                continue
            why = None
            if "dimms" in short_before:
                why = "the DIMM count was already short: capacity-dimm-missing's ticket has this DIMM"
            elif presence_only(signal) and not dimm_gone(report, previous):
                why = "Presence Detected deasserted, but dmidecode still lists every DIMM it listed: not confirmed"
            if why is not None:
                out.append(SignalValue(SEL_NOTED, signal.subject, signal.value, {**signal.detail, "why": why}))
                continue
            sel_at["dimms"] = now
        elif signal.kind == SEL_PROCESSOR:
            sel_at["cpus"] = now
        elif signal.kind == SEL_POST:  # the ticket's title says which
            signal.detail["event"] = "; ".join(str(e) for e in signal.detail.get("events") or [])[:200]
        elif signal.kind == MISSING and signal.subject == "cpus" and cpu_fault:
            detail = {**signal.detail, "explained_by": "sel_processor_fault in the same report (sel-processor-fault)"}
            out.append(SignalValue(EXPLAINED, signal.subject, signal.value, detail))
            continue
        elif signal.kind == MISSING and signal.subject in ("dimms", "cpus"):
            signal = explain(signal, CapacityMemory(sel_at=sel_at), now)
        out.append(signal)
    short = sorted({s.subject for s in out if s.kind in (MISSING, EXPLAINED)})
    if kept is None and not sel_at and not short:
        return out, kept
    base = kept if kept is not None else CapacityMemory()
    sel_at = {k: v for k, v in sel_at.items() if now - v <= SEL_EXPLAINS}
    return out, base.model_copy(update={"sel_at": sel_at, "short": short})
