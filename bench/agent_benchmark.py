"""What the agent's daily benchmark costs (checker/agent/benchmark.py): wall time, CPU time and the resident
memory it adds, over a few runs on this machine, with the scores it gives.

It prints figures; it asserts nothing. Usage: .venv/bin/python bench/agent_benchmark.py [runs]
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import sys

from checker.agent.benchmark import run_benchmark
from checker.collectors.base import LiveHost


def memory_kb(field: str) -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(field + ":"))


def main(runs: int) -> None:
    print(f"# command: .venv/bin/python bench/agent_benchmark.py {runs}")
    print(f"# machine: {os.cpu_count()} cpus, python {platform.python_version()}, {platform.release()}")
    rss_before = memory_kb("VmRSS")
    host = LiveHost()
    for _ in range(runs):
        before = os.times()
        result, run = run_benchmark(host, dt.datetime.now(dt.UTC), check_load=False)  # the agent would skip a busy host
        after = os.times()
        cpu_s = (after.user + after.system) - (before.user + before.system)
        if result is None:
            print(f"not run: {run.reason}")
            return
        print(
            f"{result.name}: score {result.score} {result.unit}  wall {result.duration_s:.3f} s  cpu {cpu_s:.2f} s  "
            f"cpu{result.cpu} at {result.ghz} GHz ({result.clock_source})  parts {result.parts}  "
            f"conditions {result.conditions}"
        )
    print(f"resident memory: {rss_before} kB before, peak {memory_kb('VmHWM')} kB, {memory_kb('VmRSS')} kB after")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
