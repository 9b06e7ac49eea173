"""Kernel log line formats: /dev/kmsg records, `journalctl -o json`, dmesg (plain, -T, -H) and syslog files.

Each format becomes LogLine (timestamp-or-None, message, and what else the format carries), which
the classifier in kernel_events turns into KernelEvent. Yearless formats (BSD syslog, dmesg -H)
need a reference time to get a year; without one their timestamp is None rather than a guess.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import dataclass, field
from typing import Any

from checker.parsers.common import Parsed, epoch_utc, guarded, month_number, plausible, problem

MAX_DICT_ENTRIES = 16


@dataclass(slots=True)
class LogLine:
    """One kernel log message with what its format told about it."""

    message: str
    timestamp: dt.datetime | None = None
    monotonic_s: float | None = None  # seconds since boot (printk time)
    seq: int | None = None  # /dev/kmsg sequence number
    level: int | None = None  # syslog level 0-7, kmsg only
    tag: str | None = None  # syslog program ("kernel", "mcelog"); None when the format has none
    raw: str = ""
    fields: dict[str, str] = field(default_factory=dict)  # kmsg dictionary (SUBSYSTEM=, DEVICE=)


# -- /dev/kmsg ---------------------------------------------------------------------------

_KMSG = re.compile(r"^(\d{1,18}),(\d{1,18}),(\d{1,18}),([^;,]*)(?:,[^;]*)?;(.*)$")


@guarded(list)
def parse_kmsg(text: str, boot_time: dt.datetime | None = None) -> Parsed[list[LogLine]]:
    """/dev/kmsg records 'prio,seq,usec,flags[,...];message', each optionally followed by
    ' KEY=VALUE' dictionary lines (kept in LogLine.fields).

    With boot_time (aware), timestamps are boot_time + usec; otherwise only monotonic_s is set.
    """
    lines: list[LogLine] = []
    problems: list[str] = []
    for raw in text.splitlines():
        if not raw:
            continue
        if raw[0] == " ":
            if lines and "=" in raw and len(lines[-1].fields) < MAX_DICT_ENTRIES:
                key, _, value = raw[1:].partition("=")
                lines[-1].fields[key] = value
            continue
        m = _KMSG.match(raw)
        if m is None:
            problems.append(problem("not a /dev/kmsg record", raw))
            continue
        prio, seq, usec = int(m.group(1)), int(m.group(2)), int(m.group(3))
        monotonic = usec / 1_000_000
        stamp = None
        if boot_time is not None:
            try:
                stamp = boot_time + dt.timedelta(microseconds=usec)
            except OverflowError:
                stamp = None
        lines.append(
            LogLine(
                message=m.group(5),
                timestamp=plausible(stamp),
                monotonic_s=monotonic,
                seq=seq,
                level=prio & 7,
                tag="kernel" if prio >> 3 == 0 else None,
                raw=raw,
            )
        )
    return Parsed(lines, problems)


# -- dmesg and syslog ----------------------------------------------------------------------

_PRINTK = re.compile(r"^\[\s*(\d{1,20}\.\d{1,20})\] ?")
_DMESG_T = re.compile(r"^\[(?:\w{3} )?(\w{3}) +(\d{1,2}) (\d{2}):(\d{2}):(\d{2}) (\d{4})\] ?")
_DMESG_H_ABS = re.compile(r"^\[(\w{3})(\d{1,2}) (\d{2}):(\d{2})\] ?")
_DMESG_H_REL = re.compile(r"^\[\s*\+(\d{1,20}\.\d{1,20})\] ?")
# `dmesg --time-format iso` separates the fraction with a comma (2024-11-15T12:02:03,470068+00:00)
_RFC3339 = re.compile(r"^(\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d{1,20})?(?:Z|[+-]\d{2}:?\d{2}))\s+")
_BSD = re.compile(r"^(\w{3}) +(\d{1,2}) (\d{2}):(\d{2}):(\d{2})(\.\d{1,9})?\s+")
_TAG = re.compile(r"^(?:([^\s:\[]+)\s+)?([^\s:\[]+)(?:\[\d{1,20}\])?:\s?")


def _yearless(
    month: str, day: str, hh: str, mm: str, ss: str, reference: dt.datetime | None, tz: dt.tzinfo
) -> dt.datetime | None:
    """A yearless local time placed in the year that keeps it at or before the reference time."""
    number = month_number(month)
    if reference is None or number is None:
        return None
    ref = reference.astimezone(tz)
    for year in (ref.year, ref.year - 1):
        try:
            stamp = dt.datetime(year, number, int(day), int(hh), int(mm), int(ss), tzinfo=tz)
        except ValueError:
            continue
        if stamp <= ref + dt.timedelta(days=1):
            return stamp.astimezone(dt.UTC)
    return None


def _rfc3339(text: str) -> dt.datetime | None:
    try:
        stamp = dt.datetime.fromisoformat(text.replace("Z", "+00:00").replace(",", "."))
        return stamp.astimezone(dt.UTC) if stamp.tzinfo is not None else None
    except (ValueError, OverflowError):  # year 1 or 9999 moved by its offset leaves the calendar
        return None


@guarded(list)
def parse_log_lines(
    text: str,
    reference: dt.datetime | None = None,
    tz: dt.tzinfo = dt.UTC,
    boot_time: dt.datetime | None = None,
) -> Parsed[list[LogLine]]:
    """dmesg, `dmesg -T`, `dmesg -H`, /var/log/kern.log, /var/log/messages (BSD or RFC3339),
    and `journalctl -k` in its short, short-iso and short-precise outputs.

    The format is recognised per line, so mixed input works. `reference` (aware) supplies the
    year for yearless formats; `tz` is the zone of local times (dmesg -T, BSD syslog). With
    `boot_time` (aware), lines that only carry printk time get boot_time + that time.
    Lines without any prefix (pasted logs, continuation lines) are kept as bare messages.
    """
    lines: list[LogLine] = []
    problems: list[str] = []
    human_base: dt.datetime | None = None  # dmesg -H: last absolute stamp, relative lines add to it
    for raw in text.splitlines():
        if not raw or raw.isspace():  # what `not raw.strip()` tests, without a copy of each line
            continue
        rest = raw
        stamp: dt.datetime | None = None
        monotonic: float | None = None
        tag: str | None = None
        first = raw[0]
        if first == "[":
            if m := _PRINTK.match(rest):
                monotonic = float(m.group(1))
                rest = rest[m.end() :]
            elif m := _DMESG_T.match(rest):
                number = month_number(m.group(1))
                try:
                    naive = dt.datetime(
                        int(m.group(6)), number or 0, int(m.group(2)), int(m.group(3)), int(m.group(4)), int(m.group(5))
                    )
                    stamp = naive.replace(tzinfo=tz).astimezone(dt.UTC)
                except (ValueError, OverflowError):
                    problems.append(problem("bad dmesg -T timestamp", raw))
                rest = rest[m.end() :]
            elif m := _DMESG_H_ABS.match(rest):
                stamp = _yearless(m.group(1), m.group(2), m.group(3), m.group(4), "00", reference, tz)
                human_base = stamp
                rest = rest[m.end() :]
            elif m := _DMESG_H_REL.match(rest):
                if human_base is not None:
                    try:
                        human_base = human_base + dt.timedelta(seconds=float(m.group(1)))
                    except OverflowError:
                        human_base = None
                stamp = human_base
                rest = rest[m.end() :]
        elif first.isdecimal() and (m := _RFC3339.match(rest)):
            stamp = _rfc3339(m.group(1))
            rest = rest[m.end() :]
            if "," not in m.group(1):  # dmesg's own iso lines carry no host or program: the message follows
                rest, tag, monotonic = _after_syslog_stamp(rest)
        elif first.isalpha() and (m := _BSD.match(rest)):
            stamp = _yearless(m.group(1), m.group(2), m.group(3), m.group(4), m.group(5), reference, tz)
            if stamp is not None and m.group(6):
                stamp += dt.timedelta(microseconds=int(float(m.group(6)) * 1_000_000))
            rest = rest[m.end() :]
            rest, tag, monotonic = _after_syslog_stamp(rest)
        if stamp is None and monotonic is not None and boot_time is not None:
            try:
                stamp = (boot_time + dt.timedelta(seconds=monotonic)).astimezone(dt.UTC)
            except OverflowError:
                stamp = None
        # positional (message, timestamp, monotonic_s, seq, level, tag, raw): a 100,000-line log is a
        # 100,000 of these, and keyword arguments cost more (bench/checker_cycle.py --part classify)
        lines.append(LogLine(rest, plausible(stamp) if stamp is not None else None, monotonic, None, None, tag, raw))
    return Parsed(lines, problems)


def _after_syslog_stamp(rest: str) -> tuple[str, str | None, float | None]:
    """'host kernel: [ 261.27] msg' -> ('msg', 'kernel', 261.27); the host is optional."""
    tag = None
    monotonic = None
    if m := _TAG.match(rest):
        tag = m.group(2)
        rest = rest[m.end() :]
    if tag == "kernel" and (p := _PRINTK.match(rest)):
        monotonic = float(p.group(1))
        rest = rest[p.end() :]
    return rest, tag, monotonic


# -- journalctl -k -o json -----------------------------------------------------------------

JOURNAL_KEPT_FIELDS = ("__CURSOR", "_BOOT_ID")


def _journal_message(value: Any) -> str | None:
    """MESSAGE is a string, or an array of bytes when it is not valid UTF-8."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(b, int) and 0 <= b <= 255 for b in value):
        return bytes(value).decode("utf-8", errors="replace")
    return None


def _journal_int(value: Any) -> int | None:
    if isinstance(value, str) and value.isdecimal() and len(value) <= 20:
        return int(value)
    return None


@guarded(list)
def parse_journal_json(text: str) -> Parsed[list[LogLine]]:
    """`journalctl -k -o json`: one JSON object per line. The kernel's own time
    (_SOURCE_MONOTONIC_TIMESTAMP) is the printk time; __REALTIME_TIMESTAMP the wall clock.
    Each line keeps its __CURSOR and _BOOT_ID in `fields`, so the caller can resume after it."""
    lines: list[LogLine] = []
    problems: list[str] = []
    for raw in text.splitlines():
        if not raw.strip():
            continue
        try:
            entry = json.loads(raw)
        except (ValueError, RecursionError):
            problems.append(problem("not a journal JSON record", raw))
            continue
        if not isinstance(entry, dict):
            problems.append(problem("journal record is not an object", raw))
            continue
        message = _journal_message(entry.get("MESSAGE"))
        if message is None:
            problems.append(problem("journal record without a MESSAGE", raw))
            continue
        realtime = _journal_int(entry.get("__REALTIME_TIMESTAMP"))
        monotonic = _journal_int(entry.get("_SOURCE_MONOTONIC_TIMESTAMP"))
        priority = _journal_int(entry.get("PRIORITY"))
        identifier = entry.get("SYSLOG_IDENTIFIER")
        kept = {key: value for key in JOURNAL_KEPT_FIELDS if isinstance(value := entry.get(key), str)}
        lines.append(
            LogLine(
                message=message,
                timestamp=epoch_utc(realtime / 1_000_000) if realtime is not None else None,
                monotonic_s=monotonic / 1_000_000 if monotonic is not None else None,
                level=priority & 7 if priority is not None else None,
                tag=identifier if isinstance(identifier, str) else None,
                raw=message,
                fields=kept,
            )
        )
    return Parsed(lines, problems)
