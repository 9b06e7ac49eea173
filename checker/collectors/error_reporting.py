"""How corrected memory errors reach the OS: what the host shows of firmware-first (ACPI HEST, GHES
sources) and of the kernel's own machine-check handling (machinecheck0's cmci_disabled, ignore_ce,
dont_log_ce). File reads only; the centre weighs these with the errors the report carries (GHES
records or native EDAC/MCE lines) to say which mode the host is in (remediator/derive/reporting.py).
"""

from __future__ import annotations

from checker.collectors.context import Context, Unavailable
from checker.schemas import ErrorReporting

ACPI_TABLES = "/sys/firmware/acpi/tables"
GHES_DRIVER = "/sys/bus/platform/drivers/GHES"
GHES_DISABLE = "/sys/module/ghes/parameters/disable"
MACHINECHECK = "/sys/devices/system/machinecheck/machinecheck0"


def _flag(text: str | None) -> bool | None:
    """A sysfs boolean: '0'/'1', or 'N'/'Y' for module parameters."""
    if text is None:
        return None
    value = text.strip()
    if value in ("1", "Y", "y"):
        return True
    if value in ("0", "N", "n"):
        return False
    return None


def collect(ctx: Context) -> None:
    tables = ctx.host.list_dir(ACPI_TABLES)
    machinecheck = ctx.host.list_dir(MACHINECHECK)
    if tables is None and machinecheck is None:
        raise Unavailable(f"neither {ACPI_TABLES} nor {MACHINECHECK} exists (no ACPI, no x86 machine checks)")
    state = ErrorReporting()
    if tables is not None:
        state.hest = "HEST" in tables
    ghes = ctx.host.list_dir(GHES_DRIVER)
    if ghes is not None:
        state.ghes_sources = sum(1 for name in ghes if name.startswith("GHES."))
    state.ghes_disabled = _flag(ctx.host.read_text(GHES_DISABLE))
    if machinecheck is not None:
        for name in ("cmci_disabled", "ignore_ce", "dont_log_ce"):
            if name in machinecheck:
                setattr(state, name, _flag(ctx.host.read_text(f"{MACHINECHECK}/{name}")))
    ctx.observations.error_reporting = state
