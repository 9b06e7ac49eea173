"""The stall probe's results file: one JSON line per window (checker/agent/stallprobe.py), merged
into the report's `stalls` section over the windows since the previous report.

Pure: text in, the section and the problems out. A line that is not a window (cut by a crash while
it was written, or not the probe's) is skipped and named; the rest still count.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from dataclasses import dataclass
from typing import Any

from checker.parsers.common import Parsed, excerpt
from checker.schemas import CoincidentStall, CpuStalls, Stalls

MAX_LISTED = 64  # all-core stalls listed in a report (Stalls.coincident); all are counted


@dataclass(frozen=True)
class Window:
    start: float
    end: float
    period_ms: float
    threshold_ms: float
    cpus: dict[int, dict[str, float]]
    coincident: list[tuple[float, float]]
    coincident_count: int
    probe_cpu_s: float | None
    problems: tuple[str, ...] = ()


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ValueError(f"not a non-negative number: {value!r}")
    return float(value)


def _window(line: dict[str, Any]) -> Window:
    cpus = {
        int(cpu): {k: _number(v[k]) for k in ("max_ms", "total_ms", "count", "wakeups")}
        for cpu, v in line["cpus"].items()
    }
    events = [(_number(e["at"]), _number(e["ms"])) for e in line.get("coincident", [])]
    cpu_s = line.get("probe_cpu_s")
    return Window(
        start=_number(line["start"]),
        end=_number(line["end"]),
        period_ms=_number(line["period_ms"]),
        threshold_ms=_number(line["threshold_ms"]),
        cpus=cpus,
        coincident=events,
        coincident_count=int(_number(line.get("coincident_count", len(events)))),
        probe_cpu_s=_number(cpu_s) if cpu_s is not None else None,
        problems=tuple(str(p)[:200] for p in line.get("problems", [])[:4]),
    )


def parse_stall_windows(text: str) -> Parsed[list[Window]]:
    windows: list[Window] = []
    problems: list[str] = []
    for number, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            line = json.loads(raw)
            if not isinstance(line, dict) or line.get("format") != 1:
                raise ValueError("not a format 1 window")
            windows.append(_window(line))
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            problems.append(f"line {number}: {error}: {excerpt(raw, 120)}")
    return Parsed(windows, problems[:5])


def _at(seconds: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(seconds, dt.UTC)


def merge_windows(windows: list[Window]) -> Stalls:
    """The windows (oldest first, at least one) as one section: per CPU the largest stall, the totals
    and counts added; the all-core stalls listed up to MAX_LISTED and all counted."""
    per_cpu: dict[int, dict[str, float]] = {}
    for window in windows:
        for cpu, figures in window.cpus.items():
            seen = per_cpu.setdefault(cpu, {"max_ms": 0.0, "total_ms": 0.0, "count": 0.0, "wakeups": 0.0})
            seen["max_ms"] = max(seen["max_ms"], figures["max_ms"])
            for key in ("total_ms", "count", "wakeups"):
                seen[key] += figures[key]
    events = [event for window in windows for event in window.coincident]
    cpu_costs = [w.probe_cpu_s for w in windows if w.probe_cpu_s is not None]
    last = windows[-1]
    return Stalls(
        started_at=_at(windows[0].start),
        ended_at=_at(last.end),
        interval_s=round(last.end - windows[0].start, 3),
        period_ms=last.period_ms,
        threshold_ms=last.threshold_ms,
        cpus=[
            CpuStalls(
                cpu=cpu,
                max_ms=f["max_ms"],
                total_ms=round(f["total_ms"], 3),
                count=int(f["count"]),
                wakeups=int(f["wakeups"]),
            )
            for cpu, f in sorted(per_cpu.items())
        ],
        coincident=[CoincidentStall(at=_at(at), ms=ms) for at, ms in events[:MAX_LISTED]],
        coincident_count=sum(w.coincident_count for w in windows),
        probe_cpu_s=round(sum(cpu_costs), 4) if cpu_costs else None,
    )
