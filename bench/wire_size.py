"""Report size on the wire: every report whole (today) against delta reports (checker/wire.py, issue 17).

    .venv/bin/python bench/wire_size.py [--hosts 2000] [--cycles 10] [--fault-fraction 0.1] [--wide CPUS ROWS]

A simulated fleet runs `--cycles` check cycles a minute apart. Each host's agent state
(checker.agent.wire_state.WireState) decides whole or delta as the agent does; the centre's answer is
modelled as ingest gives it without a database: the base it names is the host's stored report, which
moves only when the report's content digest (remediator.ingest.report_digest) changes. The
steady-state figures leave out the first cycle (every report whole) and the periodic full ones
(FLEETFIX_AGENT_FULL_REPORT_EVERY, default 60, beyond a short run). Sizes are compact JSON bytes, as
the agent posts them; issue 17's target is a median delta of at most 1.5 KiB. Also timed, in CPU time
per report: the agent's encode (WireState.prepare: section values, digests, patches), the centre's
rebuild of each delta from its base's stored JSON (checker.wire.rebuild, the base's database read not
counted) and, beside it, the centre's parse of the same report whole. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import os
import random
import statistics
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import orjson

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from checker.agent.wire_state import WireState  # noqa: E402
from checker.schemas import InterruptRow, Interrupts, Report  # noqa: E402
from checker.sim import SimulatedFleet  # noqa: E402
from checker.wire import ReportDelta, rebuild  # noqa: E402
from remediator.ingest import report_digest  # noqa: E402

START = dt.datetime(2026, 6, 1, tzinfo=dt.UTC)


def kib(values: list[int], q: float) -> str:
    return f"{quantile(values, q) / 1024:.2f}"


def quantile(values: list[float] | list[int], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=2000)
    parser.add_argument("--cycles", type=int, default=10)
    parser.add_argument("--fault-fraction", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument(
        "--wide",
        type=int,
        nargs=2,
        action="append",
        metavar=("CPUS", "ROWS"),
        help="also one host with an interrupts table this wide, 30%% of its cells moving each minute",
    )
    args = parser.parse_args()
    started = time.perf_counter()
    load_before = f"{os.getloadavg()[0]:.2f}"
    fleet = SimulatedFleet(args.hosts, seed=args.seed, fault_fraction=args.fault_fraction)
    agents: dict[str, WireState] = {}
    stored: dict[str, tuple[str, str, bytes]] = {}  # host -> (digest, report id, body) of its stored state
    full_sizes: list[int] = []
    sent_sizes: list[int] = []
    changed: Counter[str] = Counter()
    patched: Counter[str] = Counter()
    encode_ms: list[float] = []
    rebuild_ms: list[float] = []
    parse_ms: list[float] = []
    deltas = 0

    for cycle in range(args.cycles):
        for report in fleet.reports(START + dt.timedelta(minutes=cycle)):
            name = report.host.hostname
            agent = agents.setdefault(name, WireState(name, path=None))
            full = orjson.dumps(report.model_dump(mode="json"))
            gc.disable()  # as in cpu_ms
            started_cpu = time.process_time()
            delta = agent.prepare(report)
            encoded = orjson.dumps(delta) if delta is not None else full
            spent = time.process_time() - started_cpu
            gc.enable()
            agent.took_delta = delta is not None
            if cycle > 0:
                full_sizes.append(len(full))
                sent_sizes.append(len(encoded))
                if delta is not None:
                    deltas += 1
                    encode_ms.append(spent * 1000)
                    changed.update(delta["changed"].keys())
                    patched.update(delta["patched"].keys())
                    base = orjson.loads(stored[name][2])  # as the database hands the stored body over: not timed
                    rebuild_ms.append(cpu_ms(partial(rebuild_from, encoded, base)))
                    parse_ms.append(cpu_ms(partial(Report.model_validate_json, full)))
            digest = report_digest(report)
            if stored.get(name, ("", "", b""))[0] != digest:
                stored[name] = (digest, str(report.report_id), full)
            agent.answered({"bases": [{"hostname": name, "report_id": stored[name][1]}]})
            agent.finish()
    elapsed = time.perf_counter() - started
    print(f"# hosts {args.hosts}, cycles {args.cycles} (the first left out), fault fraction {args.fault_fraction}")
    print(f"# {len(full_sizes)} reports, {deltas} of them as deltas; {elapsed:.0f} s")
    print(f"# load average before and after: {load_before}, {os.getloadavg()[0]:.2f}")
    print("| format | median KiB | p90 KiB | max KiB | mean KiB |")
    print("|---|---|---|---|---|")
    for label, sizes in (("full (today)", full_sizes), ("delta (issue 17)", sent_sizes)):
        mean = statistics.mean(sizes) / 1024
        print(f"| {label} | {kib(sizes, 0.5)} | {kib(sizes, 0.9)} | {max(sizes) / 1024:.2f} | {mean:.2f} |")
    for label, counted in (("whole", changed), ("as a patch", patched)):
        share = ", ".join(f"{name} {count / max(deltas, 1):.0%}" for name, count in counted.most_common(12))
        print(f"# sections a delta carried {label}, share of deltas: {share or 'none'}")
    if encode_ms:
        print("| CPU per report | median ms | p90 ms | max ms |")
        print("|---|---|---|---|")
        for label, times in (
            ("agent: encode the delta", encode_ms),
            ("centre: rebuild the delta", rebuild_ms),
            ("centre: parse the full report", parse_ms),
        ):
            print(f"| {label} | {quantile(times, 0.5):.2f} | {quantile(times, 0.9):.2f} | {max(times):.2f} |")
    if args.wide:
        print("| one host's interrupts | full KiB | delta KiB | agent encode ms | centre rebuild ms |")
        print("|---|---|---|---|---|")
        for cpus, rows in args.wide:
            wide_host(cpus, rows, args.seed)


def wide_host(cpus: int, rows: int, seed: int) -> None:
    """A big host's interrupts table (the simulated one has 16 CPUs and 10 rows): `cpus` x `rows` counters of
    which 30% move each minute, five deltas against the first report (medians)."""
    rng = random.Random(seed)
    template = SimulatedFleet(1, seed=seed).reports(START)[0]
    counts = [[rng.randrange(10**6, 10**9) for _ in range(cpus)] for _ in range(rows)]

    def at(minute: int) -> Report:
        table = Interrupts(
            cpu_count=cpus,
            rows=[
                InterruptRow(
                    name=str(n),
                    per_cpu=[c + (rng.randrange(5000) * minute if rng.random() < 0.3 else 0) for c in row],
                    description="IR-PCI-MSI-edge",
                )
                for n, row in enumerate(counts)
            ],
        )
        observations = template.observations.model_copy(update={"interrupts": table})
        return template.model_copy(
            update={
                "report_id": uuid.uuid4(),
                "captured_at": START + dt.timedelta(minutes=minute),
                "observations": observations,
            }
        )

    name = template.host.hostname
    agent = WireState(name, path=None)
    first = at(0)
    agent.prepare(first)
    agent.answered({"bases": [{"hostname": name, "report_id": str(first.report_id)}]})
    agent.finish()
    base = orjson.loads(orjson.dumps(first.model_dump(mode="json")))
    full, sizes, encode, rebuilt = [], [], [], []
    for minute in range(1, 6):
        report = at(minute)
        started = time.process_time()
        delta = agent.prepare(report)
        encoded = orjson.dumps(delta)
        encode.append((time.process_time() - started) * 1000)
        agent.taken()
        agent.finish()
        rebuilt.append(cpu_ms(partial(rebuild_from, encoded, base)))
        sizes.append(len(encoded))
        full.append(len(orjson.dumps(report.model_dump(mode="json"))))
    print(
        f"| {cpus} CPUs x {rows} rows | {statistics.median(full) / 1024:.1f} | {statistics.median(sizes) / 1024:.1f} "
        f"| {statistics.median(encode):.1f} | {statistics.median(rebuilt):.1f} |"
    )


def rebuild_from(encoded: bytes, base: dict[str, Any]) -> Report:
    return rebuild(ReportDelta.model_validate_json(encoded), base)


def cpu_ms(work: Callable[[], object]) -> float:
    """CPU time of `work`, the garbage collector held off meanwhile: the bench holds every host's state (GBs at
    10,000 hosts), and a full collection of that is the bench's cost, not the rebuild's."""
    gc.disable()
    try:
        started = time.process_time()
        work()
        return (time.process_time() - started) * 1000
    finally:
        gc.enable()


if __name__ == "__main__":
    main()
