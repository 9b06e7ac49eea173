"""What bench/storm.py watches while the storm runs: hosts out of service per scope, sampled from the
database, against the rule pack's blast-radius caps; and the breaker's first opening."""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from sqlalchemy import or_, select
from sqlalchemy.engine import Engine

from remediator.models import Host, Remediation, RuleState
from remediator.rules import cap_limit
from remediator.safety import ADMITTED_STATES

SCOPES = ("rack", "cluster", "datacenter", "fleet")


@dataclass
class ScopePeak:
    """The most hosts one unit of a scope (a rack, a cluster …) had out at once, and when."""

    out: int = 0
    unit: str = ""
    at: float = 0.0
    limit: int = 0


@dataclass
class Location:
    rack: str
    cluster: str
    datacenter: str


def unit_of(scope: str, where: Location) -> str:
    if scope == "rack":
        return f"{where.datacenter}/{where.rack}"
    if scope == "cluster":
        return where.cluster
    if scope == "datacenter":
        return where.datacenter
    return "fleet"


@dataclass
class OutOfService:
    """Samples, every `period_s`, the hosts the caps count as out: an admitted disruptive remediation
    (remediator.safety.ADMITTED_STATES), or drained and waiting for a technician. One SELECT per sample,
    so each sample is one consistent snapshot."""

    engine: Engine
    inventory: dict[int, Location]
    caps: dict[str, str | int]
    t0: float
    period_s: float = 0.2
    samples: int = 0
    peaks: dict[str, ScopePeak] = field(default_factory=lambda: {s: ScopePeak() for s in SCOPES})
    over: list[str] = field(default_factory=list)
    breaker_seen_at: float | None = None
    _limits: dict[tuple[str, str], int] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __post_init__(self) -> None:
        sizes: Counter[tuple[str, str]] = Counter()
        for where in self.inventory.values():
            for scope in SCOPES:
                sizes[(scope, unit_of(scope, where))] += 1
        for (scope, unit), size in sizes.items():
            cap = self.caps.get(scope)
            if cap is not None and not (scope == "cluster" and not unit):
                self._limits[(scope, unit)] = cap_limit(cap, size)

    def limit(self, scope: str, unit: str) -> int | None:
        return self._limits.get((scope, unit))

    def tightest(self, scope: str) -> int:
        return min((v for (s, _), v in self._limits.items() if s == scope), default=0)

    def start(self) -> OutOfService:
        self._thread = threading.Thread(target=self._run, name="storm-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def _run(self) -> None:
        admitted = select(Remediation.host_id).where(
            Remediation.disruptive.is_(True), Remediation.state.in_(ADMITTED_STATES)
        )
        out_query = select(Host.id).where(or_(Host.drained_at.is_not(None), Host.id.in_(admitted)))
        breaker = select(RuleState.rule_id).where(RuleState.breaker_open.is_(True)).limit(1)
        while not self._stop.is_set():
            began = time.monotonic()
            with self.engine.connect() as conn:
                out = list(conn.scalars(out_query))
                tripped = self.breaker_seen_at is None and conn.scalar(breaker) is not None
            now = time.monotonic() - self.t0
            if tripped:
                self.breaker_seen_at = now
            self._count(out, now)
            self.samples += 1
            self._stop.wait(max(0.0, self.period_s - (time.monotonic() - began)))

    def _count(self, out: list[int], now: float) -> None:
        per_unit: Counter[tuple[str, str]] = Counter()
        for host_id in out:
            where = self.inventory[host_id]
            for scope in SCOPES:
                per_unit[(scope, unit_of(scope, where))] += 1
        for (scope, unit), count in per_unit.items():
            limit = self.limit(scope, unit)
            if limit is None:
                continue
            peak = self.peaks[scope]
            if count > peak.out:
                self.peaks[scope] = ScopePeak(count, unit, now, limit)
            if count > limit:
                self.over.append(f"t+{now:.1f}s {scope} {unit}: {count} hosts out, cap {limit}")
