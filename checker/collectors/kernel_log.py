"""The kernel log, read incrementally: /dev/kmsg first, then `journalctl -k -o json`, then `dmesg`.

The cursor (source, boot id, and the kmsg sequence number / journal cursor / dmesg printk time of
the last line reported) lives in the agent's state directory, so across restarts no line is read
twice and none is missed. A sequence number that jumps means the ring buffer overwrote records
before they were read (reading /dev/kmsg then fails with EPIPE; the gap is counted in
lost_records); a new boot id means the host rebooted, and the new boot is read from its start.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from checker.collectors.base import CommandResult
from checker.collectors.context import Context, ParseFailed, Unavailable, command_failure
from checker.parsers.common import epoch_utc
from checker.parsers.kernel_events import Source, state_from_lines
from checker.parsers.kernel_log import LogLine, parse_journal_json, parse_kmsg, parse_log_lines
from checker.schemas import KernelLogState

BOOT_ID = "/proc/sys/kernel/random/boot_id"
PROC_STAT = "/proc/stat"
JOURNAL = ["journalctl", "-k", "-o", "json", "--no-pager"]
JOURNAL_FIRST = [*JOURNAL, "-b", "-n", "10000"]  # no cursor yet: this boot's newest lines
DMESG = ["dmesg"]


def boot_time(ctx: Context) -> dt.datetime | None:
    """When the host booted (btime in /proc/stat), to turn printk times into timestamps."""
    stat = ctx.host.read_text(PROC_STAT) or ""
    for line in stat.splitlines():
        if line.startswith("btime "):
            value = line.split()[1]
            return epoch_utc(int(value)) if value.isdecimal() else None
    return None


def collect(ctx: Context) -> None:
    boot_id = (ctx.host.read_text(BOOT_ID) or "").strip() or None
    cursor = ctx.state.get("kernel_log")
    known_boot = cursor.get("boot_id")
    rebooted = isinstance(known_boot, str) and boot_id is not None and _boot_key(known_boot) != _boot_key(boot_id)
    booted = boot_time(ctx)
    text = ctx.host.read_kmsg()
    state: KernelLogState | None
    if text is not None:
        state = _from_kmsg(ctx, text, {} if rebooted else cursor, booted, boot_id, had_cursor=bool(cursor))
    else:
        state = _from_journal(ctx, cursor, boot_id) or _from_dmesg(ctx, {} if rebooted else cursor, booted, boot_id)
    state.boot_id = boot_id
    state.rebooted = rebooted
    ctx.source = state.source
    ctx.observations.kernel_log = state


def _from_kmsg(
    ctx: Context,
    text: str,
    cursor: dict[str, Any],
    booted: dt.datetime | None,
    boot_id: str | None,
    *,
    had_cursor: bool,
) -> KernelLogState:
    parsed = parse_kmsg(text, boot_time=booted)
    lines = parsed.value
    if text.strip() and not lines:
        raise ParseFailed(f"/dev/kmsg: {parsed.problems[0] if parsed.problems else 'no records'}", text)
    for item in parsed.problems:
        ctx.problem(f"/dev/kmsg: {item}")
    last_seen = cursor.get("seq") if cursor.get("source") == "kmsg" else None
    if isinstance(last_seen, int):
        lines = [line for line in lines if line.seq is not None and line.seq > last_seen]
    expected = last_seen + 1 if isinstance(last_seen, int) else (0 if had_cursor else None)
    lost = 0
    for line in lines:
        if line.seq is None:
            continue
        if expected is not None and line.seq > expected:
            lost += line.seq - expected  # overwritten in the ring buffer before anyone read them
        expected = line.seq + 1
    state = state_from_lines(lines, "kmsg").value
    state.lost_records = lost
    seq = state.last_seq if state.last_seq is not None else (last_seen if isinstance(last_seen, int) else None)
    if seq is not None:
        ctx.state.stage("kernel_log", {"source": "kmsg", "boot_id": boot_id, "seq": seq})
    else:
        ctx.state.stage("kernel_log", {"source": "kmsg", "boot_id": boot_id})
    return state


def _boot_key(boot_id: str) -> str:
    """/proc prints a boot id with dashes, the journal without."""
    return boot_id.replace("-", "").lower()


def _from_journal(ctx: Context, cursor: dict[str, Any], boot_id: str | None) -> KernelLogState | None:
    """None when journalctl is not there or cannot read the kernel's lines."""
    after = cursor.get("journal_cursor") if cursor.get("source") == "journal" else None
    # After a reboot the journal cursor still points into the previous boot: reading after it
    # (without -b) also returns that boot's last lines, which /dev/kmsg has lost — the panic.
    argv = [*JOURNAL, "--after-cursor", after] if isinstance(after, str) else JOURNAL_FIRST
    result = ctx.run(argv)
    if result.missing or (result.returncode != 0 and not result.stdout.strip()):
        ctx.problem(f"/dev/kmsg unreadable; {command_failure(result)}")
        return None
    parsed = parse_journal_json(result.stdout)
    lines = [line for line in parsed.value if line.fields.get("__CURSOR") != after]
    if result.stdout.strip() and not parsed.value:
        raise ParseFailed(f"journalctl: {parsed.problems[0] if parsed.problems else 'no records'}", result.stdout)
    for item in parsed.problems:
        ctx.problem(f"journalctl: {item}")
    state = _state(ctx, lines, "journal", result)
    last = next((line.fields["__CURSOR"] for line in reversed(parsed.value) if "__CURSOR" in line.fields), after)
    ctx.state.stage("kernel_log", {"source": "journal", "journal_cursor": last, "boot_id": boot_id})
    return state


def _from_dmesg(
    ctx: Context, cursor: dict[str, Any], booted: dt.datetime | None, boot_id: str | None
) -> KernelLogState:
    result = ctx.run(DMESG)
    if result.missing or (result.returncode != 0 and not result.stdout.strip()):
        raise Unavailable(f"/dev/kmsg cannot be opened, journalctl gave nothing, and {command_failure(result)}")
    parsed = parse_log_lines(result.stdout, boot_time=booted)
    if result.stdout.strip() and not parsed.value:
        raise ParseFailed(f"dmesg: {parsed.problems[0] if parsed.problems else 'no lines'}", result.stdout)
    last_seen = cursor.get("printk_s") if cursor.get("source") == "dmesg" else None
    lines = parsed.value
    if isinstance(last_seen, int | float):
        lines = [line for line in lines if line.monotonic_s is None or line.monotonic_s > last_seen]
    state = _state(ctx, lines, "dmesg", result)
    times = [line.monotonic_s for line in parsed.value if line.monotonic_s is not None]
    ctx.state.stage("kernel_log", {"source": "dmesg", "boot_id": boot_id, "printk_s": max(times, default=last_seen)})
    return state


def _state(ctx: Context, lines: list[LogLine], source: Source, result: CommandResult) -> KernelLogState:
    if result.timed_out:
        ctx.problem(f"{result.argv[0]} timed out; the lines it printed were read")
    return state_from_lines(lines, source).value
