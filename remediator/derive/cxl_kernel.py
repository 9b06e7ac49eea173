"""CXL errors from the kernel log (checker/parsers/cxl_log.py), for hosts whose rasdaemon records none,
one signal per device and kind, named as the rasdaemon path names them (the serial from sysfs, else the
memdev, else the PCI address) so the same rules and the same ticket part apply.

- A firmware-first CXL Protocol Error record (`cxl_protocol_error`) carries the RAS capability's
  status and mask registers (cper_cxl.c prints cxl_ras_uncor_status/_mask and cxl_ras_cor_status/_mask).
  Only unmasked bits count, as the kernel traces them (status & ~mask: drivers/cxl/core/ras.c
  cxl_cper_trace_corr_prot_err / cxl_cper_trace_uncorr_prot_err). A record whose agent is a memory
  device (agent types 0 RCD, 2 CXL Device, 3 LD, 4 FM-managed LD; UEFI 2.10 N.2.13) becomes the same
  `cxl_aer` signal rasdaemon's cxl_aer_ue/ce rows give, its bits decoded by the same table
  (checker/parsers/cxl.py UE_BITS, CE_BITS), `device_error` by the same split. A record of a port
  (1 RCH Downstream Port, 5 Root Port, 6 Downstream Switch Port, 7 Upstream Switch Port) is the port's
  or its link's, never a device's data: `cxl_port_error`, `device_error` always false, naming the port
  and, as candidates, the memdevs below it (their sysfs parents, CxlMemdev.ports).
- A record without agent_address is named by its device serial (lower_dw/upper_dw, the PCIe DSN).
  When sysfs no longer lists a device the kernel names (it fell off its link), the PCI-address-to-
  serial map of earlier reports (CxlMemory.functions) still names it.
- The kernel's own messages: remediator/derive/cxl_down.py (`cxl_device_down`, with `phase` and
  `memory_lost`).

Counted once: the kernel's firmware-first handler also traces a CPER protocol error as
cxl_aer_*_error (Linux 6.15's cxl_cper_handle_prot_err), which rasdaemon stores; the frozen-state
message follows cxl_handle_ras's trace of the same error. So when this report's rasdaemon rows already
gave a `cxl_aer` signal for the device at least as severe (uncorrectable, then device_error), the
kernel's record adds to its detail (`kernel_records`) instead of a second signal; a more severe kernel
record (cxl_cper_handle_prot_err returns without tracing when the PCI driver is unbound) upgrades it.
A `cxl_device_down` folds into an uncorrectable device-error `cxl_aer` of the device (that rule drains
already). Both sources read up to the same moment each cycle, so one error lands in one report; a
cycle boundary between the trace and the message can still split them. Events already counted (by
/dev/kmsg sequence, within the boot) are skipped, as the kernel deriver does.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

from checker.parsers.cxl import CE_BITS, UE_BITS
from checker.parsers.cxl_log import protocol_serial
from checker.schemas import CxlMemdev, CxlRasState, KernelEvent, KernelEventKind, KernelLogState
from remediator.derive.aer_disposition import DRAIN
from remediator.derive.cxl import DEVICE_UE_ERRORS, MAX_LISTED
from remediator.derive.cxl_down import AER_KINDS, down_signal, group_under_ports
from remediator.derive.memory import KernelMemory
from remediator.derive.xid import fresh_events
from remediator.signals import SignalValue

K = KernelEventKind
CXL_KINDS = frozenset({K.cxl_protocol_error, K.cxl_mem_disabled, K.cxl_device_failed, K.cxl_mem_resumed})
_REGISTER = re.compile(r"cxl_ras_(?P<which>uncor|cor)_(?P<reg>status|mask): (?P<value>0x[0-9a-fA-F]{1,8})")
_MEMDEV = re.compile(r": (?P<memdev>mem\d{1,9}): ")
_AGENT_TYPE = re.compile(r"agent_type: (?P<number>\d{1,3}), (?P<type>.+?)\s*$")
# CPER CXL agent types that are ports (cper_cxl.c: RCH_DP 1, RP 5, DSP 6, USP 7)
PORT_AGENTS = frozenset({1, 5, 6, 7})
# what disposition a PCIe uncorrected count of a memdev's function gets when a CXL signal of the same
# device in the report already tickets it (pcie-aer-uncorrected matches neither this nor its others)
FOLDED = "cxl_memory"


def _bits(value: int, names: dict[int, str]) -> list[str]:
    known = sum(1 << b for b in names)
    return [name for bit, name in names.items() if value & (1 << bit)] + (
        [f"0x{value & ~known:x}"] if value & ~known else []
    )


def unmasked(lines: list[str]) -> tuple[int, int]:
    """The uncorrectable and correctable status, each with its mask applied (status & ~mask)."""
    found = {("uncor", "status"): 0, ("uncor", "mask"): 0, ("cor", "status"): 0, ("cor", "mask"): 0}
    for line in lines:
        if (m := _REGISTER.search(line)) is not None:
            found[(m.group("which"), m.group("reg"))] |= int(m.group("value"), 16)
    return (
        found[("uncor", "status")] & ~found[("uncor", "mask")],
        found[("cor", "status")] & ~found[("cor", "mask")],
    )


def _agent(event: KernelEvent) -> tuple[int | None, str | None]:
    for line in event.lines:
        if (m := _AGENT_TYPE.search(line)) is not None:
            return int(m.group("number")), m.group("type")
    return None, None


def _hex(value: int | None) -> str | None:
    return f"0x{value:x}" if value is not None else None


def _where(
    event: KernelEvent, devices: list[CxlMemdev], remembered: dict[str, str]
) -> tuple[str, dict[str, Any], list[str]]:
    """The device an event is of, its names (serial: sysfs, else the record's DSN, else remembered;
    memdev: sysfs, else the line; PCI address) and the ports above it."""
    bdf = event.subject if event.subject and not event.subject.startswith("rcrb") else ""
    dsn = protocol_serial(event.lines) if event.kind is K.cxl_protocol_error else None
    sysfs = next((d for d in devices if bdf and d.host and d.host.lower() == bdf), None)
    if sysfs is None and dsn is not None:
        sysfs = next((d for d in devices if d.serial == dsn), None)
    named = next((m.group("memdev") for line in event.lines if (m := _MEMDEV.search(line))), None)
    memdev = sysfs.memdev if sysfs is not None else named
    serial = _hex(sysfs.serial if sysfs is not None and sysfs.serial is not None else dsn)
    serial = serial or remembered.get(bdf)
    bdf = bdf or (sysfs.host if sysfs is not None and sysfs.host else "")
    subject = serial or memdev or bdf or event.subject or "unknown"
    device = ", ".join(x for x in (memdev, f"serial {serial}" if serial else None, bdf or None) if x)
    return (
        subject,
        {
            "memdev": memdev or bdf or subject,
            "serial": serial,
            "host": bdf or None,
            "firmware": sysfs.firmware if sysfs is not None else None,
            "device": device or subject,
            "source": "kernel log",
        },
        list(sysfs.ports) if sysfs is not None else [],
    )


def _errors(events: list[KernelEvent]) -> dict[str, Any]:
    uncorrectable: list[list[str]] = []
    corrected: list[str] = []
    for event in events:
        uncor, cor = unmasked(event.lines)
        if uncor:
            uncorrectable.append(_bits(uncor, UE_BITS))
        corrected += _bits(cor, CE_BITS)
    own = [errors for errors in uncorrectable if DEVICE_UE_ERRORS & set(errors)]
    shown = own or uncorrectable or [corrected]
    errors = list(dict.fromkeys(x for found in shown for x in found))
    return {
        "uncorrectable": bool(uncorrectable),
        "uncorrectable_count": len(uncorrectable),
        "device_error": bool(own),
        "errors": errors[:MAX_LISTED],
        "error": errors[0] if errors else ("CXL protocol error" if uncorrectable else "corrected CXL protocol error"),
        "link_errors": sorted({x for found in uncorrectable for x in found} - DEVICE_UE_ERRORS)[:MAX_LISTED],
    }


def _aer(subject: str, events: list[KernelEvent], detail: dict[str, Any]) -> SignalValue:
    detail.update(
        _errors(events),
        agent_type=_agent(events[0])[1],
        records=len(events),
        kernel_records=len(events),
        tables=[],
        pcie_drain=False,
    )
    return SignalValue("cxl_aer", subject, float(len(events)), detail)


def _port(port: str, events: list[KernelEvent], devices: list[CxlMemdev]) -> SignalValue:
    """A port's (or its link's) protocol error: never a device's data. The memdevs below it are the
    candidates (sysfs: a memdev whose ports include this one)."""
    below = [d for d in devices if port in d.ports]
    errors = _errors(events)
    named = [
        ", ".join(x for x in (d.memdev, f"serial {_hex(d.serial)}" if d.serial is not None else None, d.host) if x)
        for d in below
    ]
    detail = {
        **errors,
        "device_error": False,
        "link_errors": errors["errors"] if errors["uncorrectable"] else [],  # a port's are all its link's
        "port": port,
        "agent_type": _agent(events[0])[1],
        "memdevs_below": named[:MAX_LISTED],
        "below": "; ".join(named[:4]) or "no memdev listed below it",
        "candidates": [f"the port {port} ({_agent(events[0])[1] or 'CXL port'}) and its link"]
        + [f"below it: CXL memory {n}" for n in named[:4]],
        "records": len(events),
        "source": "kernel log",
    }
    return SignalValue("cxl_port_error", port, float(len(events)), detail)


def _severity(detail: dict[str, Any]) -> tuple[bool, bool]:
    return bool(detail.get("uncorrectable")), bool(detail.get("device_error"))


def cxl_kernel_signals(
    log: KernelLogState | None,
    section: CxlRasState | None,
    rasdaemon: list[SignalValue],
    *,
    klog: KernelMemory | None,
    boot_id: str | None,
    remembered: dict[str, str] | None = None,
) -> list[SignalValue]:
    """Signals of the kernel log's new CXL events; `rasdaemon` (this report's cxl signals from rasdaemon's
    rows) takes the kernel's record into its detail where it already counts the same error at least as
    severe; `remembered` maps PCI addresses to serials seen in earlier reports."""
    if log is None:
        return []
    fresh = fresh_events(log, klog, boot_id, kinds=CXL_KINDS | AER_KINDS)
    events = [e for e in fresh if e.kind in CXL_KINDS]
    if not events:
        return []
    devices = section.devices if section is not None else []
    grouped: dict[tuple[str, str], list[KernelEvent]] = defaultdict(list)
    names: dict[str, tuple[dict[str, Any], list[str]]] = {}
    for event in events:
        number, _type = _agent(event) if event.kind is K.cxl_protocol_error else (None, None)
        if number in PORT_AGENTS:
            grouped[("port", event.subject or "unknown port")].append(event)
            continue
        subject, named, ports = _where(event, devices, remembered or {})
        names[subject] = (named, ports)
        grouped[("aer" if event.kind is K.cxl_protocol_error else "down", subject)].append(event)
    known = {(s.kind, s.subject): s for s in rasdaemon}
    out: list[SignalValue] = []
    for (family, subject), found in sorted(grouped.items()):
        if family == "port":
            out.append(_port(subject, found, devices))
            continue
        named, ports = names[subject]
        detail = dict(named)
        if family == "aer":
            signal = _aer(subject, found, detail)
            same = known.get(("cxl_aer", subject))
            if same is not None:
                same.detail["kernel_records"] = same.detail.get("kernel_records", 0) + len(found)
                if _severity(same.detail) < _severity(signal.detail):  # the kernel saw worse: upgrade it
                    keys = ("uncorrectable", "uncorrectable_count", "device_error", "errors", "error", "link_errors")
                    same.detail.update({k: signal.detail[k] for k in keys}, upgraded_by="kernel log")
                continue
            known[("cxl_aer", subject)] = signal
        else:
            signal = down_signal(subject, found, detail, fresh, ports)
            same = known.get(("cxl_aer", subject))
            if same is not None and _severity(same.detail) == (True, True):
                same.detail["cxl_mem_disabled"] = bool(signal.detail["memory_lost"])
                same.detail["kernel_records"] = same.detail.get("kernel_records", 0) + len(found)
                same.detail.update(resume=signal.detail["resume"], pcie_aer=signal.detail["pcie_aer"])
                continue
        out.append(signal)
    return out


def _drains(signal: SignalValue) -> bool:
    """Whether a CXL signal's own rule drains: cxl-device-down (`drain`), cxl-aer-uncorrectable."""
    if signal.kind == "cxl_device_down":
        return bool(signal.detail.get("drain", signal.detail.get("memory_lost")))
    return signal.kind == "cxl_aer" and bool(signal.detail.get("uncorrectable") and signal.detail.get("device_error"))


def _carry(signal: SignalValue, pcie: SignalValue) -> None:
    """A PCIe uncorrected error the PCIe rule would drain, on a device whose CXL signal would not: the
    drain goes to the CXL signal (its evidence has the AER lines), never downgraded to a ticket. A
    cxl_device_down drains by `drain` (cxl-device-down), a link-only cxl_aer by `pcie_drain`
    (cxl-aer-link-unrecovered: still the link's or the peer's error, not the device's data)."""
    types = ", ".join(str(t) for t in pcie.detail.get("error_types") or []) or "no type named"
    reason = f"uncorrected PCIe error on {pcie.subject} not recovered ({types}): drained as pcie-aer-uncorrected would"
    if signal.kind == "cxl_aer":
        signal.detail.update(pcie_drain=True, pcie_reason=reason, pcie_disposition=pcie.detail.get("disposition"))
        return
    signal.detail.update(
        reasons=[reason, *(signal.detail.get("reasons") or [])][:MAX_LISTED],
        reason=reason,
        drain=True,
        pcie_disposition=pcie.detail.get("disposition"),
    )


def fold_memdev_aer(signals: list[SignalValue]) -> None:
    """One ticket, the CXL one, for a PCIe uncorrected error on a CXL memdev's function (or on the port a
    group of down devices sits under, cxl_down.group_under_ports) whose CXL signal in this report tickets
    the device already (cxl_device_down, an uncorrectable cxl_aer): the PCIe count is marked
    `disposition: cxl_memory`, which no pcie rule takes, and the CXL ticket's evidence carries its lines.

    Never a downgrade: when the PCIe count would drain (`disposition: drain`) and the CXL signal's own
    rule would not (a restart line, a probe failure, an error on a disabled memdev, a link-only error),
    the CXL signal takes the drain over (_carry). Changes `signals` in place."""
    uncorrected = [
        s for s in signals if s.kind == "device_event_count" and s.detail.get("kind") == K.pcie_aer_uncorrected.value
    ]
    signals[:] = group_under_ports(signals, {s.subject for s in uncorrected})
    ticketed: dict[str, SignalValue] = {}
    for s in signals:
        if s.kind == "cxl_device_down" or (s.kind == "cxl_aer" and s.detail.get("uncorrectable")):
            names = [s.detail.get("host"), *(s.detail.get("functions") or []), s.detail.get("port")]
            for name in filter(None, names):
                if str(name) not in ticketed or (_drains(s) and not _drains(ticketed[str(name)])):
                    ticketed[str(name)] = s
    for signal in uncorrected:
        cxl = ticketed.get(signal.subject)
        if cxl is None:
            continue
        if signal.detail.get("disposition") == DRAIN and not _drains(cxl):
            _carry(cxl, signal)
        signal.detail.update(disposition=FOLDED, folded_into=f"{cxl.kind} {cxl.subject}")
