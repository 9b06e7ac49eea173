"""What a critical-interrupt entry of the BMC's log adds to its `sel_critical_interrupt` signal (the review
of the Redfish rules, finding 10).

- `severity`: "fatal" only for IPMI 2.0 table 42-3 sensor type 13h offsets 09h (Fatal NMI) and 0Ah (Bus
  Fatal Error), and Dell's "A fatal error was detected on a component at bus …"; else "uncorrectable":
  an I/O channel check (02h), PCI PERR (04h), PCI SERR (05h) or Bus Uncorrectable error (08h) need not
  take the host down.
- `candidates`: the PCI functions the entries name ("bus 0x3a device 0x00 function 0x0", Dell's "at bus
  59 device 0 function 0"), as written, with a BDF where the numbers are hex-prefixed (a bare number's
  base is the vendor's: Dell's message registry does not say).
- `os_saw_aer`: the kernel logged an uncorrected PCIe AER error within AER_WITHIN_S of the entry (this
  report's kernel log, or one remembered from an earlier report): pcie-aer-uncorrected then drains and
  tickets the device, and this host-level ticket would be a second one for the same fault. An AER that
  the kernel logs only in a later report than the entry is not seen here (the entry has fired by then).
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from checker.schemas import SelEntry

AER_WITHIN_S = 3600  # ours: the hour the SEL deriver lets a logged PSU event explain a lost redundancy too
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


def interrupt_detail(entries: list[SelEntry], aer_at: dt.datetime | None, now: dt.datetime) -> dict[str, Any]:
    """The severity, candidates and AER overlap of one sensor's critical-interrupt entries."""
    fatal = any(_FATAL.search(e.event) or _FATAL.search(e.raw) for e in entries)
    candidates: list[dict[str, Any]] = []
    for entry in entries:
        for match in _BDF.finditer(f"{entry.event} {entry.raw}"):
            if (found := _candidate(*match.groups())) not in candidates:
                candidates.append(found)
    when = [e.timestamp or now for e in entries]
    saw = aer_at is not None and any(abs((t - aer_at).total_seconds()) <= AER_WITHIN_S for t in when)
    return {
        "severity": "fatal" if fatal else "uncorrectable",
        "candidates": candidates[:MAX_CANDIDATES],
        "os_saw_aer": saw,
    }
