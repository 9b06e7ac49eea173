"""What the stall probe costs, and why it is a process of its own rather than threads of the agent.

Prints, for each period and active share (duty cycle), the probe's CPU time as a share of one CPU,
per wake-up, and beside the agent's cycle budget: the probe runs as the agent runs it (`serve`,
writing a results line every window) for --seconds, and the CPU time it measured itself in its
windows is summed, its first window (interpreter start-up) left out. Then the same probe as threads
inside a Python process whose other thread holds the GIL the way a collector does (a long
regular-expression scan and a JSON dump of a large report), beside a probe process on the same CPUs
at the same time: the threads read the GIL as stalls, the process does not.
Figures, no assertions (docs/agent.md, "Stall probe").
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from checker.agent.stallprobe import KEEP_WINDOWS, StallProbe, _write  # noqa: E402

BUDGET_PCT = 0.025  # the agent's check cycle: 15 ms of CPU per 60 s (docs/agent.md, "Figures")


def probe_process(cpus: str, period_ms: float, seconds: float, threshold_ms: float = 5.0) -> dict:
    argv = [sys.executable, "-m", "checker.agent.stallprobe", "--cpus", cpus, "--period-ms", str(period_ms)]
    argv += ["--threshold-ms", str(threshold_ms), "--", "sleep", str(seconds)]
    done = subprocess.run(argv, capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(done.stdout)


def probe_cost(cpus: str, period_ms: float, share: float, seconds: float, window_s: float) -> dict:
    """The probe as the agent runs it, for one window more than `seconds`; its windows after the first."""
    with tempfile.TemporaryDirectory() as directory:
        out = Path(directory) / "stalls.jsonl"
        argv = [sys.executable, "-m", "checker.agent.stallprobe", "--cpus", cpus, "--period-ms", f"{period_ms:g}"]
        argv += ["--window-s", f"{window_s:g}", "--active-share", f"{share:g}", "--out", str(out)]
        probe = subprocess.Popen(argv, cwd=ROOT)
        try:
            time.sleep(seconds + window_s * 1.5)
        finally:
            probe.terminate()
            probe.wait(timeout=5)
        lines = [json.loads(raw) for raw in out.read_text().splitlines()][1:]
    wall = sum(line["end"] - line["start"] for line in lines)
    wakeups = sum(c["wakeups"] for line in lines for c in line["cpus"].values())
    cpu_s = sum(line["probe_cpu_s"] for line in lines)
    return {
        "share_pct": cpu_s / wall * 100,
        "us_per_wakeup": cpu_s / max(wakeups, 1) * 1e6,
        "wakeups_s": wakeups / wall,
        "worst_ms": max(c["max_ms"] for line in lines for c in line["cpus"].values()),
    }


FLOOR = """
import os, resource, sys, time
os.sched_setaffinity(0, {int(sys.argv[1])})
period, seconds = float(sys.argv[2]) / 1000, float(sys.argv[3])
time.sleep(period)
usage = resource.getrusage(resource.RUSAGE_SELF)
start, cpu0, n = time.monotonic(), usage.ru_utime + usage.ru_stime, 0
while time.monotonic() - start < seconds:
    time.sleep(period)
    n += 1
usage = resource.getrusage(resource.RUSAGE_SELF)
print((usage.ru_utime + usage.ru_stime - cpu0) / n)
"""


def floor_us(cpu: int, period_ms: float, seconds: float) -> float:
    """CPU per wake-up of the barest Python sleep loop on one CPU: what any probe pays before its own work."""
    argv = [sys.executable, "-c", FLOOR, str(cpu), f"{period_ms:g}", f"{seconds:g}"]
    return float(subprocess.run(argv, capture_output=True, text=True, check=True).stdout) * 1e6


def rewrite_us(line: dict) -> float:
    """CPU of one window's results-file rewrite once the file holds KEEP_WINDOWS lines (an hour on)."""
    kept = deque([json.dumps(line, separators=(",", ":"))] * KEEP_WINDOWS, maxlen=KEEP_WINDOWS)
    with tempfile.TemporaryDirectory() as directory:
        path = str(Path(directory) / "stalls.jsonl")
        start = time.process_time()
        for _ in range(100):
            _write(path, kept)
        return (time.process_time() - start) / 100 * 1e6


def busy_gil(stop: threading.Event) -> None:
    """A collector's kind of work: C calls that hold the GIL for tens of milliseconds."""
    text = ("EDAC MC0: 1 CE memory read error on CPU_SrcID#0_Ha#0_Chan#2_DIMM#0 " * 40_000) + "x"
    report = {"events": [{"lines": [f"line {i}" * 8 for i in range(40)], "n": i} for i in range(5_000)]}
    while not stop.is_set():
        re.findall(r"(\w+)#(\d)_Chan#(\d)_DIMM#(\d) x", text)
        json.dumps(report)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="measured per run (after a first window)")
    parser.add_argument("--window-s", type=float, default=5.0)
    parser.add_argument("--runs", default="20:1,50:1,100:1,100:0.5,100:0.25", help="PERIOD_MS:ACTIVE_SHARE,…")
    parser.add_argument("--cpus", default="", help="CPUs probed (default: up to two this process may use)")
    parser.add_argument("--gil-seconds", type=float, default=10.0, help="the GIL comparison's length; 0: skip it")
    args = parser.parse_args()
    allowed = sorted(os.sched_getaffinity(0))
    cpus = [int(c) for c in args.cpus.split(",")] if args.cpus else [allowed[0], allowed[-1]][: len(allowed)]
    cpu_list = ",".join(map(str, sorted(set(cpus))))
    print(
        f"# command: .venv/bin/python bench/stall_probe.py --seconds {args.seconds:g} --window-s {args.window_s:g}"
        f" --runs {args.runs}" + (f" --cpus {args.cpus}" if args.cpus else "")
    )
    print(
        f"# machine: {os.cpu_count()} cpus, python {platform.python_version()}, {platform.release()}, "
        f"load {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    print(f"probe process on CPUs {cpu_list} as the agent runs it, {args.seconds:g} s per run; budget {BUDGET_PCT} %:")
    for run in args.runs.split(","):
        period, _, share = run.partition(":")
        cost = probe_cost(cpu_list, float(period), float(share or 1), args.seconds, args.window_s)
        print(
            f"  period {float(period):6.1f} ms  active {float(share or 1):4.2f}"
            f"  cpu {cost['share_pct']:6.3f} % of one CPU ({cost['share_pct'] / BUDGET_PCT:5.1f} x budget)"
            f"  {cost['us_per_wakeup']:5.1f} us/wake-up  {cost['wakeups_s']:6.1f} wake-ups/s"
            f"  largest overshoot {cost['worst_ms']:7.2f} ms"
        )
    floor = floor_us(cpus[0], 100.0, args.seconds / 2)
    print(f"  floor: a bare time.sleep(0.1) loop on CPU {cpus[0]}, nothing else   {floor:5.1f} us/wake-up")
    line = StallProbe(cpus, 100.0, 5.0).window()
    write = rewrite_us(line)
    print(
        f"  results file, {KEEP_WINDOWS} lines kept: {write:5.0f} us a window rewrite"
        f" = {write / 1e6 / args.window_s * 100:6.4f} % of one CPU at a {args.window_s:g} s window"
    )
    print(f"  load after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if not args.gil_seconds:
        return
    cpus = allowed
    cpu_list = ",".join(map(str, cpus))
    args.seconds = args.gil_seconds
    print(f"under the GIL: a thread holding it in long C calls, {args.seconds:g} s, period 10 ms:")
    stop = threading.Event()
    worker = threading.Thread(target=busy_gil, args=(stop,), daemon=True)
    in_process = StallProbe(cpus, 10.0, 5.0)
    in_process.start()
    worker.start()
    outside = probe_process(cpu_list, 10.0, args.seconds)
    stop.set()
    threads = in_process.window()
    in_process.close()
    for name, line in (("threads in the busy process", threads), ("probe process, same time", outside)):
        worst = max(c["max_ms"] for c in line["cpus"].values())
        count = sum(c["count"] for c in line["cpus"].values())
        print(
            f"  {name:28s} largest overshoot {worst:8.2f} ms  stalls >= 5 ms {count:5d}"
            f"  all-CPU stalls {line['coincident_count']}"
        )


if __name__ == "__main__":
    main()
