"""Charts as server-rendered SVG: no JavaScript, nothing fetched, works air-gapped.

These functions compute geometry only (numbers); the `_chart.html` macro
writes the SVG, so every label goes through the same autoescaping as the rest
of the page.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

WIDTH = 640
HEIGHT = 200
PAD_LEFT, PAD_RIGHT, PAD_TOP, PAD_BOTTOM = 56, 12, 12, 28


@dataclass(frozen=True)
class Tick:
    position: float
    label: str


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    label: str
    value: float


@dataclass(frozen=True)
class Series:
    name: str
    points: str
    """'x,y x,y …' for a <polyline>."""
    dots: list[tuple[float, float, str]]
    """(x, y, tooltip) per sample."""


@dataclass(frozen=True)
class Chart:
    title: str
    unit: str
    kind: str  # "line" or "bars"
    width: int = WIDTH
    height: int = HEIGHT
    series: list[Series] = field(default_factory=list)
    bars: list[Bar] = field(default_factory=list)
    x_ticks: list[Tick] = field(default_factory=list)
    y_ticks: list[Tick] = field(default_factory=list)
    empty: bool = False

    @property
    def plot_left(self) -> int:
        return PAD_LEFT

    @property
    def plot_right(self) -> int:
        return self.width - PAD_RIGHT

    @property
    def plot_bottom(self) -> int:
        return self.height - PAD_BOTTOM


def _nice_max(value: float) -> float:
    """The smallest 1, 2 or 5 times a power of ten at or above `value`, so axis labels are round numbers."""
    if value <= 0:
        return 1.0
    magnitude = 10.0 ** math.floor(math.log10(value))
    return next(step * magnitude for step in (1, 2, 5, 10) if step * magnitude >= value * (1 - 1e-9))


def _label(value: float) -> str:
    return f"{value:.3g}"


def _y_ticks(top: float) -> list[Tick]:
    plot = HEIGHT - PAD_BOTTOM - PAD_TOP
    return [Tick(PAD_TOP + plot * (1 - i / 4), _label(top * i / 4)) for i in range(5)]


def line_chart(
    title: str,
    unit: str,
    series: Mapping[str, Sequence[tuple[dt.datetime, float]]],
    *,
    start: dt.datetime | None = None,
    end: dt.datetime | None = None,
) -> Chart:
    """One line per named series over time; the x axis spans start..end (default: the samples)."""
    samples = [point for points in series.values() for point in points]
    if not samples:
        return Chart(title=title, unit=unit, kind="line", empty=True)
    first = start or min(at for at, _ in samples)
    last = end or max(at for at, _ in samples)
    span = max((last - first).total_seconds(), 1.0)
    top = _nice_max(max(value for _, value in samples))
    plot_w = WIDTH - PAD_LEFT - PAD_RIGHT
    plot_h = HEIGHT - PAD_TOP - PAD_BOTTOM

    def x(at: dt.datetime) -> float:
        return round(PAD_LEFT + plot_w * (at - first).total_seconds() / span, 1)

    def y(value: float) -> float:
        return round(PAD_TOP + plot_h * (1 - value / top), 1)

    drawn = []
    for name, points in series.items():
        ordered = sorted(points)
        drawn.append(
            Series(
                name=name,
                points=" ".join(f"{x(at)},{y(v)}" for at, v in ordered),
                dots=[(x(at), y(v), f"{at:%Y-%m-%d %H:%M:%S}Z: {_label(v)} {unit}") for at, v in ordered],
            )
        )
    shape = (
        "%H:%M:%S" if span < 1200 else "%H:%M" if span <= 6 * 3600 else "%m-%d %H:%M" if span <= 2 * 86400 else "%m-%d"
    )
    x_ticks = [Tick(x(at), at.strftime(shape)) for at in (first + dt.timedelta(seconds=span * i / 4) for i in range(5))]
    return Chart(title=title, unit=unit, kind="line", series=drawn, x_ticks=x_ticks, y_ticks=_y_ticks(top))


def bar_chart(title: str, unit: str, buckets: Sequence[tuple[str, float]]) -> Chart:
    """One bar per labelled bucket, in the order given."""
    if not buckets or not any(value for _, value in buckets):
        return Chart(title=title, unit=unit, kind="bars", empty=True)
    top = _nice_max(max(value for _, value in buckets))
    plot_w = WIDTH - PAD_LEFT - PAD_RIGHT
    plot_h = HEIGHT - PAD_TOP - PAD_BOTTOM
    slot = plot_w / len(buckets)
    bars = []
    for i, (label, value) in enumerate(buckets):
        height = plot_h * value / top
        bars.append(
            Bar(
                x=round(PAD_LEFT + slot * i + slot * 0.15, 1),
                y=round(PAD_TOP + plot_h - height, 1),
                width=round(slot * 0.7, 1),
                height=round(height, 1),
                label=label,
                value=value,
            )
        )
    every = max(1, len(buckets) // 7)
    x_ticks = [Tick(round(b.x + b.width / 2, 1), b.label) for i, b in enumerate(bars) if i % every == 0]
    return Chart(title=title, unit=unit, kind="bars", bars=bars, x_ticks=x_ticks, y_ticks=_y_ticks(top))


def hourly(
    samples: Sequence[tuple[dt.datetime, float]], *, end: dt.datetime, hours: int
) -> list[tuple[dt.datetime, float]]:
    """Sum samples into whole UTC hours ending at `end` (every hour present, empty ones as 0)."""
    last = end.astimezone(dt.UTC).replace(minute=0, second=0, microsecond=0)
    sums = {last - dt.timedelta(hours=h): 0.0 for h in range(hours)}
    for at, value in samples:
        hour = at.astimezone(dt.UTC).replace(minute=0, second=0, microsecond=0)
        if hour in sums:
            sums[hour] += value
    return sorted(sums.items())


def daily(moments: Sequence[dt.datetime], *, end: dt.datetime, days: int) -> list[tuple[str, float]]:
    """Count moments per UTC day, the last `days` days ending today, labelled MM-DD."""
    today = end.astimezone(dt.UTC).date()
    counts = {today - dt.timedelta(days=d): 0.0 for d in range(days)}
    for at in moments:
        day = at.astimezone(dt.UTC).date()
        if day in counts:
            counts[day] += 1
    return [(f"{day:%m-%d}", count) for day, count in sorted(counts.items())]


def distribution(scores: Sequence[float], mark: float, *, bins: int = 12) -> list[tuple[str, float]]:
    """Scores counted into `bins` equal ranges from the lowest to the highest, labelled by their lower edge;
    the range holding `mark` (this host's score) is labelled with a ◀ after it."""
    values = [*scores, mark]
    low, high = min(values), max(values)
    width = (high - low) / bins or 1.0
    counts = [0.0] * bins
    for value in scores:
        counts[min(bins - 1, int((value - low) / width))] += 1
    marked = min(bins - 1, int((mark - low) / width))
    return [(f"{_label(low + width * i)}{' ◀' if i == marked else ''}", counts[i]) for i in range(bins)]
