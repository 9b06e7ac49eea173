"""CXL memory devices' RAS records (the report's `cxl` section: rasdaemon's cxl_* tables, new rows
only), one signal per kind and memory device. The subject is the device's serial (`0x5a17c0de`: the
kernel's memdev name, mem0, can change across a reboot or a hot-plug), else its memdev; the detail
names it (memdev, serial, PCI function, firmware) so a ticket can.

- `cxl_poison`: poison list entries (cxl_poison_event, trace type `List`) new to the host. The
  kernel lists every entry again each time the list is read (`cxl list --media-errors`, a reboot,
  the trigger_poison_list file), so the (serial, DPA) pairs seen are kept (CxlMemory) and only new
  ones count; a `Clear` record forgets its pair. `Inject` and `Clear` records are tests and
  repairs, never poison (the kernel traces them with source Unknown: the trace type tells them), and
  a listed entry whose source is `Injected` is a test too: both counted in the detail (`injected`).
  `external` when every new entry's source is External: the host wrote data it had read poisoned
  elsewhere, the device is fine. `overflowed` when a list record says Overflow: the device's list
  was full, some poison is not listed.
- `cxl_media_error`: General Media and DRAM event records. `uncorrectable` when any had the Memory
  Event Descriptor's Uncorrectable Event bit and was no host-injected test (transaction Host Inject
  Poison: `injected` counts those); `service_requested` when the device itself asks for service: a
  corrected-error threshold crossed (descriptor bit 1) or the record flags Maintenance Needed /
  Hardware Replacement Needed / Permanent Condition.
- `cxl_health`: Memory Module records (cxl_memory_module_event): remediator/derive/cxl_health.py.
- `cxl_aer`: errors of the device's CXL RAS capability (cxl_aer_ue_event, cxl_aer_ce_event):
  `uncorrectable` for the UE table, the status bits by name; `device_error` when an uncorrectable
  status bit is the device's own (memory or cache data, address or byte-enable parity or ECC,
  Component Specific), not its link's (Received Unrecognized Encoding, Receiver Overflow, REINIT
  Threshold, IDE Tx/Rx) or its peer's (Received Poison From Peer: the sender's error).
Values are the records' count in the report (new poisoned addresses for `cxl_poison`). Nothing on the
agent's first read (`first_sight`).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from checker.schemas import CxlEvent, CxlRasState
from remediator.derive.cxl_health import health_signal
from remediator.signals import SignalValue

MAX_LISTED = 8
MAX_POISON_KEPT = 256  # (device, DPA) pairs remembered per host; the oldest are forgotten first
MAX_FUNCTIONS_KEPT = 32  # PCI function -> serial pairs remembered per host, the newest kept
INJECT_TRANSACTION = "Host Inject Poison"
# CXL RAS Uncorrectable Error Status bits that are the device's own data path (CXL 3.1 8.2.4.17.1):
# cache and memory data/address/byte-enable parity and ECC (0-7), Component Specific (14)
DEVICE_UE_ERRORS = frozenset(
    {
        "Cache Data Parity Error",
        "Cache Address Parity Error",
        "Cache Byte Enable Parity Error",
        "Cache Data ECC Error",
        "Memory Data Parity Error",
        "Memory Address Parity Error",
        "Memory Byte Enable Parity Error",
        "Memory Data ECC Error",
        "Component Specific Error",
    }
)
SERVICE_FLAGS = frozenset({"Maintenance Needed", "Hardware Replacement Needed", "Permanent Condition"})
MEDIA_TABLES = frozenset({"cxl_general_media_event", "cxl_dram_event"})
AER_TABLES = frozenset({"cxl_aer_ue_event", "cxl_aer_ce_event"})
FAMILIES = {
    "cxl_poison_event": "poison",
    "cxl_aer_ue_event": "aer",
    "cxl_aer_ce_event": "aer",
    "cxl_memory_module_event": "health",  # remediator/derive/cxl_health.py
}


class CxlMemory(BaseModel):
    """The poisoned addresses already counted, per device: the kernel lists them again on every read."""

    model_config = ConfigDict(extra="ignore")

    poison: list[str] = Field(
        default_factory=list, max_length=MAX_POISON_KEPT, description="'<serial or memdev>@<dpa>', oldest first."
    )
    functions: dict[str, str] = Field(
        default_factory=dict,
        max_length=MAX_FUNCTIONS_KEPT,
        description="PCI function -> serial of the devices sysfs listed: names a device the kernel log names "
        "after it fell off its link and sysfs no longer lists it (remediator/derive/cxl_kernel.py).",
    )
    boot: str | None = Field(None, max_length=64, description="The boot `media_normal` is of.")
    media_normal: list[str] = Field(
        default_factory=list,
        max_length=MAX_FUNCTIONS_KEPT,
        description="Devices whose newest Memory Module record in this boot said media Normal: their memory came "
        "up, so a later Not Ready / All Data Lost lost memory in use (remediator/derive/cxl_health.py).",
    )
    temperatures: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        max_length=MAX_FUNCTIONS_KEPT,
        description="Each device's newest temperature from its Memory Module records: a hot device's siblings "
        "rarely write records (note_siblings).",
    )


def remember_functions(state: CxlRasState, previous: CxlMemory | None) -> CxlMemory | None:
    """The memory with this report's sysfs PCI-function-to-serial pairs added (newest last, bounded)."""
    pairs = {d.host: f"0x{d.serial:x}" for d in state.devices if d.host and d.serial is not None}
    if not pairs:
        return previous
    kept = {k: v for k, v in (previous.functions if previous else {}).items() if k not in pairs}
    merged = list({**kept, **pairs}.items())[-MAX_FUNCTIONS_KEPT:]
    base = previous if previous is not None else CxlMemory()
    return base.model_copy(update={"functions": dict(merged)})


def _hex(value: int | None) -> str | None:
    return f"0x{value:x}" if value is not None else None


def device_key(event: CxlEvent, serials: dict[str, int | None] | None = None) -> str:
    """The device a record is of: its serial (stable; the record's, else sysfs's for its memdev), else
    its memdev name."""
    serial = event.serial if event.serial is not None else (serials or {}).get(event.memdev)
    return _hex(serial) or event.memdev


def _poison_key(subject: str, event: CxlEvent) -> str:
    return f"{subject}@{_hex(event.dpa)}"


def _device(state: CxlRasState, events: list[CxlEvent]) -> dict[str, Any]:
    last = events[-1]
    sysfs = next((d for d in state.devices if d.memdev == last.memdev), None)
    serial = last.serial if last.serial is not None else (sysfs.serial if sysfs else None)
    return {
        "memdev": last.memdev,
        "serial": _hex(serial),
        "host": last.host,
        "firmware": sysfs.firmware if sysfs else None,
        "records": len(events),
        "first_id": events[0].id,
        "last_id": last.id,
        "last_timestamp": last.timestamp,
        "tables": sorted({e.table for e in events}),
    }


def _where(events: list[CxlEvent]) -> dict[str, Any]:
    """Where on the device the newest record with an address was: DPA, HPA, region, channel, rank."""
    located = [e for e in events if e.dpa is not None] or events
    last = located[-1]
    return {
        "dpa": _hex(last.dpa),
        "hpa": _hex(last.hpa),
        "region": last.region,
        "channel": last.channel,
        "rank": last.rank,
        "dpas": list(dict.fromkeys(_hex(e.dpa) for e in located if e.dpa is not None))[-MAX_LISTED:],
    }


def _media_came_up(subject: str, events: list[CxlEvent], normal: set[str]) -> bool:
    """Whether the device's memory was up in this boot before its newest Memory Module record: an earlier
    record (this report's, or one remembered from this boot) said media Normal. A device reports Not
    Ready while it starts and All Data Lost after a dirty shutdown of persistent memory, both before any
    memory of it was in use (CXL 3.1 8.2.9.9.3.1 Media Status; the record is written on a change)."""
    earlier = [e.health.media_status for e in events[:-1] if e.health is not None]
    return "Normal" in earlier or subject in normal


def _remember_health(memory: CxlMemory, signals: list[SignalValue]) -> CxlMemory:
    normal = list(memory.media_normal)
    temperatures = dict(memory.temperatures)
    for signal in signals:
        if signal.kind != "cxl_health":
            continue
        media = signal.detail.get("media_status")
        if media == "Normal" and signal.subject not in normal:
            normal.append(signal.subject)
        elif media not in (None, "Normal") and signal.subject in normal:
            normal.remove(signal.subject)
        if signal.detail.get("temperature_status") in ("Normal", "Warning", "Critical"):
            temperatures.pop(signal.subject, None)
            keys = ("memdev", "serial", "temperature_c", "temperature_status")
            temperatures[signal.subject] = {k: signal.detail.get(k) for k in keys}
    kept = dict(list(temperatures.items())[-MAX_FUNCTIONS_KEPT:])
    return memory.model_copy(update={"media_normal": normal[-MAX_FUNCTIONS_KEPT:], "temperatures": kept})


def cxl_signals(
    state: CxlRasState | None, previous: CxlMemory | None = None, *, boot_id: str | None = None
) -> tuple[list[SignalValue], CxlMemory | None]:
    """`boot_id`: the report's boot; which devices' media came up (`media_normal`) is per boot."""
    if state is None:
        return [], previous
    previous = remember_functions(state, previous)
    if boot_id is not None and (previous is None or previous.boot != boot_id):
        previous = (previous or CxlMemory()).model_copy(update={"boot": boot_id, "media_normal": []})
    if state.first_sight or not state.events:
        return [], previous
    known = list(previous.poison) if previous is not None else []
    serials = {d.memdev: d.serial for d in state.devices}
    by_device: dict[tuple[str, str], list[CxlEvent]] = defaultdict(list)
    for event in state.events:
        family = FAMILIES.get(event.table, "media")
        by_device[(family, device_key(event, serials))].append(event)
    signals: list[SignalValue] = []
    for (family, subject), events in sorted(by_device.items()):
        detail = _device(state, events)
        if family == "poison":
            signal = _poison_signal(subject, events, detail, known)
        elif family == "media":
            signal = _media_signal(subject, events, detail)
        elif family == "health":
            normal = set(previous.media_normal) if previous is not None else set()
            signal = health_signal(subject, events, detail, in_use=_media_came_up(subject, events, normal))
        else:
            signal = _aer_signal(subject, events, detail)
        if signal is not None:
            signals.append(signal)
    remembered = previous.temperatures if previous is not None else {}
    note_siblings(signals, state, remembered)
    memory = (previous or CxlMemory()).model_copy(update={"poison": known[-MAX_POISON_KEPT:]})
    return signals, _remember_health(memory, signals)


def note_siblings(
    signals: list[SignalValue], state: CxlRasState, remembered: dict[str, dict[str, Any]] | None = None
) -> None:
    """A hot device's health signal gets the other CXL devices' latest temperatures and the candidates
    for its heat: one hot device beside cool siblings points at itself or its slot, all of them hot at
    the airflow (cxl-health-temperature). Cool devices rarely write a Memory Module record (it is written
    on a change), so a sibling's temperature is its record in this report, else the newest remembered
    (`remembered`, CxlMemory.temperatures), else said unknown: the airflow leads only when a sibling is
    known hot."""
    health = [s for s in signals if s.kind == "cxl_health"]
    keys = ("memdev", "serial", "temperature_c", "temperature_status")
    for signal in health:
        if not signal.detail.get("overheating"):
            continue
        others = {o.subject: {k: o.detail.get(k) for k in keys} for o in health if o is not signal}
        for serial, reading in (remembered or {}).items():
            if serial != signal.subject:
                others.setdefault(serial, {**reading, "remembered": True})
        for listed in state.devices:
            serial = _hex(listed.serial) or listed.memdev
            if listed.memdev != signal.detail.get("memdev") and serial != signal.subject and serial not in others:
                others[serial] = {"memdev": listed.memdev, "serial": _hex(listed.serial), "temperature_c": None}
                others[serial]["temperature_status"] = "unknown (no Memory Module record of it)"
        siblings = list(others.values())
        sysfs = next((d for d in state.devices if d.memdev == signal.detail.get("memdev")), None)
        function = signal.detail.get("host") or (sysfs.host if sysfs else None)
        hot = any(o["temperature_status"] in ("Warning", "Critical") for o in siblings)
        device = f"the device: CXL memory {signal.detail.get('memdev')} (serial {signal.subject}, {function})"
        slot = f"its slot (the PCIe slot of {function}" + (
            f", under port {sysfs.ports[0]})" if sysfs and sysfs.ports else ")"
        )
        airflow = "the host's airflow (fans, inlet: the host's sensors)"
        signal.detail.update(
            siblings=siblings[:MAX_LISTED],
            siblings_hot=hot,
            siblings_unknown=sum(str(o["temperature_status"]).startswith("unknown") for o in siblings),
            candidates=[airflow, device, slot] if hot else [device, slot, airflow],
        )


def _poison_signal(
    subject: str, events: list[CxlEvent], detail: dict[str, Any], known: list[str]
) -> SignalValue | None:
    """New poisoned addresses of one device; `known` (the pairs counted before) is updated in place."""
    new: list[CxlEvent] = []
    relisted = injected = cleared = 0
    for event in events:
        key = _poison_key(subject, event)
        if event.kind == "Poison Clear":
            cleared += 1
            if key in known:
                known.remove(key)
        elif event.kind != "Poison List" or (event.source or "").lower() == "injected":
            injected += 1  # an Inject record, or a listed entry whose source is Injected: a test
        elif event.dpa is None or key in known or any(_poison_key(subject, e) == key for e in new):
            relisted += 1
        else:
            new.append(event)
            known.append(key)
    flags = sorted({f for e in events for f in e.flags})
    detail.update(
        _where(new or events),
        injected=injected,
        relisted=relisted,
        cleared=cleared,
        sources=sorted({e.source or "Unknown" for e in new}),
        external=bool(new) and all((e.source or "").lower() == "external" for e in new),
        list_flags=flags,
        overflowed="Overflow" in flags,
    )
    if not new:
        return None
    return SignalValue("cxl_poison", subject, float(len(new)), detail)


def _media_signal(subject: str, events: list[CxlEvent], detail: dict[str, Any]) -> SignalValue:
    tests = [e for e in events if e.transaction == INJECT_TRANSACTION]
    uncorrectable = [e for e in events if e.uncorrectable and e.transaction != INJECT_TRANSACTION]
    flags = sorted({f for e in events if e.transaction != INJECT_TRANSACTION for f in e.flags})
    threshold = any(e.threshold for e in events)
    detail.update(
        _where(uncorrectable or events),
        uncorrectable=bool(uncorrectable),
        uncorrectable_count=len(uncorrectable),
        corrected_count=len([e for e in events if not e.uncorrectable]),
        injected=len(tests),
        threshold=threshold,
        flags=flags,
        service_requested=threshold or bool(SERVICE_FLAGS & set(flags)),
        kinds=list(dict.fromkeys(e.kind for e in events))[:MAX_LISTED],
        transactions=list(dict.fromkeys(e.transaction for e in events if e.transaction))[:MAX_LISTED],
        log=events[-1].log,
    )
    return SignalValue("cxl_media_error", subject, float(len(events)), detail)


def _aer_signal(subject: str, events: list[CxlEvent], detail: dict[str, Any]) -> SignalValue:
    uncorrectable = [e for e in events if e.uncorrectable]
    own = [e for e in uncorrectable if DEVICE_UE_ERRORS & set(e.errors)]
    shown = own or uncorrectable or events
    errors = list(dict.fromkeys(x for e in shown for x in e.errors))
    detail.update(
        uncorrectable=bool(uncorrectable),
        uncorrectable_count=len(uncorrectable),
        device_error=bool(own),
        errors=errors[:MAX_LISTED],
        error=shown[-1].kind,
        link_errors=sorted({x for e in uncorrectable for x in e.errors} - DEVICE_UE_ERRORS)[:MAX_LISTED],
        pcie_drain=False,  # True: an unrecovered PCIe error of its function came to it (cxl_kernel.fold_memdev_aer)
    )
    return SignalValue("cxl_aer", subject, float(len(events)), detail)


def cxl_part(subject: str, observations: dict[str, Any], details: list[dict[str, Any]]) -> dict[str, Any]:
    """The CXL memory device for a ticket (remediator/evidence.py): its serial, PCI function and firmware
    from sysfs and its newest records, and where on it the errors were. The subject is its serial
    (else its memdev name, from records without one)."""
    # a group of devices down below one port is the port's (cxl_down.group_under_ports)
    signal: dict[str, Any] = next(
        (d for d in details if subject in (d.get("serial"), d.get("memdev"), d.get("port"))), {}
    )
    memdev = signal.get("memdev") or subject
    section = observations.get("cxl") or {}
    devices = section.get("devices") or []
    sysfs: dict[str, Any] = next(
        (d for d in devices if isinstance(d.get("serial"), int) and _hex(d["serial"]) == subject),
        next((d for d in devices if d.get("memdev") == memdev), {}),
    )
    memdev = sysfs.get("memdev") or memdev
    serial = sysfs.get("serial")
    return {
        "id": subject,
        "memdev": memdev,
        "serial": _hex(serial) if isinstance(serial, int) else signal.get("serial"),
        "host": signal.get("host") or sysfs.get("host"),
        "firmware": sysfs.get("firmware") or signal.get("firmware"),
        "ram_bytes": sysfs.get("ram_bytes"),
        "vendor": None,
        "model": None,
        "where": {k: signal.get(k) for k in ("dpa", "hpa", "region", "channel", "rank", "dpas") if k in signal},
        # where the fault may be, most likely first (the device, its link, slot, port; or its airflow), and
        # the other devices' temperatures: from the signal (cxl_down.py candidates, note_siblings)
        "candidates": list(signal.get("candidates") or []),
        "siblings": list(signal.get("siblings") or []),
        "component_id": signal.get("component_id"),
        "component_id_note": signal.get("component_id_note"),
    }


def cxl_functions(subject: str, observations: dict[str, Any]) -> set[str]:
    """The PCI functions a CXL part's subject (its serial, else memdev, else PCI address) stands for,
    from the report's sysfs devices: what the kernel log's CXL lines name (remediator/evidence.py)."""
    devices = (observations.get("cxl") or {}).get("devices") or []
    found = {subject}
    for device in devices:
        serial = device.get("serial")
        names = (_hex(serial) if isinstance(serial, int) else None, device.get("memdev"))
        # a port's subject (cxl_down.group_under_ports) stands for every function below it
        if (subject in names or subject in (device.get("ports") or [])) and device.get("host"):
            found.add(str(device["host"]))
    return found
