"""What the stall probe costs, and why it is a process of its own rather than threads of the agent.

Prints, for each sleep period, the probe's CPU time as a share of one CPU (per probed CPU and in
all), measured by the probe itself over a run of --seconds while the machine does what it does;
then the same probe as threads inside a Python process whose other thread holds the GIL the way a
collector does (a long regular-expression scan and a JSON dump of a large report), beside a probe
process on the same CPUs at the same time: the threads read the GIL as stalls, the process does not.
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
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from checker.agent.stallprobe import StallProbe  # noqa: E402


def probe_process(cpus: str, period_ms: float, seconds: float, threshold_ms: float = 5.0) -> dict:
    argv = [sys.executable, "-m", "checker.agent.stallprobe", "--cpus", cpus, "--period-ms", str(period_ms)]
    argv += ["--threshold-ms", str(threshold_ms), "--", "sleep", str(seconds)]
    done = subprocess.run(argv, capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(done.stdout)


def busy_gil(stop: threading.Event) -> None:
    """A collector's kind of work: C calls that hold the GIL for tens of milliseconds."""
    text = ("EDAC MC0: 1 CE memory read error on CPU_SrcID#0_Ha#0_Chan#2_DIMM#0 " * 40_000) + "x"
    report = {"events": [{"lines": [f"line {i}" * 8 for i in range(40)], "n": i} for i in range(5_000)]}
    while not stop.is_set():
        re.findall(r"(\w+)#(\d)_Chan#(\d)_DIMM#(\d) x", text)
        json.dumps(report)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--periods", default="1,5,10,20,50,100")
    args = parser.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    cpu_list = ",".join(map(str, cpus))
    print(f"# command: .venv/bin/python bench/stall_probe.py --seconds {args.seconds:g} --periods {args.periods}")
    print(
        f"# machine: {os.cpu_count()} cpus, python {platform.python_version()}, {platform.release()}, "
        f"load {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    print(f"probe process on CPUs {cpu_list}, {args.seconds:g} s per period (CPU time the probe measured itself):")
    for period in (float(p) for p in args.periods.split(",")):
        line = probe_process(cpu_list, period, args.seconds)
        share = line["probe_cpu_s"] / (line["end"] - line["start"]) * 100
        wakeups = sum(c["wakeups"] for c in line["cpus"].values())
        worst = max(c["max_ms"] for c in line["cpus"].values())
        print(
            f"  period {period:6.1f} ms  cpu {share:6.3f} % of one CPU in all"
            f" ({share / len(cpus):6.3f} % per probed CPU)"
            f"  {wakeups / args.seconds:7.0f} wake-ups/s  largest overshoot {worst:7.2f} ms"
        )
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
