"""Report size on the wire: every report whole (today) against delta reports (checker/wire.py, issue 17).

    .venv/bin/python bench/wire_size.py [--hosts 2000] [--cycles 10] [--fault-fraction 0.1]

A simulated fleet runs `--cycles` check cycles a minute apart. Each host's agent state
(checker.agent.wire_state.WireState) decides whole or delta as the agent does; the centre's answer is
modelled as ingest gives it without a database: the base it names is the host's stored report, which
moves only when the report's content digest (remediator.ingest.report_digest) changes. The
steady-state figures leave out the first cycle (every report whole) and the periodic full ones
(FLEETFIX_AGENT_FULL_REPORT_EVERY, default 60, beyond a short run). Sizes are compact JSON bytes, as
the agent posts them. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from checker.agent.wire_state import WireState  # noqa: E402
from checker.sim import SimulatedFleet  # noqa: E402
from remediator.ingest import report_digest  # noqa: E402

START = dt.datetime(2026, 6, 1, tzinfo=dt.UTC)


def kib(values: list[int], q: float) -> str:
    ordered = sorted(values)
    return f"{ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1024:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=2000)
    parser.add_argument("--cycles", type=int, default=10)
    parser.add_argument("--fault-fraction", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=17)
    args = parser.parse_args()
    started = time.perf_counter()
    fleet = SimulatedFleet(args.hosts, seed=args.seed, fault_fraction=args.fault_fraction)
    agents: dict[str, WireState] = {}
    stored: dict[str, tuple[str, str]] = {}  # host -> (digest, report id) of its stored state
    full_sizes: list[int] = []
    sent_sizes: list[int] = []
    changed: Counter[str] = Counter()
    deltas = 0
    for cycle in range(args.cycles):
        for report in fleet.reports(START + dt.timedelta(minutes=cycle)):
            name = report.host.hostname
            agent = agents.setdefault(name, WireState(name, path=None))
            full = orjson.dumps(report.model_dump(mode="json"))
            delta = agent.prepare(report)
            agent.took_delta = delta is not None
            if cycle > 0:
                full_sizes.append(len(full))
                sent_sizes.append(len(orjson.dumps(delta)) if delta is not None else len(full))
                if delta is not None:
                    deltas += 1
                    changed.update(delta["changed"].keys())
            digest = report_digest(report)
            if stored.get(name, ("", ""))[0] != digest:
                stored[name] = (digest, str(report.report_id))
            agent.answered({"bases": [{"hostname": name, "report_id": stored[name][1]}]})
            agent.finish()
    elapsed = time.perf_counter() - started
    print(f"# hosts {args.hosts}, cycles {args.cycles} (the first left out), fault fraction {args.fault_fraction}")
    print(f"# {len(full_sizes)} reports, {deltas} of them as deltas; {elapsed:.0f} s")
    print("| format | median KiB | p90 KiB | max KiB | mean KiB |")
    print("|---|---|---|---|---|")
    for label, sizes in (("full (today)", full_sizes), ("delta (issue 17)", sent_sizes)):
        mean = statistics.mean(sizes) / 1024
        print(f"| {label} | {kib(sizes, 0.5)} | {kib(sizes, 0.9)} | {max(sizes) / 1024:.2f} | {mean:.2f} |")
    share = ", ".join(f"{name} {count / max(deltas, 1):.0%}" for name, count in changed.most_common(12))
    print(f"# sections a delta carried whole, share of deltas: {share}")


if __name__ == "__main__":
    main()
