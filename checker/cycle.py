"""One check cycle: run every collector, each contained, and build the report."""

from __future__ import annotations

import datetime as dt
import socket
import time
from collections.abc import Callable

from checker.collectors.base import HostAccess
from checker.schemas import CollectorRun, CollectorStatus, HostIdentity, Observations, Report

AGENT_VERSION = "0.1.0"

Collector = Callable[[HostAccess, Observations], CollectorRun | None]


def collect_identity(host: HostAccess, observations: Observations) -> CollectorRun | None:
    from checker.schemas import Identity

    kernel = host.read_text("/proc/sys/kernel/osrelease")
    cmdline = host.read_text("/proc/cmdline")
    if kernel is None and cmdline is None:
        return CollectorRun(status=CollectorStatus.unavailable, duration_ms=0, reason="no /proc to read")
    observations.identity = Identity(
        kernel=kernel.strip() if kernel else None, cmdline=cmdline.strip() if cmdline else None
    )
    return None


COLLECTORS: dict[str, Collector] = {"identity": collect_identity}


def run_cycle(
    host: HostAccess,
    *,
    hostname: str | None = None,
    interval_s: int = 60,
    collectors: dict[str, Collector] | None = None,
) -> Report:
    observations = Observations()
    runs: dict[str, CollectorRun] = {}
    for name, collector in (collectors or COLLECTORS).items():
        started = time.perf_counter()
        try:
            outcome = collector(host, observations)
        except Exception as error:
            outcome = CollectorRun(
                status=CollectorStatus.error, duration_ms=0, reason=f"{type(error).__name__}: {error}"[:1000]
            )
        elapsed = (time.perf_counter() - started) * 1000
        if outcome is None:
            outcome = CollectorRun(status=CollectorStatus.ok, duration_ms=elapsed)
        else:
            outcome = outcome.model_copy(update={"duration_ms": elapsed})
        runs[name] = outcome
    boot_id = host.read_text("/proc/sys/kernel/random/boot_id")
    machine_id = host.read_text("/etc/machine-id")
    return Report(
        host=HostIdentity(
            hostname=hostname or socket.gethostname(),
            boot_id=boot_id.strip() if boot_id else None,
            machine_id=machine_id.strip() if machine_id else None,
            agent_version=AGENT_VERSION,
        ),
        captured_at=dt.datetime.now(dt.UTC),
        interval_s=interval_s,
        collectors=runs,
        observations=observations,
    )
