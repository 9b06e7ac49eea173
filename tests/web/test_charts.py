"""SVG charts: geometry from numbers, buckets that keep empty hours and days."""

from __future__ import annotations

import datetime as dt

from api.web import charts

T = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)


def test_line_chart_scales_to_a_round_top_and_spans_the_samples() -> None:
    chart = charts.line_chart("CE", "CE/s", {"A1": [(T, 0.0), (T + dt.timedelta(hours=1), 3.0)]})
    assert not chart.empty
    assert [t.label for t in chart.y_ticks] == ["0", "1.25", "2.5", "3.75", "5"]
    [series] = chart.series
    first, last = series.points.split(" ")
    assert first == f"{charts.PAD_LEFT}.0,{charts.HEIGHT - charts.PAD_BOTTOM}.0"  # bottom left: (T, 0)
    x, y = (float(v) for v in last.split(","))
    assert x == charts.WIDTH - charts.PAD_RIGHT
    plot_height = charts.HEIGHT - charts.PAD_TOP - charts.PAD_BOTTOM
    assert y == round(charts.PAD_TOP + plot_height * (1 - 3 / 5), 1)
    assert series.dots[1][2] == "2026-03-01 13:00:00Z: 3 CE/s"
    assert (chart.x_ticks[0].label, chart.x_ticks[-1].label) == ("12:00", "13:00")


def test_empty_charts_say_so() -> None:
    assert charts.line_chart("CE", "CE/s", {"A1": []}).empty
    assert charts.bar_chart("Tickets", "tickets", [("03-01", 0), ("03-02", 0)]).empty


def test_bars_are_proportional() -> None:
    chart = charts.bar_chart("Tickets", "tickets", [("03-01", 1), ("03-02", 5), ("03-03", 2)])
    heights = [bar.height for bar in chart.bars]
    assert heights[1] == charts.HEIGHT - charts.PAD_TOP - charts.PAD_BOTTOM  # 5 is the top of the axis
    assert heights[0] * 5 == heights[1]
    assert heights[2] * 5 == heights[1] * 2
    assert chart.y_ticks[-1].label == "5"


def test_hourly_and_daily_buckets_keep_quiet_periods() -> None:
    samples = [(T - dt.timedelta(minutes=30), 2.0), (T - dt.timedelta(minutes=20), 1.0), (T, 5.0)]
    hours = charts.hourly(samples, end=T + dt.timedelta(minutes=10), hours=3)
    assert hours == [(T - dt.timedelta(hours=2), 0.0), (T - dt.timedelta(hours=1), 3.0), (T, 5.0)]
    days = charts.daily([T, T, T - dt.timedelta(days=2), T - dt.timedelta(days=30)], end=T, days=3)
    assert days == [("02-27", 1.0), ("02-28", 0.0), ("03-01", 2.0)]
