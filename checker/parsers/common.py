"""Shared pieces of the pure parsers: the result type, problem excerpts, number and cpu-list helpers.

Parsers never raise on bad input; they return what they could read and say what they could not.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, cast

from checker.schemas import EARLIEST, LATEST

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., "Parsed[Any]"])

EXCERPT_CHARS = 200
MAX_CPUS = 4096
MAX_INT64 = 2**63 - 1


@dataclass
class Parsed(Generic[T]):
    """A parser's answer: the value it could build and what was wrong with the input."""

    value: T
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def guarded(default: Callable[[], object]) -> Callable[[F], F]:
    """Last line of defence for a public parser: an unexpected exception becomes a problem
    ('internal parser error') and `default()` as the value, so one odd input cannot stop a
    check cycle. The parsers are written not to need it; the fuzz tests fail if it ever fires.
    """

    def decorate(func: F) -> F:
        @functools.wraps(func)
        def run(*args: Any, **kwargs: Any) -> Parsed[Any]:
            try:
                return func(*args, **kwargs)
            except Exception as error:
                offending = args[0] if args and isinstance(args[0], str) else repr(args[:1])
                what = f"{INTERNAL_ERROR} in {func.__name__} ({type(error).__name__}: {excerpt(str(error), 80)})"
                return Parsed(default(), [problem(what, offending)])

        return cast(F, run)

    return decorate


INTERNAL_ERROR = "internal parser error"


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    """A short, single-line, printable slice of offending input for a problem message."""
    flat = text.replace("\r", "\\r").replace("\n", "\\n").replace("\t", "\\t")
    flat = "".join(ch if ch.isprintable() else "?" for ch in flat)
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def problem(what: str, offending: str) -> str:
    """'what was wrong: <excerpt>' with the excerpt bounded to EXCERPT_CHARS."""
    return f"{what}: {excerpt(offending)!r}"


def clip(text: str, limit: int) -> str:
    """Cut text to a schema field's max_length."""
    return text if len(text) <= limit else text[:limit]


_INT_RE = re.compile(r"-?\d[\d,.']*")


def to_int(text: str | None, base: int = 10) -> int | None:
    """An integer from a tool's field, or None. Accepts '0x' hex when base is 0."""
    if text is None:
        return None
    value = text.strip()
    if not value:
        return None
    try:
        number = int(value, base)
    except ValueError:
        return None
    # Past 64 bits no counter, id or size of a host's goes: a broken field, not a value (the report
    # schema refuses it, and one field must not cost a collector its whole section).
    return number if -(2**63) <= number < 2**63 else None


def first_int(text: str | None) -> int | None:
    """The first integer in text, ignoring thousands separators ('1,016', '1.954.515').

    Only for fields that are whole numbers (counters, hours): '5.39' would read as 539.
    """
    if not text:
        return None
    m = _INT_RE.search(text)
    if m is None:
        return None
    digits = re.sub(r"[,.']", "", m.group(0))
    try:
        return int64(int(digits))
    except ValueError:
        return None


def int64(number: int | None) -> int | None:
    """The number if it fits the report's 64-bit integer fields, else None: past 64 bits a field is
    broken, not a value."""
    return number if number is not None and -MAX_INT64 - 1 <= number <= MAX_INT64 else None


def nonneg(value: int | None) -> int | None:
    return value if value is None or value >= 0 else None


def to_float(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return float(text.strip())
    except ValueError:
        return None


@guarded(list)
def parse_cpu_list(text: str, max_cpus: int = MAX_CPUS) -> Parsed[list[int]]:
    """The kernel's cpu-list syntax: '0-3,5,7-9', with optional group strides '0-15:2/4'.

    Used by isolcpus=, nohz_full=, cpulist files and smp_affinity_list. Returns a sorted,
    de-duplicated list; anything it cannot read is a problem, never an exception.
    """
    cpus: set[int] = set()
    problems: list[str] = []
    body = text.strip()
    if not body:
        return Parsed([], [])
    for part in body.split(","):
        item = part.strip()
        if not item:
            continue
        m = re.fullmatch(r"(\d{1,20})(?:-(\d{1,20})(?::(\d{1,20})/(\d{1,20}))?)?", item)
        if m is None:
            problems.append(problem("not a cpu or cpu range", item))
            continue
        start = int(m.group(1))
        end = int(m.group(2)) if m.group(2) is not None else start
        used = int(m.group(3)) if m.group(3) is not None else 1
        group = int(m.group(4)) if m.group(4) is not None else 1
        if end < start or used < 1 or group < 1 or used > group:
            problems.append(problem("bad cpu range", item))
            continue
        if end >= max_cpus:
            problems.append(problem(f"cpu number beyond {max_cpus}", item))
            end = max_cpus - 1
        for base in range(start, end + 1, group):
            for cpu in range(base, min(base + used, end + 1)):
                cpus.add(cpu)
    return Parsed(sorted(cpus), problems)


_MONTHS = {
    m: i for i, m in enumerate(("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), 1)
}


def month_number(name: str) -> int | None:
    """'Feb' -> 2 without locale dependence."""
    return _MONTHS.get(name[:3].lower())


def epoch_utc(seconds: int | float) -> dt.datetime | None:
    try:
        return plausible(dt.datetime.fromtimestamp(seconds, dt.UTC))
    except (OverflowError, OSError, ValueError):
        return None


def plausible(stamp: dt.datetime | None) -> dt.datetime | None:
    """A time the report accepts (1970-2100, the schema's Timestamp), else None: a BMC clock that
    was never set, or a mangled date, is no time at all."""
    return stamp if stamp is not None and EARLIEST <= stamp < LATEST else None


def split_key_value(line: str, sep: str = ":") -> tuple[str, str] | None:
    """'Key   : value' -> ('Key', 'value'); None when there is no separator or no key."""
    key, found, value = line.partition(sep)
    if not found:
        return None
    key = key.strip()
    if not key:
        return None
    return key, value.strip()
