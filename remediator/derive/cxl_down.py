"""`cxl_device_down`: what the kernel's own CXL lines say about a device (checker/parsers/cxl_log.py
`cxl_mem_disabled`, `cxl_device_failed`, `cxl_mem_resumed`), with the AER lines of its PCI function
that came with them. The lines carry no RAS status bits (those go to the trace event only), so they
say whether the device's memory is gone, not device from link.

What each line means (Linux 6.x):
- drivers/cxl/core/pci.c `cxl_error_detected` (uncorrectable path): "frozen state error detected,
  disable CXL.mem" and "failure state error detected, request disconnect": the memory is gone.
- "memdev disabled, abort error handling" is printed by BOTH `cxl_error_detected` and
  `cxl_cor_error_detected` (the correctable path) when the memdev's driver is already unbound (`cxl
  disable-memdev`, or an earlier error released it). Its severity is the AER line the AER core printed
  just before it for the same function ("PCIe Bus Error: severity=Corrected|Uncorrected (…)",
  drivers/pci/pcie/aer.c): uncorrectable -> `drain` (as pcie-aer-uncorrected would) with
  `disabled_uncorrectable`, but not `memory_lost`: the driver was unbound first, no memory of it was in
  use; corrected or no AER line -> a ticket only.
- drivers/cxl/pci.c `cxl_error_resume`: "error resume failed" (the memdev's driver did not re-attach
  after the reset: its memory is lost for good); "error resume successful" goes on the ticket.
  `cxl_slot_reset`'s "restart CXL.mem after slot reset" is printed BEFORE its device_attach(): when the
  attach fails it returns PCI_ERS_RESULT_DISCONNECT, the AER core logs "device recovery failed" and
  cxl_error_resume never runs. It only follows cxl_error_detected's NEED_RESET (the memdev's driver
  released at runtime), so without "error resume successful" it reads "recovery outcome unknown"
  (`resume: unknown`), never "restarted"; a PCIe drain of the same function is carried over to it
  (remediator/derive/cxl_kernel.py fold_memdev_aer).
- drivers/cxl/pci.c `cxl_cmd_err`/`cxl_err`: ", device state  fatal", " firmware-halt" (Memory Device
  Status bits 0 and 1, CXL 3.1 8.2.8.5.1.1). On a runtime mailbox command ("mailbox timeout", "mailbox
  queue busy") the device was serving memory: lost. "timeout awaiting mailbox ready|idle" is
  cxl_pci_setup_mailbox's and "timeout awaiting memory active" cxl_dvsec_mem_range_active's
  (drivers/cxl/core/pci.c, via cxl_await_media_ready): both only at probe, when no memory of the
  device was in use yet: `phase` probe, a ticket in service, no drain. When both Fatal and FW Halt
  are set the register may have read all-ones from a device that fell off its link: said so.
"""

from __future__ import annotations

from typing import Any

from checker.schemas import KernelEvent, KernelEventKind
from remediator.derive.cxl import MAX_LISTED
from remediator.signals import SignalValue

K = KernelEventKind
AER_KINDS = frozenset({K.pcie_aer_corrected, K.pcie_aer_uncorrected})
ALL_ONES = (
    "device status fatal and firmware halted (both bits set: the register may read all-ones from a device off its link)"
)


# drains (an uncorrected PCIe error, as pcie-aer-uncorrected would) but lost no memory: the memdev's driver
# was unbound before the error came (cxl_error_detected prints it only then), so none of its memory was in use
DISABLED_UE = "uncorrectable PCIe error on a memdev already disabled (no memory in use)"
RESTART_UNKNOWN = (
    "CXL.mem restart attempted after a slot reset (its driver was released), recovery outcome unknown: "
    "no 'error resume successful'"
)


def _has(events: list[KernelEvent], *needles: str) -> bool:
    return any(needle in line for e in events for line in e.lines for needle in needles)


def _abort_severity(event: KernelEvent, log_events: list[KernelEvent]) -> str | None:
    """The severity of the AER line the AER core printed for the same function just before an "abort
    error handling" line: "uncorrectable", "corrected", or None (no AER line before it)."""
    before: KernelEvent | None = None
    for other in log_events:
        if other is event:
            break
        if other.kind in AER_KINDS and other.subject == event.subject:
            before = other
    if before is None:
        return None
    return "uncorrectable" if before.kind is K.pcie_aer_uncorrected else "corrected"


def _reasons(events: list[KernelEvent], log_events: list[KernelEvent]) -> tuple[list[tuple[str, bool]], str]:
    """(reason, drains) most severe first, and the phase (runtime or probe). Every reason that drains
    lost memory except DISABLED_UE."""
    found: list[tuple[str, bool]] = []
    runtime = False
    if _has(events, "error resume failed"):
        found.append(("error resume failed: CXL.mem not restored, its memory is lost", True))
        runtime = True
    if _has(events, "failure state error detected"):
        found.append(("permanent failure, disconnect requested", True))
        runtime = True
    if _has(events, "frozen state error detected"):
        found.append(("CXL.mem disabled (frozen state error)", True))
        runtime = True
    for event in events:
        if any("abort error handling" in line for line in event.lines):
            runtime = True
            severity = _abort_severity(event, log_events)
            if severity == "uncorrectable":
                found.append((DISABLED_UE, True))
            elif severity == "corrected":
                found.append(
                    ("corrected error on a memdev already disabled (cxl disable-memdev, or its driver unbound)", False)
                )
            else:
                found.append(("an error on a memdev already disabled, no uncorrectable AER line", False))
    for event in events:
        text = " ".join(event.lines)
        if ", device state" not in text:
            continue
        probe = "timeout awaiting mailbox" in text
        runtime = runtime or not probe
        fatal, halted = ("state  fatal" in text or "state: fatal" in text), "firmware-halt" in text
        what = ALL_ONES if fatal and halted else ("device firmware halted" if halted else "device status fatal")
        found.append((f"{what}, at probe (mailbox never ready)" if probe else what, not probe))
    if _has(events, "timeout awaiting memory active"):
        found.append(("media never became active, at probe", False))
    if _has(events, "error resume successful"):
        found.append(("CXL.mem restarted after an error (error resume successful)", False))
        runtime = True
    elif _has(events, "restart CXL.mem after slot reset"):
        # cxl_slot_reset prints this BEFORE device_attach(); if the attach fails the AER core says "device
        # recovery failed" and cxl_error_resume never runs: the line alone is an attempt, not a recovery
        found.append((RESTART_UNKNOWN, False))
        runtime = True
    found = list(dict.fromkeys(found))
    found.sort(key=lambda r: not r[1])  # memory lost first; stable otherwise
    return found, "runtime" if runtime else "probe"


def candidates(detail: dict[str, Any], ports: list[str]) -> list[str]:
    """Where the fault may be, most likely first: the device by its serial, then its link, its slot,
    the port above it. The kernel's lines cannot tell device from link (cxl-device-down's wrong_if)."""
    device = detail.get("device") or detail.get("memdev") or "the device"
    function = detail.get("host")
    port = ports[0] if ports else None
    found = [f"the device: CXL memory {device}"]
    if function:
        found.append(f"its link: {function}" + (f" to port {port}" if port else ""))
        found.append(f"its slot (the PCIe slot of {function})")
    if port:
        found.append(f"the port above it: {port}" + (f" (then {', '.join(ports[1:3])})" if ports[1:] else ""))
    return found


def down_signal(
    subject: str,
    events: list[KernelEvent],
    detail: dict[str, Any],
    log_events: list[KernelEvent],
    ports: list[str],
) -> SignalValue:
    reasons, phase = _reasons(events, log_events)
    function = detail.get("host")
    aer = [e for e in log_events if e.kind in AER_KINDS and function and e.subject == function]
    resume = (
        "failed"
        if _has(events, "error resume failed")
        else "successful"
        if _has(events, "error resume successful")
        else "unknown"
        if _has(events, "restart CXL.mem after slot reset")
        else None
    )
    detail.update(
        reasons=[r for r, _ in reasons],
        reason=reasons[0][0] if reasons else "CXL device error",
        memory_lost=any(lost for r, lost in reasons if r != DISABLED_UE),
        drain=any(lost for _, lost in reasons),
        disabled_uncorrectable=any(r == DISABLED_UE for r, _ in reasons),
        phase=phase,
        resume=resume,
        all_ones=any(r == ALL_ONES or r.startswith(ALL_ONES) for r, _ in reasons),
        kinds=sorted({e.kind.value for e in events}),
        lines=[line for e in events for line in e.lines[:1]][:MAX_LISTED],
        pcie_aer=[line for e in aer for line in e.lines[:1]][:MAX_LISTED],
        candidates=candidates(detail, ports),
        ports=ports[:8],
        records=len(events),
    )
    return SignalValue("cxl_device_down", subject, float(len(events)), detail)


def _port_of(signal: SignalValue, downs: list[SignalValue], aer_ports: set[str]) -> str | None:
    """The port a down device is grouped under: the nearest port above it whose uncorrected AER is in this
    report, else the nearest it shares with another down device, else none."""
    ports = [str(p) for p in signal.detail.get("ports") or []]
    shared = {str(p) for other in downs if other is not signal for p in other.detail.get("ports") or []}
    return next((p for p in ports if p in aer_ports), None) or next((p for p in ports if p in shared), None)


def group_under_ports(signals: list[SignalValue], aer_ports: set[str]) -> list[SignalValue]:
    """`cxl_device_down` signals of two or more devices below one port become one signal of the port.

    A fatal error at a root or switch port makes the AER core walk every driver below it
    (drivers/pci/pcie/err.c pcie_do_recovery -> pci_walk_bridge), so each cxl_pci below prints its own
    "frozen state error detected": two devices down at once under one port points at the port or its
    link. A rule fires once per evaluation on one signal (remediator/evaluate.py), so separate signals
    would ticket one device and consume the other's lines. The group's subject is the port; its
    candidates lead with the port and its link and list every device below it that went down; it
    drains if any member does. `aer_ports`: ports with an uncorrected PCIe error in this report.
    Returns the signals with each group's members replaced by the group."""
    downs = [s for s in signals if s.kind == "cxl_device_down" and s.detail.get("ports")]
    groups: dict[str, list[SignalValue]] = {}
    for signal in downs:
        port = _port_of(signal, downs, aer_ports)
        if port is not None:
            groups.setdefault(port, []).append(signal)
    merged: dict[int, SignalValue | None] = {}
    for port, members in groups.items():
        if len(members) < 2:
            continue
        merged[id(members[0])] = _group(port, members)
        merged.update({id(m): None for m in members[1:]})
    out: list[SignalValue] = []
    for signal in signals:
        if id(signal) not in merged:
            out.append(signal)
        elif (group := merged[id(signal)]) is not None:
            out.append(group)
    return out


def _group(port: str, members: list[SignalValue]) -> SignalValue:
    details = [m.detail for m in members]
    devices = [str(d.get("device") or d.get("memdev")) for d in details]
    reasons = list(dict.fromkeys(r for d in details for r in d.get("reasons") or []))
    drains = [d for d in details if d.get("drain")]
    lead = str((drains or details)[0].get("reason") or "CXL device error")
    ports = [str(p) for p in details[0].get("ports") or []]
    above = ports[ports.index(port) + 1 :] if port in ports else []
    detail: dict[str, Any] = {
        "memdev": ", ".join(str(d.get("memdev")) for d in details),
        "serial": None,
        "host": None,
        "port": port,
        "functions": [d.get("host") for d in details if d.get("host")],
        "memdevs_below": devices[:MAX_LISTED],
        "device": f"below port {port} ({len(members)} devices down: {'; '.join(devices[:4])})",
        "firmware": None,
        "source": "kernel log",
        "reasons": reasons[:MAX_LISTED],
        "reason": f"{len(members)} devices down at once under one port, {lead}",
        "memory_lost": any(d.get("memory_lost") for d in details),
        "drain": bool(drains),
        "disabled_uncorrectable": any(d.get("disabled_uncorrectable") for d in details),
        "phase": "runtime" if any(d.get("phase") == "runtime" for d in details) else "probe",
        "resume": next((d.get("resume") for d in details if d.get("resume")), None),
        "all_ones": any(d.get("all_ones") for d in details),
        "kinds": sorted({k for d in details for k in d.get("kinds") or []}),
        "lines": [line for d in details for line in d.get("lines") or []][:MAX_LISTED],
        "pcie_aer": [line for d in details for line in d.get("pcie_aer") or []][:MAX_LISTED],
        "candidates": [f"the port {port} and its link (every device that went down sits below it)"]
        + ([f"the ports above it: {', '.join(above[:2])}"] if above else [])
        + [f"below it: CXL memory {device}" for device in devices[:4]],
        "ports": [port, *above][:8],
        "records": sum(int(d.get("records") or 0) for d in details),
    }
    return SignalValue("cxl_device_down", port, float(len(members)), detail)
