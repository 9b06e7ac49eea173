"""The chaos bench's blast-radius caps: the rule pack that sets them, and a watch that they held.

The default pack's caps (rack 1, cluster 10%, datacenter 2%, fleet 1%) are full within the first
round of a chaos run: a tenth of the fleet has a fault, and the drains of the hosts handed to a
technician keep their slots for the whole run, so a reboot planned later waits for a cap and
nothing non-idempotent runs while the faults are injected. The bench therefore loads one more
pack (FLEETFIX_RULES_PATHS) whose `safety` section, the last one loaded, sets the caps for all
rules: `--caps` (printed at the start). The rack cap stays 1 and spacing 5 minutes, as the
default. So that more room cannot hide a cap that does not hold, CapWatch samples every few
seconds the hosts out of service because of fleetfix per scope, as `remediator.safety.caps`
counts them (disruptive remediations admitted, drained hosts), against each scope's limit; the
figures show the largest share of a limit seen, any sample over one, and what the gates held.
"""

from __future__ import annotations

import collections
import re
import threading
import time
from pathlib import Path
from typing import Any

import yaml
from sqlalchemy import create_engine, text

from remediator.rules import PackSafety, cap_limit

SCOPES = ("rack", "cluster", "datacenter", "fleet")
OUT = text(
    "SELECT h.datacenter, h.cluster, h.datacenter || '/' || h.rack FROM hosts h WHERE h.drained_at IS NOT NULL"
    " OR EXISTS (SELECT 1 FROM remediations r WHERE r.host_id = h.id AND r.disruptive"
    " AND r.state IN ('planned', 'running', 'verifying'))"
)


def parse_caps(spec: str) -> dict[str, str | int]:
    """'rack=1,cluster=10%,…' as a pack's caps (validated as the pack would be)."""
    caps: dict[str, str | int] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        scope, _, value = part.partition("=")
        caps[scope.strip()] = value.strip() if value.strip().endswith("%") else int(value)
    PackSafety.model_validate({"caps": caps})
    return caps


def write_pack(path: Path, caps: dict[str, str | int]) -> PackSafety:
    """A rule pack with no rules, only the safety section (spacing and flap limits as the default's)."""
    safety = {"caps": caps, "spacing": "5m", "flap_max": 3, "flap_window": "7d"}
    path.write_text(yaml.safe_dump({"version": 1, "safety": safety, "rules": []}, sort_keys=False), encoding="utf-8")
    return PackSafety.model_validate(safety)


class CapWatch:
    """Samples hosts out per scope every `every` seconds while the run lasts."""

    def __init__(self, url: str, safety: PackSafety, every: float = 3.0) -> None:
        self.url = url
        self.safety = safety
        self.every = every
        self.samples = 0
        self.peak: dict[str, tuple[float, int, int, str]] = {}  # scope -> (share of its limit, out, limit, where)
        self.over: list[str] = []
        self.missed: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="cap-watch", daemon=True)

    def _sizes(self, conn: Any) -> dict[str, collections.Counter[str]]:
        rows = conn.execute(text("SELECT datacenter, cluster, datacenter || '/' || rack FROM hosts")).all()
        return {
            "datacenter": collections.Counter(r[0] for r in rows),
            "cluster": collections.Counter(r[1] for r in rows if r[1]),
            "rack": collections.Counter(r[2] for r in rows),
            "fleet": collections.Counter({"": len(rows)}),
        }

    def _run(self) -> None:
        engine = create_engine(self.url, pool_pre_ping=True, pool_size=1)
        sizes: dict[str, collections.Counter[str]] | None = None
        while not self.stop.wait(self.every):
            try:
                with engine.connect() as conn:
                    sizes = sizes or self._sizes(conn)
                    out = conn.execute(OUT).all()
            except Exception as error:  # the database is restarting: the next sample
                self.missed.append(type(error).__name__)
                continue
            self.samples += 1
            caps: dict[str, str | int] = {str(k): v for k, v in self.safety.caps.items()}
            counts = {
                "datacenter": collections.Counter(r[0] for r in out),
                "cluster": collections.Counter(r[1] for r in out if r[1]),
                "rack": collections.Counter(r[2] for r in out),
                "fleet": collections.Counter({"": len(out)}),
            }
            for scope in SCOPES:
                cap = caps.get(scope)
                if cap is None:
                    continue
                for where, n in counts[scope].items():
                    limit = cap_limit(cap, sizes[scope][where])
                    share = n / limit
                    if share > self.peak.get(scope, (0.0, 0, 0, ""))[0]:
                        self.peak[scope] = (share, n, limit, where)
                    if n > limit:
                        self.over.append(
                            f"{time.strftime('%H:%M:%S')} {scope} {where or 'fleet'}: {n} out, cap {limit}"
                        )
        engine.dispose()


GATES = [
    (re.compile(r"^(rack|cluster|datacenter|fleet) cap"), "{} cap"),
    (re.compile(r"^(spacing|cooldown|maintenance|rollout)"), "{}"),
    (re.compile(r"^waiting for (approval)"), "{}"),
    (re.compile(r"^remediation \d+ \((.*?),"), "the host's active {} remediation"),
    (re.compile(r"^ticket \d+ \(\w+\) (holds this part)"), "an open ticket {}"),
]


def gate_of(reason: str) -> str:
    for pattern, name in GATES:
        match = pattern.match(reason)
        if match:
            return name.format(match.group(1))
    return reason[:40]


def held_by_gate(conn: Any) -> dict[str, int]:
    """Remediations held at least once, by the gate that held them (decision log)."""
    rows = conn.execute(text("SELECT DISTINCT remediation_id, reason FROM decisions WHERE outcome = 'held'")).all()
    gates: dict[str, set[int]] = collections.defaultdict(set)
    for remediation, reason in rows:
        gates[gate_of(reason or "")].add(remediation)
    return {gate: len(ids) for gate, ids in sorted(gates.items(), key=lambda kv: -len(kv[1]))}


def print_caps(watch: CapWatch, conn: Any) -> int:
    """The caps section of the figures; returns the samples over a limit (a cap that did not hold)."""
    print(f"\nblast-radius caps (this run's pack: {watch.safety.caps}; rack spacing {watch.safety.spacing_s:.0f} s)")
    print(f"  hosts out at once, highest share of a limit in {watch.samples} samples every {watch.every:.0f} s:")
    for scope in SCOPES:
        if scope in watch.peak:
            share, n, limit, where = watch.peak[scope]
            print(f"    {scope:<10} {n:4d} of {limit:4d} ({share:4.0%}) {where}")
    print(f"  samples over a cap: {len(watch.over)} {watch.over[:5]}")
    gates = held_by_gate(conn)
    print("  remediations held at least once, by gate: " + (", ".join(f"{g} {n}" for g, n in gates.items()) or "none"))
    return len(watch.over)
