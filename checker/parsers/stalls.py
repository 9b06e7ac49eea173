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
    coincident: list[tuple[float, float, float | None, float | None]]  # at, ms, SMIs around it, over how long
    coincident_count: int
    probe_cpu_s: float | None
    problems: tuple[str, ...] = ()
    active_share: float = 1.0  # the share of the window the probe was awake (1 before duty cycles existed)
    # What else went on (checker/agent/stallwitness.py); None: not read, or a probe from before it.
    cpus_asked: tuple[int, ...] = ()
    hypervisor: bool | None = None
    steal_ms: float | None = None
    throttled_ms: float | None = None
    load_per_cpu: float | None = None
    smis: int | None = None


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ValueError(f"not a non-negative number: {value!r}")
    return float(value)


def _optional(line: dict[str, Any], key: str) -> float | None:
    value = line.get(key)
    return None if value is None else _number(value)


def _window(line: dict[str, Any]) -> Window:
    cpus = {
        int(cpu): {k: _number(v[k]) for k in ("max_ms", "total_ms", "count", "wakeups")}
        for cpu, v in line["cpus"].items()
    }
    events = [
        (_number(e["at"]), _number(e["ms"]), _optional(e, "smis"), _optional(e, "smis_span_s"))
        for e in line.get("coincident", [])
    ]
    cpu_s = line.get("probe_cpu_s")
    cpus_online = _optional(line, "online_cpus")
    share = _number(line.get("active_share", 1.0))
    if not 0 < share <= 1:
        raise ValueError(f"active_share out of (0, 1]: {share!r}")
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
        active_share=share,
        cpus_asked=tuple(int(_number(cpu)) for cpu in line.get("cpus_asked", [])[:4096]),
        hypervisor=line["hypervisor"] if isinstance(line.get("hypervisor"), bool) else None,
        steal_ms=_optional(line, "steal_ms"),
        throttled_ms=_optional(line, "throttled_ms"),
        load_per_cpu=(
            round(load / cpus_online, 3) if (load := _optional(line, "load1")) is not None and cpus_online else None
        ),
        smis=int(smis) if (smis := _optional(line, "smis")) is not None else None,
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
    and counts added; the all-core stalls listed up to MAX_LISTED and all counted; the active share
    weighted by each window's length."""
    per_cpu: dict[int, dict[str, float]] = {}
    for window in windows:
        for cpu, figures in window.cpus.items():
            seen = per_cpu.setdefault(cpu, {"max_ms": 0.0, "total_ms": 0.0, "count": 0.0, "wakeups": 0.0})
            seen["max_ms"] = max(seen["max_ms"], figures["max_ms"])
            for key in ("total_ms", "count", "wakeups"):
                seen[key] += figures[key]
    events = [
        CoincidentStall(
            at=_at(at),
            ms=ms,
            # the counter read around the stall, else over its whole window
            smis_around=int(smis) if smis is not None else window.smis,
            smis_span_s=span
            if smis is not None
            else (round(window.end - window.start, 3) if window.smis is not None else None),
            window_steal_ms=window.steal_ms,
            window_throttled_ms=window.throttled_ms,
            window_load_per_cpu=window.load_per_cpu,
        )
        for window in windows
        for at, ms, smis, span in window.coincident
    ]
    cpu_costs = [w.probe_cpu_s for w in windows if w.probe_cpu_s is not None]
    spans = [max(w.end - w.start, 0.0) for w in windows]
    active = (
        sum(w.active_share * span for w, span in zip(windows, spans, strict=True)) / sum(spans) if sum(spans) else 1.0
    )
    last = windows[-1]
    flags = [w.hypervisor for w in windows]
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
        coincident=events[:MAX_LISTED],
        coincident_count=sum(w.coincident_count for w in windows),
        probe_cpu_s=round(sum(cpu_costs), 4) if cpu_costs else None,
        active_share=round(min(max(active, 0.0001), 1.0), 4),
        hypervisor=True if True in flags else (False if flags and None not in flags else None),
        steal_ms=_sum([w.steal_ms for w in windows]),
        throttled_ms=_sum([w.throttled_ms for w in windows]),
        smis=int(smis) if (smis := _sum([w.smis for w in windows], every=True)) is not None else None,
        one_cpu=one_cpu(windows, sorted(per_cpu)),
    )


def _sum(values: list[float | int | None], every: bool = False) -> float | None:
    """The known values added; None when none is known (or, with `every`, when one is not)."""
    known = [v for v in values if v is not None]
    if not known or (every and len(known) < len(values)):
        return None
    return round(sum(known), 3)


def one_cpu(windows: list[Window], probed: list[int]) -> str | None:
    """Why fewer than two CPUs were probed (then an all-core stall cannot be told from one CPU's)."""
    if len(probed) >= 2:
        return None
    asked = sorted({cpu for w in windows for cpu in w.cpus_asked})
    troubles = sorted({p for w in windows for p in w.problems if "cannot pin" in p})
    got = ",".join(map(str, probed)) or "none"
    if not asked:
        return f"one CPU probed ({got})"
    if len(asked) < 2:
        return f"the agent found one housekeeping CPU to probe ({asked[0]}); probed: {got}"
    return f"asked for CPUs {','.join(map(str, asked))}, probed {got}" + (f": {troubles[0]}" if troubles else "")
