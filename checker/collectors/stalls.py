"""Stalls: the stall probe's windows since the previous report (checker/agent/stallprobe.py).

The probe, a child process of the agent, writes one line per window to `stalls.jsonl` in the agent's
state directory; this collector reads the windows that ended after its cursor (the last window it
reported) and merges them. Results older than three windows mean the probe is not running: the
collector says so rather than report a quiet host it did not watch.
"""

from __future__ import annotations

import time

from checker.collectors.context import Context, ParseFailed, Unavailable
from checker.parsers.stalls import merge_windows, parse_stall_windows

RESULTS_NAME = "stalls.jsonl"
DEFAULT_STATE_DIR = "/var/lib/fleetfix-agent"  # FLEETFIX_AGENT_STATE_DIR's default
STALE_WINDOWS = 3


def results_path(ctx: Context) -> str:
    """In the agent's state directory (where its cursors live); the default one for `fleetfix check`."""
    directory = str(ctx.state.path.parent) if ctx.state.path is not None else DEFAULT_STATE_DIR
    return f"{directory}/{RESULTS_NAME}"


def collect(ctx: Context) -> None:
    path = results_path(ctx)
    text = ctx.host.read_text(path)
    if text is None:
        raise Unavailable(
            f"no stall probe results at {path} (FLEETFIX_AGENT_STALL_PROBE is off, the probe could not start, "
            "or its first window has not ended)"
        )
    parsed = parse_stall_windows(text)
    windows = parsed.value
    if not windows:
        raise ParseFailed(f"{path}: {parsed.problems[0] if parsed.problems else 'no window'}", text[:2000])
    for problem in parsed.problems:
        ctx.problem(f"{path}: {problem}")
    newest = windows[-1]
    window_s = max(newest.end - newest.start, 1.0)
    if ctx.state.path is not None and time.time() - newest.end > STALE_WINDOWS * window_s + 5:
        raise Unavailable(
            f"{path}: the probe's last window ended {time.time() - newest.end:.0f} s ago: it is not running"
        )
    since = ctx.state.get("stalls").get("end")
    if not isinstance(since, int | float):
        fresh = [newest]  # the first report: the latest window
    else:
        fresh = [w for w in windows if w.end > since]
        if not fresh:
            ctx.problem(f"{path}: no probe window ended since the last report")
            return
        if windows[0].start > since + window_s:
            ctx.problem(f"{path}: windows between the last report and {windows[0].start:.0f} were not kept")
    for problem in {p for w in fresh for p in w.problems}:
        ctx.problem(f"stall probe: {problem}")
    ctx.observations.stalls = merge_windows(fresh)
    ctx.state.stage("stalls", {"end": newest.end})
