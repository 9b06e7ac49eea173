"""The stall probe: one thread per probed CPU sleeps a fixed period and records how late it woke.

Seed 000 measured the cost of memory-error reporting with "a fine-grained stall detector": an SMI
(firmware-first logging) stalls every core for hundreds of milliseconds at once, a CMCI or the EDAC
poll stalls one core. A thread pinned to a CPU that asks to sleep P ms and wakes P + x ms later was
kept off that CPU for about x ms; stalls seen on every probed CPU in the same wall-clock window are
the all-core signature. The probe runs as a small process of its own (stdlib only, started by the
agent; docs/agent.md says why a process and not threads of the agent: the agent's own work holds the
GIL and would read as stalls), only on housekeeping CPUs (seed 004: never on isolated or nohz_full
cores; an SMI stalls every core, so the housekeeping ones see it).

The threads wake on one grid of the monotonic clock (multiples of the period, each thread a
millisecond after the one before: two threads woken at the same instant fight over the GIL, which
nearly doubled the CPU a wake-up costs), so an all-core stall is cut about the same way on every CPU.
Its measured length, from the latest due moment to the wake-up, is at most one period short of the
whole stall (each thread was due within one period of its start). A stall shorter than the period
is seen only when it covers a wake-up (with a probability of about its length over the period).
With an active share below 1 the threads sleep through the rest of each window (a duty cycle:
cheaper, and blind there). Each wake-up costs CPU whatever the language; docs/agent.md ("Stall
probe") has the measurements and the probe's own budget.

Every WINDOW seconds it appends one JSON line to its results file (the `stalls` collector reads
them, checker/parsers/stalls.py): per CPU the largest overshoot, the overshoots at or over the
threshold summed and counted, and the wake-ups; the all-core stalls with their time and length; the
probe's own CPU seconds; the CPUs it was asked to probe; and what else went on meanwhile (steal time,
its cgroup's throttling, load, SMIs counted, the hypervisor flag: checker/agent/stallwitness.py).
`--run -- ARGV…` instead probes while ARGV runs (cyborg's verification
under load) and prints one summary with ARGV's exit status and output.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from checker.agent.stallwitness import SmiSampler, Witness

FORMAT = 1
KEEP_WINDOWS = 360  # an hour of 10 s windows: a report interval up to that loses nothing
MAX_COINCIDENT = 32  # all-core stalls kept per window (all are counted)
RUN_OUTPUT_CHARS = 8000  # of the wrapped command's output, its tail
STAGGER_S = 0.001  # between the threads' wake-ups (at most a quarter period over all of them)


@dataclass
class CpuWindow:
    max_s: float = 0.0
    total_s: float = 0.0
    count: int = 0
    wakeups: int = 0
    stalls: list[tuple[float, float]] = field(default_factory=list)  # (due, woke), monotonic, over the threshold


def next_due(now: float, period: float, cycle: float, active: float) -> float:
    """The next wake-up after `now`: the next multiple of `period`, or, when that falls outside the
    active part (the first `active` seconds of every `cycle`), the start of the next active part. The
    same for every thread (each shifted by its own offset), so the probed CPUs are due together."""
    due = (now // period + 1) * period
    if due - now < 1e-9:  # `now` on a grid moment, which float division put one period early
        due += period
    if active < cycle:
        phase = due % cycle
        if phase >= active:
            due += cycle - phase
    return due


class CpuProbe(threading.Thread):
    """Sleeps to the next wake-up of the shared grid on one CPU and records each wake-up's overshoot."""

    def __init__(
        self,
        cpu: int,
        period_s: float,
        threshold_s: float,
        stop: threading.Event,
        duty: tuple[float, float] | None = None,
        offset_s: float = 0.0,
    ) -> None:
        super().__init__(name=f"stall-probe-cpu{cpu}", daemon=True)
        self.cpu = cpu
        self.period_s = period_s
        self.threshold_s = threshold_s
        self.cycle_s, self.active_s = duty or (period_s, period_s)  # (cycle, active part): continuous by default
        self.offset_s = offset_s  # after the grid's moments
        self.stop = stop
        self.lock = threading.Lock()
        self.window = CpuWindow()
        self.error: str | None = None
        self.smi: SmiSampler | None = None  # the first thread's: MSR_SMI_COUNT around each stall

    def run(self) -> None:
        try:
            os.sched_setaffinity(0, {self.cpu})  # Linux: 0 is the calling thread
        except OSError as error:
            self.error = f"cpu{self.cpu}: cannot pin ({error.strerror})"
            return
        smi = self.smi
        if smi is not None:
            smi.open()
        clock, sleep, period, threshold = time.monotonic, time.sleep, self.period_s, self.threshold_s
        cycle, active, offset = self.cycle_s, self.active_s, self.offset_s
        due = next_due(clock() - offset, period, cycle, active) + offset
        while not self.stop.is_set():
            left = due - clock()
            if left > 0:
                sleep(left)
            woke = clock()
            over = woke - due
            with self.lock:
                window = self.window
                window.wakeups += 1
                if over > window.max_s:
                    window.max_s = over
                if over >= threshold:
                    window.total_s += over
                    window.count += 1
                    window.stalls.append((due, woke))
            if smi is not None:
                smi.maybe(woke, over >= threshold)
            due = next_due(woke - offset, period, cycle, active) + offset
        if smi is not None:
            smi.close()

    def take(self) -> CpuWindow:
        with self.lock:
            window, self.window = self.window, CpuWindow()
        return window


def coincident(windows: list[CpuWindow]) -> list[tuple[float, float]]:
    """All-core stalls: a stall of the first CPU that overlaps a stall of every other probed CPU, as
    (start, length) of the time all of them were stalled at once. Needs two CPUs or more."""
    if len(windows) < 2:
        return []
    found = []
    for start, end in windows[0].stalls:
        lo, hi = start, end
        for other in windows[1:]:
            best = None
            for o_start, o_end in other.stalls:
                overlap = min(hi, o_end) - max(lo, o_start)
                if overlap > 0 and (best is None or overlap > best[1] - best[0]):
                    best = (max(lo, o_start), min(hi, o_end))
            if best is None:
                break
            lo, hi = best
        else:
            found.append((lo, hi - lo))
    return found


def summary(
    windows: dict[int, CpuWindow],
    started: float,
    ended: float,
    meta: dict[str, Any],
    smi: SmiSampler | None = None,
) -> dict[str, Any]:
    """One window as the results line: wall-clock times (epoch seconds), milliseconds; each all-core
    stall with the SMIs counted around it when the counter could be sampled."""
    to_wall = time.time() - time.monotonic()
    events = coincident([windows[cpu] for cpu in sorted(windows)])

    def smis(at: float, length: float) -> dict[str, Any]:
        found = smi.around(at, at + length) if smi is not None else None
        return {"smis": found[0], "smis_span_s": found[1]} if found is not None else {}

    return {
        "format": FORMAT,
        "start": round(started + to_wall, 3),
        "end": round(ended + to_wall, 3),
        **meta,
        "cpus": {
            str(cpu): {
                "max_ms": round(w.max_s * 1000, 3),
                "total_ms": round(w.total_s * 1000, 3),
                "count": w.count,
                "wakeups": w.wakeups,
            }
            for cpu, w in sorted(windows.items())
        },
        "coincident": [
            {"at": round(at + to_wall, 3), "ms": round(ms * 1000, 3), **smis(at, ms)}
            for at, ms in events[:MAX_COINCIDENT]
        ],
        "coincident_count": len(events),
    }


class StallProbe:
    """The probe's threads; `window()` closes the current window and returns its summary. With
    `duty` (cycle_s, active_share) the threads probe only the first share of every cycle."""

    def __init__(
        self, cpus: list[int], period_ms: float, threshold_ms: float, duty: tuple[float, float] | None = None
    ) -> None:
        self.stop = threading.Event()
        period_s = period_ms / 1000
        cycle_s, share = duty or (period_s, 1.0)
        active_s = min(cycle_s, max(cycle_s * share, period_s))
        spacing = min(STAGGER_S, period_s / 4 / max(len(cpus), 1))
        self.threads = [
            CpuProbe(cpu, period_s, threshold_ms / 1000, self.stop, (cycle_s, active_s), index * spacing)
            for index, cpu in enumerate(cpus)
        ]
        self.meta = {
            "period_ms": period_ms,
            "threshold_ms": threshold_ms,
            "active_share": round(active_s / cycle_s, 4),
            "cpus_asked": cpus,
        }
        self.witness = Witness(cpus)
        if self.threads:
            self.threads[0].smi = SmiSampler(self.threads[0].cpu)
        self.seen = self.witness.sample()
        self.started = time.monotonic()
        self.cpu_at_start = _own_cpu_s()

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def window(self) -> dict[str, Any]:
        ended, cpu_now = time.monotonic(), _own_cpu_s()
        windows = {t.cpu: t.take() for t in self.threads if t.error is None}
        line = summary(windows, self.started, ended, self.meta, self.threads[0].smi if self.threads else None)
        line["probe_cpu_s"] = round(cpu_now - self.cpu_at_start, 4)
        seen = self.witness.sample()
        line.update(self.witness.window(self.seen, seen))
        self.seen = seen
        errors = [t.error for t in self.threads if t.error]
        if errors:
            line["problems"] = errors
        self.started, self.cpu_at_start = ended, cpu_now
        return line

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=1)


def _own_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)  # microseconds, where os.times() counts 10 ms ticks
    return usage.ru_utime + usage.ru_stime


def _write(path: str, lines: deque[str]) -> None:
    temporary = f"{path}.tmp"
    with open(temporary, "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")
    os.replace(temporary, path)


def serve(probe: StallProbe, path: str, window_s: float) -> None:
    """Write one line per window to `path` (the newest KEEP_WINDOWS), until stopped or orphaned."""
    parent = os.getppid()
    kept: deque[str] = deque(maxlen=KEEP_WINDOWS)
    probe.start()
    while not probe.stop.wait(window_s):
        kept.append(json.dumps(probe.window(), separators=(",", ":")))
        try:
            _write(path, kept)
        except OSError as error:
            print(f"stall probe: cannot write {path}: {error.strerror}", file=sys.stderr)
        if os.getppid() != parent:  # the agent is gone: so is its probe
            break
    probe.close()


def run_under(probe: StallProbe, argv: list[str], timeout_s: float) -> dict[str, Any]:
    """Probe while `argv` runs (bounded by timeout_s); the summary with its exit status and output tail."""
    probe.start()
    started = time.monotonic()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
        status: dict[str, Any] = {"exit_status": done.returncode, "output": (done.stdout + done.stderr)}
    except FileNotFoundError:
        status = {"exit_status": None, "missing": True, "output": f"{argv[0]}: not installed"}
    except subprocess.TimeoutExpired as expired:
        out = expired.stdout or ""
        status = {
            "exit_status": None,
            "timed_out": True,
            "output": out.decode(errors="replace") if isinstance(out, bytes) else out,
        }
    line = probe.window()
    probe.close()
    status["output"] = status["output"][-RUN_OUTPUT_CHARS:]
    return {**line, "run": {"argv": argv, "duration_s": round(time.monotonic() - started, 3), **status}}


def _cpus(text: str) -> list[int]:
    cpus: set[int] = set()
    for part in text.split(","):
        low, _, high = part.strip().partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    return sorted(cpus)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m checker.agent.stallprobe", description=__doc__.split("\n")[0])
    parser.add_argument("--cpus", required=True, help="CPUs to probe, a cpu list (0-1,64): housekeeping CPUs only")
    parser.add_argument("--period-ms", type=float, default=100.0)
    parser.add_argument("--threshold-ms", type=float, default=5.0)
    parser.add_argument("--window-s", type=float, default=10.0)
    parser.add_argument(
        "--active-share", type=float, default=1.0, help="probe only this share of every window (0.05-1; 1: always)"
    )
    parser.add_argument("--out", help="results file (JSON lines), written each window")
    parser.add_argument("--timeout-s", type=float, default=3600.0, help="with a command: its time limit")
    parser.add_argument("command", nargs="*", help="-- ARGV: probe while it runs, print one summary")
    args = parser.parse_args(argv)
    if not 0.5 <= args.period_ms <= 1000 or args.threshold_ms <= 0 or args.window_s < 1:
        parser.error("period 0.5-1000 ms, threshold above 0, window 1 s or more")
    if not 0.05 <= args.active_share <= 1:
        parser.error("active share 0.05-1")
    duty = (args.window_s, args.active_share) if args.active_share < 1 and not args.command else None
    probe = StallProbe(_cpus(args.cpus), args.period_ms, args.threshold_ms, duty)
    signal.signal(signal.SIGTERM, lambda *_: probe.stop.set())
    if args.command:
        print(json.dumps(run_under(probe, args.command, args.timeout_s)))
        return 0
    if not args.out:
        parser.error("--out FILE, or a command to run under the probe")
    serve(probe, args.out, args.window_s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
