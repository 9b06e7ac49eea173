"""SMIs and the error-reporting mode of a virtual host: MSR_SMI_COUNT and what machinecheck0, ACPI and
the kernel log show.

Every Intel host's counter moves at a small baseline (BASELINE_SMI_PER_S: our model of the occasional
SMIs a server BIOS takes for its own housekeeping, not a figure from a source); AMD classes have no
counter (the collector says `unavailable`). Two faults make it run:
- `firmware_first_left`: an interrupted PPR flow left the host firmware-first. Its DIMM's corrected
  errors arrive as GHES records, each logged by the firmware in SMM: one SMI per error (seed 000).
- `smi_storm`: a BIOS bug takes SMIs with no error behind them.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from checker.schemas import CollectorRun, CollectorStatus, ErrorReporting, SmiPackage, SmiState

if TYPE_CHECKING:
    from checker.sim.faults import Fault
    from checker.sim.host import VirtualHost

BASELINE_SMI_PER_S = 0.02  # about one a minute on a healthy Intel host
STORM_SMI_PER_S = 8.0
FIRMWARE_FIRST_CE_PER_S = 3.0  # the weak DIMM's errors, each an SMI while firmware-first
MAX_GHES_RECORDS = 5  # per advance written to the kernel log (the rest are counted, as printk ratelimits)
SMI_COUNTER_MASK = 2**32 - 1


def advance(host: VirtualHost, elapsed: float) -> None:
    if host.hardware.intel:
        host.smi_count += BASELINE_SMI_PER_S * elapsed


def progress(host: VirtualHost, fault: Fault, now: dt.datetime, elapsed: float) -> None:
    if fault.kind == "smi_storm":
        host.smi_count += STORM_SMI_PER_S * elapsed
        return
    # firmware_first_left: the errors cost an SMI each and reach the OS as GHES records
    before = int(fault.carry)
    fault.carry += FIRMWARE_FIRST_CE_PER_S * elapsed
    errors = int(fault.carry) - before
    host.smi_count += errors
    dimm = host.dimms[fault.dimm_index]
    for n in range(min(errors, MAX_GHES_RECORDS)):
        address = (host.rng.getrandbits(28) << 12) | 0x300
        host.log(now, ghes_record(n + 1, address, dimm.locator))


def ghes_record(number: int, address: int, locator: str) -> list[tuple[int, str]]:
    """A corrected memory error as drivers/acpi/apei/ghes.c and cper.c print it (the corpus's GHES sample)."""
    prefix = f"{{{number}}}[Hardware Error]: "
    return [
        (4, prefix + "Hardware error from APEI Generic Hardware Error Source: 1"),
        (4, prefix + "It has been corrected by h/w and requires no further action"),
        (4, prefix + "event severity: corrected"),
        (4, prefix + " Error 0, type: corrected"),
        (4, prefix + "  section_type: memory error"),
        (4, prefix + f"  physical_address: 0x{address:016x}"),
        (4, prefix + f"  DIMM location: {locator}"),
    ]


def smi_state(host: VirtualHost) -> SmiState | None:
    if not host.hardware.intel:
        return None
    count = int(host.smi_count) & SMI_COUNTER_MASK
    per_socket = max(1, host.hardware.logical_cpus // max(1, host.hardware.sockets))
    return SmiState(
        packages=[SmiPackage(package=s, cpu=s * per_socket, count=count) for s in range(host.hardware.sockets)]
    )


def error_reporting(host: VirtualHost) -> ErrorReporting:
    intel = host.hardware.intel
    return ErrorReporting(
        hest=True,
        ghes_sources=2,
        ghes_disabled=False,
        cmci_disabled=False if intel else None,
        ignore_ce=host.has("corrected_errors_ignored"),  # someone wrote 1 to machinecheck0/ignore_ce
        dont_log_ce=False,
    )


def collector_run(host: VirtualHost) -> CollectorRun:
    if host.hardware.intel:
        return CollectorRun(status=CollectorStatus.ok, duration_ms=0.1, source="msr")
    return CollectorRun(
        status=CollectorStatus.unavailable,
        duration_ms=0.0,
        reason="no MSR_SMI_COUNT on AMD: the SMI counter (MSR 0x34) is Intel's",
    )
