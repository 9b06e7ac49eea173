"""What a critical-interrupt entry of the BMC's log adds to its `sel_critical_interrupt` signal (the review
of the Redfish rules, finding 10).

- `severity`: "fatal" only for IPMI 2.0 table 42-3 sensor type 13h offsets 09h (Fatal NMI) and 0Ah (Bus
  Fatal Error), and Dell's "A fatal error was detected on a component at bus …"; else "uncorrectable":
  an I/O channel check (02h), PCI PERR (04h), PCI SERR (05h) or Bus Uncorrectable error (08h) need not
  take the host down.
- `candidates`: the PCI functions the entries name ("bus 0x3a device 0x00 function 0x0", Dell's "at bus
  59 device 0 function 0"), as written, with a BDF where the numbers are hex-prefixed (a bare number's
  base is the vendor's: Dell's message registry does not say).
- `os_saw_aer`: the kernel logged an uncorrected PCIe AER error within AER_WITHIN_S of the entry, before
  or after it (this report's kernel log, or one remembered from an earlier report: RecentAer), and, where
  the entry names a bus, device and function, on that function (the AER's device, a function that
  reported it, or the other end of its link from the report's PCIe section: the BIOS logs the root port whose
  AER status it read where the kernel names the endpoint below it, third review, finding 4; a bare number is
  tried as decimal and as hex, so Dell's "bus 59" also matches bus 0x59): pcie-aer-uncorrected then drains and tickets
  the device, and this host-level ticket would be a second one for the same fault. An AER on another
  device, or hours from the entry, explains nothing (second review of the Redfish rules, finding 4: one
  AER silenced every entry for an hour). An AER that names no device (the kernel's host-wide count)
  explains an entry near in time that names none either, and one that does, since its device is unknown.
  An entry naming a slot only is matched by time alone (the section's slot names are not in the log's
  words). An AER that the kernel logs only in a later report than the entry is not seen here (the entry
  has fired by then). The AER's time is the report's that carried it: within one report interval of the
  kernel's own.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from checker.schemas import SelEntry
from checker.sections.pcie import PcieState

AER_WITHIN_S = 3600  # ours: the hour the SEL deriver lets a logged PSU event explain a lost redundancy too
MAX_AERS = 16  # uncorrected AER reports remembered (each up to MAX_AER_DEVICES functions)
MAX_AER_DEVICES = 8  # functions kept per AER: the ones it names first, then their link partners
RecentAer = tuple[int, list[str]]
"""(epoch seconds of the report that carried it, the PCI functions it names: empty when none)."""
MAX_CANDIDATES = 4
# IPMI offsets in ipmitool's words, and Dell's iDRAC wordings (PCI1302 / PCI1320-style messages)
FATAL_INTERRUPTS = (
    "i/o channel check nmi",
    "i/o channel check error",
    "pci perr",
    "pci serr",
    "bus uncorrectable",
    "fatal nmi",
    "bus fatal",
    "a fatal error was detected on a component at bus",
)
_FATAL = re.compile(r"fatal nmi|bus fatal|fatal error was detected", re.IGNORECASE)
_BDF = re.compile(
    r"bus\s+(0x[0-9a-f]+|\d+)\s*,?\s*device\s+(0x[0-9a-f]+|\d+)\s*,?\s*function\s+(0x[0-9a-f]+|\d+)",
    re.IGNORECASE,
)


def is_critical(event: str) -> bool:
    text = event.lower()
    return any(words in text for words in FATAL_INTERRUPTS)


def _candidate(bus: str, device: str, function: str) -> dict[str, Any]:
    found: dict[str, Any] = {"bus": bus, "device": device, "function": function}
    if all(n.lower().startswith("0x") for n in (bus, device, function)):
        found["bdf"] = f"{int(bus, 16):02x}:{int(device, 16):02x}.{int(function, 16):x}"
    return found


def _function(bdf: str) -> tuple[int, int, int] | None:
    """'0000:3b:00.1' or '3b:00.1' -> (bus, device, function)."""
    match = re.fullmatch(r"(?:[0-9a-f]{4}:)?([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])", bdf.strip().lower())
    return (int(match[1], 16), int(match[2], 16), int(match[3], 16)) if match else None


def _readings(number: str) -> set[int]:
    if number.lower().startswith("0x"):
        return {int(number, 16)}
    return {int(number), int(number, 16)}  # the vendor's base is unsaid: decimal (Dell's 59) or hex


def _names(candidate: dict[str, Any], devices: list[str]) -> bool:
    buses, slots, functions = (_readings(candidate[k]) for k in ("bus", "device", "function"))
    found = [f for d in devices if (f := _function(d)) is not None]
    return any(bus in buses and slot in slots and function in functions for bus, slot, function in found)


def _explains(aer: RecentAer, candidates: list[dict[str, Any]], when: list[dt.datetime]) -> bool:
    at, devices = aer
    near = any(abs(t.timestamp() - at) <= AER_WITHIN_S for t in when)
    if not near:
        return False
    return not candidates or not devices or any(_names(c, devices) for c in candidates)


def with_link_partners(functions: list[str], pcie: PcieState | None) -> list[str]:
    """The functions an AER names, then the other end of each one's link from the PCIe section: the port above
    a device (PcieDevice.parent) and the devices below a port."""
    named = list(dict.fromkeys(f for f in functions if f))
    if pcie is None:
        return named
    partners: list[str] = []
    for device in pcie.devices:
        if device.bdf in named and device.parent:
            partners.append(device.parent)
        if device.parent in named:
            partners.append(device.bdf)
    return list(dict.fromkeys([*named, *partners]))


def remember_aers(
    kept: list[RecentAer], devices_seen: list[list[str]], now: dt.datetime, newest: dt.datetime | None
) -> list[RecentAer]:
    """The AERs still able to explain an entry: this report's, and the kept ones within AER_WITHIN_S (and the
    BMC's clock allowance) of the newest entry seen or of now. Of each, the functions in the order given (the
    ones it names first), only those that read as a PCI function (a longer subject would not fit the memory)."""
    at = int(now.timestamp())
    fresh = [(at, [f for f in dict.fromkeys(d) if _function(f) is not None][:MAX_AER_DEVICES]) for d in devices_seen]
    floor = min(at, int(newest.timestamp()) if newest is not None else at) - AER_WITHIN_S - 300
    return [a for a in [*kept, *fresh] if a[0] >= floor][-MAX_AERS:]


def interrupt_detail(entries: list[SelEntry], aers: list[RecentAer], now: dt.datetime) -> dict[str, Any]:
    """The severity, candidates and AER overlap of one sensor's critical-interrupt entries."""
    fatal = any(_FATAL.search(e.event) or _FATAL.search(e.raw) for e in entries)
    candidates: list[dict[str, Any]] = []
    for entry in entries:
        for match in _BDF.finditer(f"{entry.event} {entry.raw}"):
            if (found := _candidate(*match.groups())) not in candidates:
                candidates.append(found)
    when = [e.timestamp or now for e in entries]
    saw = any(_explains(aer, candidates, when) for aer in aers)
    return {
        "severity": "fatal" if fatal else "uncorrectable",
        "candidates": candidates[:MAX_CANDIDATES],
        "os_saw_aer": saw,
    }
