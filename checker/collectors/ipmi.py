"""IPMI: the BMC's System Event Log (ipmitool, or FreeIPMI's ipmi-sel where that is what is
installed) and its sensors (`ipmitool sdr elist`).

Reading a SEL is slow — a 500-entry log can take 30 s over the KCS interface — so the SEL is read
incrementally: `sel info` first (one fast command); when its entry count and last add time are
those of the last cycle, nothing else runs; when entries were added, only the newest ones are
read (`sel elist last N`, `ipmi-sel --tail=N`); the whole log only on the first cycle or after a
clear. Each report carries only new entries; the central side keeps the history.
"""

from __future__ import annotations

from typing import Any

from checker.collectors.base import CommandResult
from checker.collectors.context import BudgetExceeded, Context, ParseFailed, Unavailable, command_failure
from checker.parsers.ipmi import parse_sdr, parse_sel_info
from checker.parsers.ipmi_sel import parse_sel
from checker.schemas import MAX_SEL_ENTRIES, SelEntry, SelState

IPMITOOL_INFO = ["ipmitool", "sel", "info"]
IPMITOOL_ELIST = ["ipmitool", "sel", "elist"]
FREEIPMI_INFO = ["ipmi-sel", "--info"]
FREEIPMI_LIST = ["ipmi-sel", "--output-event-state", "--interpret-oem-data", "--entity-sensor-names"]
SDR_ELIST = ["ipmitool", "sdr", "elist"]
WRAPPED_TAIL = 32  # a full SEL that overwrites its oldest entries keeps its count: read this many
INFO_TIMEOUT_S = 15.0


def _info(ctx: Context) -> tuple[str, CommandResult]:
    result = ctx.run(IPMITOOL_INFO, INFO_TIMEOUT_S)
    if not result.missing:
        return "ipmitool", result
    freeipmi = ctx.run(FREEIPMI_INFO, INFO_TIMEOUT_S)
    if freeipmi.missing:
        raise Unavailable("neither ipmitool nor FreeIPMI's ipmi-sel is installed")
    return "freeipmi", freeipmi


def list_argv(tool: str, newest: int | None) -> list[str]:
    """The command that lists the SEL, or only its newest entries."""
    if tool == "ipmitool":
        return IPMITOOL_ELIST if newest is None else [*IPMITOOL_ELIST, "last", str(newest)]
    return FREEIPMI_LIST if newest is None else [*FREEIPMI_LIST, f"--tail={newest}"]


def collect_sel(ctx: Context) -> None:
    tool, info_result = _info(ctx)
    ctx.source = tool
    if info_result.timed_out or (info_result.returncode != 0 and not info_result.stdout.strip()):
        # 'Could not open device at /dev/ipmi0 …': no BMC, no ipmi_si driver, or no permission.
        raise Unavailable(command_failure(info_result))
    info = ctx.take(parse_sel_info(info_result.stdout), "sel info", info_result.stdout)
    if info.entry_count is None:
        raise ParseFailed("sel info without an entry count", info_result.stdout)
    cursor = ctx.state.get("sel")
    if cursor.get("tool") != tool:
        cursor = {}
    state = info.model_copy()
    state.last_record_id = cursor.get("last_record_id")
    known_count = cursor.get("entries")
    state.cleared = isinstance(known_count, int) and info.entry_count < known_count
    unchanged = (
        isinstance(known_count, int)
        and info.entry_count == known_count
        and info.last_add_time is not None
        and info.last_add_time == cursor.get("last_add_time")
    )
    state.source = "ipmi"  # not the redfish collector's id space (docs/report-schema.md, SelState.source)
    ctx.observations.sel = state
    if not unchanged and info.entry_count > 0:
        _read_entries(ctx, tool, state, cursor)
    ctx.state.stage(
        "sel",
        {
            "tool": tool,
            "entries": info.entry_count,
            "last_add_time": info.last_add_time,
            "last_record_id": state.last_record_id,
        },
    )


def _read_entries(ctx: Context, tool: str, state: SelState, cursor: dict[str, Any]) -> None:
    count = state.entry_count or 0
    known = cursor.get("entries")
    newest: int | None = None
    if isinstance(known, int) and not state.cleared:
        added = count - known
        newest = min(added, MAX_SEL_ENTRIES) if added > 0 else WRAPPED_TAIL
    result = ctx.run(list_argv(tool, newest))
    if result.missing or (result.returncode != 0 and not result.stdout.strip()):
        raise ParseFailed(command_failure(result), result.stderr)
    entries: list[SelEntry] = ctx.take(parse_sel(result.stdout), "sel list", result.stdout)
    last_id = cursor.get("last_record_id")
    if newest == WRAPPED_TAIL and isinstance(last_id, int):
        fresh = [e for e in entries if e.record_id > last_id]
        if not fresh and entries:
            ctx.problem("the SEL is full and overwrites its oldest entries; record ids wrapped")
        entries = fresh or entries
    if len(entries) > MAX_SEL_ENTRIES:
        state.truncated = len(entries) - MAX_SEL_ENTRIES
        entries = entries[-MAX_SEL_ENTRIES:]
    state.entries = entries
    if entries:
        state.last_record_id = entries[-1].record_id
    if result.timed_out:
        raise BudgetExceeded(f"{' '.join(result.argv)} did not finish; the {len(entries)} entries printed were kept")


def collect_sensors(ctx: Context) -> None:
    result = ctx.run(SDR_ELIST)
    if result.missing:
        raise Unavailable("ipmitool is not installed (FreeIPMI's ipmi-sensors is not read)")
    ctx.source = "ipmitool"
    if result.timed_out:
        raise BudgetExceeded(command_failure(result))
    if result.returncode != 0 and not result.stdout.strip():
        raise Unavailable(command_failure(result))
    ctx.observations.sensors = ctx.take(parse_sdr(result.stdout), "sdr elist", result.stdout)[:1024]
