"""A report that arrives after a newer one of its host: what only it carries, counted once.

Reports reach the service at least once but not always in order: an ingester killed while it
holds a host's report leaves it pending until another claims it, and by then the host's next
report may be stored; two ingesters can commit one host's reports in either order. A late
report's counters and snapshots (EDAC counts, interrupts, SMART, firmware, sensors) are older
than what the newer report said, so they derive nothing (rates never run backwards). But the
rows the agent read past a cursor it has since moved — kernel-log events, SEL entries,
rasdaemon's mc_event, aer_event and mce_record rows — are in no other report.

So the deriver keeps, per id space, the *gaps*: ids below the space's cursor that no derived
report carried (a report whose first new id is past the cursor + 1 leaves one). A late report's
rows whose ids lie in a gap are counted, through the same derivers as on time, into the same
windows, and the ids it covered leave the gap: a late report delivered twice counts nothing the
second time, and a row never reaches a count twice. Rows outside every gap (already counted, or
from before a cleared log, a recreated database or another boot whose gaps were dropped) are
not counted. mcelog's records carry no id: a late one is counted when it is within the hour before
the newest one counted and its key (time and content) is not among those already counted.

Pure, like the rest of remediator.derive; the caller stores the report and evaluates the rules
whose signals this yields.
"""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any

from checker.schemas import Report, SelState, utc
from remediator.derive.aer import aer_signals, counts_aer
from remediator.derive.core import Derived
from remediator.derive.gaps import KLOG, fill, inside
from remediator.derive.kernel import kernel_signals
from remediator.derive.mce import MCELOG, mce_signals
from remediator.derive.memory import KernelMemory, MceMemory, RasMemory, SelMemory, load_memory
from remediator.derive.pcie import counted_bdfs, link_keys
from remediator.derive.rasdaemon import ras_signals
from remediator.derive.sel import sel_signals
from remediator.signals import SignalValue


def derive_late(report: Report, memory: dict[str, Any]) -> Derived:
    """Signals from the rows of a late report that fall in the gaps, and the memory with them counted."""
    previous = load_memory(memory)
    logged = previous.mce is not None and previous.mce.logged
    if previous.at is None or not (previous.gaps or logged):
        return Derived([], copy.deepcopy(memory), False)
    gaps = {key: list(kept) for key, kept in (previous.gaps or {}).items()}
    now = utc(report.captured_at)
    since = now - dt.timedelta(seconds=report.interval_s)  # rates over the late report's own cycle
    obs = report.observations
    signals: list[SignalValue] = []
    klog, sel = previous.klog, previous.sel

    if (state := obs.kernel_log) is not None and (boot := state.boot_id or report.host.boot_id):
        key = KLOG + boot
        events = [e for e in state.events if e.seq is not None and inside(gaps.get(key), e.seq)]
        if events:
            view = state.model_copy(update={"events": events, "last_seq": None, "lost_records": 0})
            base = KernelMemory(
                boot=boot,
                counts=klog.counts if klog else {},
                devices=klog.devices if klog else {},
                times=klog.times if klog else {},
            )
            found, counted = kernel_signals(
                view,
                base,
                now=now,
                boot_id=boot,
                aer_elsewhere=counts_aer(obs),
                aer_counted=counted_bdfs(obs, previous.pcie),  # the counters counted these already
                aer_links=link_keys(obs.pcie),
            )
            signals += found
            if counted is not None:
                klog = (klog or KernelMemory()).model_copy(
                    update={"counts": counted.counts, "devices": counted.devices, "times": counted.times}
                )
        fill(gaps, key, [e.seq for e in events if e.seq is not None], state.last_seq, state.first_seq)

    if (log := obs.sel) is not None and sel is not None:
        entries = [e for e in log.entries if inside(gaps.get("sel"), e.record_id)]
        if entries:
            base_sel = SelMemory(last=min(e.record_id for e in entries) - 1, power_at=sel.power_at, sensors=sel.sensors)
            found, counted_sel = sel_signals(SelState(entries=entries), base_sel, now=now)
            signals += found
            if counted_sel is not None:
                power = max((t for t in (sel.power_at, counted_sel.power_at) if t is not None), default=None)
                cleared = any(s.kind == "sel_cleared" for s in found)  # a late clear does not reset today's watch
                sel = sel.model_copy(
                    update={"power_at": power, "sensors": sel.sensors if cleared else counted_sel.sensors}
                )
        fill(gaps, "sel", (e.record_id for e in entries), log.last_record_id)

    if (ras := obs.rasdaemon) is not None:
        rows = [e for e in ras.memory_events if inside(gaps.get("mc_event"), e.id)]
        if rows:
            view_ras = ras.model_copy(update={"memory_events": rows, "last_id": None, "last_ids": {}, "truncated": 0})
            found, _ = ras_signals(view_ras, RasMemory(at=since, last=min(e.id for e in rows) - 1), now=now)
            signals += found
        fill(gaps, "mc_event", (e.id for e in rows), ras.last_ids.get("mc_event", ras.last_id))
        aer_rows = [e for e in ras.aer_events if inside(gaps.get("aer_event"), e.id)]
        if aer_rows and counts_aer(obs):
            view_obs = obs.model_copy(
                update={
                    "rasdaemon": ras.model_copy(
                        update={"aer_events": aer_rows, "last_ids": {"aer_event": max(e.id for e in aer_rows)}}
                    )
                }
            )
            devices = klog.devices if klog is not None else {}
            found, _, devices = aer_signals(
                view_obs,
                min(e.id for e in aer_rows) - 1,
                devices,
                now=now,
                counted=counted_bdfs(obs, previous.pcie),
                links=link_keys(obs.pcie),
            )
            signals += found
            if found:
                klog = (klog or KernelMemory()).model_copy(update={"devices": devices})
        fill(gaps, "aer_event", (e.id for e in aer_rows), ras.last_ids.get("aer_event"))

    numbered = [
        r
        for r in (ras.mce_records if ras is not None and ras.mce_records is not None else obs.mce or [])
        if r.id is not None and inside(gaps.get("mce_record"), r.id)
    ]
    if numbered:
        view_mce = obs.model_copy(update={"rasdaemon": None, "mce": numbered})
        base_mce = MceMemory(at=since, last=min(r.id for r in numbered if r.id is not None) - 1)
        found, _ = mce_signals(view_mce, "rasdaemon", base_mce, now=now)
        signals += found
        cursor = ras.last_ids.get("mce_record") if ras is not None else None
        fill(gaps, "mce_record", (r.id for r in numbered if r.id is not None), cursor)

    mce = previous.mce
    mcelog = [r for r in obs.mce or [] if r.id is None]
    if mcelog and mce is not None and mce.logged and (ras is None or ras.mce_records is None):
        # mcelog's records have no id: the keys of those counted in the last hour tell the new ones
        view_log = obs.model_copy(update={"rasdaemon": None, "mce": mcelog})
        found, counted_log = mce_signals(view_log, MCELOG, mce.model_copy(update={"at": since}), now=now)
        signals += found
        if counted_log is not None:
            tracks = ("since", "keys", "ue_since", "ue_keys")
            mce = mce.model_copy(update={k: getattr(counted_log, k) for k in tracks})

    for signal in signals:
        signal.detail["late"] = True  # counted from a report that arrived after a newer one
    new = previous.model_copy(update={"klog": klog, "sel": sel, "mce": mce, "gaps": gaps or None}).dump()
    return Derived(signals, new, new != memory)
