"""gpu_xid and gpu_sxid: NVIDIA Xid and SXid errors from the kernel log, per GPU (or NVSwitch) and per action.

Each Xid line is classified by its code through NVIDIA's Xid catalog (remediator/xid_catalog.py) into the
fleet's action class; the fallen-off-the-bus message without an Xid 79 line counts as 79. A GPU prints
some Xids once per channel (94, 45: eight lines for one fault), so lines of the same code on the same GPU
within INCIDENT_S of each other are one incident; `gpu_xid`'s value is the incidents of that action class
on that GPU within a day, emitted on a report that brings new lines (as kernel_event_count does). The
same sequence-number cursor as remediator/derive/kernel.py keeps a redelivered line from counting twice.

Subject: `gpu<index> <BDF>` as nvidia-smi names the GPU (remediator/gpu_parts.py) when the report's `gpu`
section has the GPU at that address, else its address in the kernel's form (0000:9b:00.0) — a GPU that fell
off the bus is not in nvidia-smi's answer. Detail: bdf, index, uuid, serial, product (nvidia-smi's, else what
the driver printed before its first Xid), action, code, codes, mnemonic, meaning, nvidia_action, pid,
process, pci_id, fallen_off_bus, resettable (nvidia-smi lists the GPU, so reset_gpu can name it by index: the
reset rules match only True, and a GPU without an index gets a ticket before anything is drained), window_s,
new, incidents_new, lines. Xid 154 takes the action its line names (xid_catalog.classify_line).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from checker.parsers.xid import GPU_KINDS, XidRecord, identity, sxid_record, xid_record
from checker.schemas import Gpu, GpuState, KernelEvent, KernelEventKind, KernelLogState
from remediator.derive.kernel import add_to_bucket, live_buckets
from remediator.derive.memory import KernelMemory
from remediator.derive.xid_memory import MAX_GPUS, MAX_KEYS, Bucket, XidMemory
from remediator.gpu_parts import gpu_subject, pci_address, same_device
from remediator.signals import SignalValue
from remediator.xid_catalog import XidCode, classify_line

DAY_S = 24 * 3600
INCIDENT_S = 10.0  # the driver's per-channel repeats of one fault come within seconds (4 s apart in the corpus)
SAMPLE_LINES = 5


def fresh_events(
    state: KernelLogState,
    klog: KernelMemory | None,
    boot_id: str | None,
    kinds: frozenset[KernelEventKind] = GPU_KINDS,
) -> list[KernelEvent]:
    """The events of `kinds` (GPU's by default; CXL's for derive/cxl_kernel.py) not counted before: the
    kernel deriver's cursor, read before it moves."""
    boot = state.boot_id or boot_id
    last_seq = klog.seq if klog is not None and boot is not None and klog.boot == boot else None
    return [
        e
        for e in state.events
        if e.kind in kinds and not (e.seq is not None and last_seq is not None and e.seq <= last_seq)
    ]


def _smi_gpu(bdf: str, gpus: GpuState | None) -> Gpu | None:
    address = pci_address(bdf)
    return next((g for g in (gpus.gpus if gpus else []) if same_device(address, pci_address(g.bdf))), None)


def _names(bdf: str, gpus: GpuState | None, known: Mapping[str, tuple[str | None, str | None]]) -> dict[str, Any]:
    """What names the GPU: nvidia-smi's answer where it has the GPU, else the driver's own lines."""
    uuid, serial = known.get(bdf, (None, None))
    gpu = _smi_gpu(bdf, gpus)
    if gpu is None:
        return {"subject": bdf, "bdf": bdf, "index": None, "uuid": uuid, "serial": serial, "product": None}
    return {
        "subject": gpu_subject(gpu.index, gpu.bdf),
        "bdf": gpu.bdf,
        "index": gpu.index,
        "uuid": gpu.uuid or uuid,
        "serial": gpu.serial or serial,
        "product": gpu.product,
    }


def _trim(mapping: dict[str, Any], cap: int) -> dict[str, Any]:
    return dict(list(mapping.items())[-cap:])


def xid_signals(
    state: KernelLogState | None,
    klog: KernelMemory | None,
    previous: XidMemory | None,
    *,
    now: dt.datetime,
    boot_id: str | None,
    gpus: GpuState | None = None,
) -> tuple[list[SignalValue], XidMemory | None]:
    if state is None:
        return [], previous
    events = fresh_events(state, klog, boot_id)
    if not events and previous is None:
        return [], None
    prev = previous or XidMemory()
    now_s = now.timestamp()
    known = dict(prev.gpus)
    counts = {k: live for k, b in prev.counts.items() if (live := live_buckets(b, now_s, DAY_S))}
    sxids = {k: live for k, b in prev.sxid.items() if (live := live_buckets(b, now_s, DAY_S))}
    last = {k: at for k, at in prev.last.items() if at > now_s - DAY_S}

    groups: dict[tuple[str, str], list[tuple[XidRecord, KernelEvent, XidCode, bool]]] = {}
    switches: dict[tuple[str, str], list[KernelEvent]] = {}
    for event in events:
        at = min(event.timestamp or now, now).timestamp()
        if (named := identity(event)) is not None:
            before = known.pop(named.bdf, (None, None))
            known[named.bdf] = (named.uuid or before[0], named.serial or before[1])
            continue
        if at <= now_s - DAY_S:
            continue  # a replayed ring buffer's old news
        if (record := xid_record(event)) is not None:
            row = classify_line(record.code, record.text)
            incident = f"{record.bdf} {record.code if record.code is not None else 79}"
            new = incident not in last or abs(at - last[incident]) > INCIDENT_S
            last.pop(incident, None)
            last[incident] = at
            key = f"{record.bdf} {row.action}"
            if new:
                counts[key] = add_to_bucket(counts.pop(key, []), at, DAY_S)
            groups.setdefault((record.bdf, row.action), []).append((record, event, row, new))
        elif (sxid := sxid_record(event)) is not None:
            key = f"{sxid.bdf} {'fatal' if sxid.fatal else 'non-fatal'}"
            sxids[key] = add_to_bucket(sxids.pop(key, []), at, DAY_S)
            switches.setdefault((sxid.bdf, key.split(" ", 1)[1]), []).append(event)

    signals = [_xid_signal(bdf, action, group, counts, gpus, known, now_s) for (bdf, action), group in groups.items()]
    signals += [_sxid_signal(bdf, severity, found, sxids, now_s) for (bdf, severity), found in switches.items()]
    memory = XidMemory(
        gpus=_trim(known, MAX_GPUS),
        counts=_trim(counts, MAX_KEYS),
        sxid=_trim(sxids, MAX_KEYS),
        last=_trim(last, MAX_KEYS),
    )
    return signals, memory


def _window_count(buckets: list[Bucket] | None, now_s: float) -> float:
    return float(sum(n for _, n in live_buckets(buckets or [], now_s, DAY_S)))


def _xid_signal(
    bdf: str,
    action: str,
    group: list[tuple[XidRecord, KernelEvent, XidCode, bool]],
    counts: dict[str, list[Bucket]],
    gpus: GpuState | None,
    known: Mapping[str, tuple[str | None, str | None]],
    now_s: float,
) -> SignalValue:
    record, event, row, _ = group[-1]
    named = _names(bdf, gpus, known)
    owner = next((r for r, *_ in reversed(group) if r.pid is not None or r.process), None)
    codes = sorted({r.code if r.code is not None else 79 for r, *_ in group})
    detail: dict[str, Any] = {
        **{k: v for k, v in named.items() if k != "subject"},
        "action": action,
        "code": record.code,
        "codes": codes,
        "mnemonic": row.mnemonic,
        "meaning": row.meaning,
        "nvidia_action": row.bucket,
        "text": record.text[:200],
        "pid": owner.pid if owner else None,
        "process": owner.process if owner else None,
        "pci_id": next((r.pci_id for r, *_ in group if r.pci_id), None),
        "fallen_off_bus": any(r.fallen_off_bus for r, *_ in group),
        "resettable": named["index"] is not None,  # reset_gpu needs nvidia-smi's index: refused at planning if not
        "window_s": DAY_S,
        "new": len(group),
        "incidents_new": sum(1 for *_, new in group if new),
        "lines": list(event.lines[:SAMPLE_LINES]),
    }
    value = max(1.0, _window_count(counts.get(f"{bdf} {action}"), now_s))
    return SignalValue("gpu_xid", str(named["subject"]), value, detail)


def _sxid_signal(
    bdf: str, severity: str, found: list[KernelEvent], sxids: dict[str, list[Bucket]], now_s: float
) -> SignalValue:
    records = [r for e in found if (r := sxid_record(e)) is not None]
    newest = records[-1]
    detail: dict[str, Any] = {
        "bdf": bdf,
        "switch": newest.switch,
        "severity": severity,
        "fatal": severity == "fatal",  # rules match True/False: "fatal" is a substring of "non-fatal"
        "code": newest.code,
        "codes": sorted({r.code for r in records}),
        "text": newest.text[:200],
        "window_s": DAY_S,
        "new": len(records),
        "lines": list(found[-1].lines[:SAMPLE_LINES]),
    }
    value = max(1.0, _window_count(sxids.get(f"{bdf} {severity}"), now_s))
    return SignalValue("gpu_sxid", bdf, value, detail)


def nvswitch_part(subject: str, detail: Mapping[str, Any] | None) -> dict[str, Any]:
    """The ticket's part for an NVSwitch (part_type `nvswitch`): its address and the driver's name for it. The
    kernel log gives no serial; the baseboard's is the system's (the ticket's host section)."""
    given = dict(detail or {})
    return {
        "id": subject,
        "bdf": given.get("bdf") or subject,
        "switch": given.get("switch"),
        "vendor": "NVIDIA",
        "model": "NVSwitch",
        "serial": None,
        "sxid_codes": given.get("codes"),
    }
