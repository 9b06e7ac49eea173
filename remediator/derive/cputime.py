"""The cputime side-effect watch, centrally: how many processes of a host show more CPU time than they
could have used, on which kernel release (seed 001: the first patched erratum-298 kernel reported about
22 million seconds and got about 2% of batch jobs killed).

One signal per report that carries the `cputime` section, with the host as its subject so it can be
counted per host and, by its `kernel` detail, per kernel release: a rollout compares upgraded hosts with
the rest. A zero is emitted only when the scan was complete (every user process read and judged): it
says the host was checked and is clean. An incomplete scan with nothing found says nothing.
"""

from __future__ import annotations

from typing import Any

from checker.schemas import CputimeWatch, Identity
from remediator.signals import SignalValue

KIND = "cputime_exceeds_elapsed"
MAX_EXAMPLES = 5


def cputime_signals(watch: CputimeWatch | None, identity: Identity | None) -> list[SignalValue]:
    if watch is None or (watch.flagged == 0 and not watch.complete):
        return []
    examples: list[dict[str, Any]] = [
        {
            "pid": p.pid,
            "tid": p.tid,
            "comm": p.comm,
            "scope": p.scope,
            "cputime_s": p.cputime_s,
            "elapsed_s": p.elapsed_s,
            "excess_s": p.excess_s,
            "stat_line": p.stat_line,  # the raw fields, for the kernel's owner
        }
        for p in watch.processes[:MAX_EXAMPLES]
    ]
    detail: dict[str, Any] = {
        "kernel": identity.kernel if identity is not None else None,
        "checked": watch.checked,
        "complete": watch.complete,
        "examples": examples,
        "max_excess_s": max((p.excess_s for p in watch.processes), default=0.0),
        "unscanned": watch.unscanned,
        "unverified": watch.unverified,
        "caps_hit": list(watch.caps_hit),
        "tolerance_s": watch.tolerance_s,
        "cpus": watch.cpus,
    }
    return [SignalValue(KIND, "host", float(watch.flagged), detail)]
