"""One check cycle: run every collector within its time budget, each contained, and build the report.

A collector that cannot run here reports `unavailable`, one whose input could not be read `error`
(with an excerpt), one that ran out of time `timeout` (keeping what it read); none of them fails
the cycle. The finished report is bounded in size (bound_report) before it leaves the host.
"""

from __future__ import annotations

import datetime as dt
import logging
import socket
import time
from collections.abc import Callable, Mapping

from checker.collectors import (
    capacity,
    cputime,
    cxl,
    edac,
    error_reporting,
    filesystems,
    gpu,
    identity,
    interrupts,
    ipmi,
    isolated_workload,
    kernel_log,
    mce,
    memory_tiers,
    network,
    pcie,
    rasdaemon,
    redfish,
    smart,
    smi,
    stalls,
    thermal_throttle,
    time_sync,
)
from checker.collectors.base import HostAccess
from checker.collectors.context import BudgetExceeded, CollectorState, Context, ParseFailed, Unavailable
from checker.collectors.redfish_client import RedfishSettings
from checker.schemas import CollectorRun, CollectorStatus, HostIdentity, Observations, Report

AGENT_VERSION = "0.2.0"
DEFAULT_TIMEOUT_S = 15.0
DEFAULT_TIMEOUTS: dict[str, float] = {"sel": 60.0, "smart": 60.0, "gpu": 25.0, "redfish": 60.0}
BMC_PROTOCOLS = ("ipmi", "redfish", "both")
OPTIONAL_COLLECTORS = ("redfish",)  # run only where configured: bmc_collectors()
MAX_REPORT_BYTES = 1_000_000

Collector = Callable[[Context], None]

COLLECTORS: dict[str, Collector] = {
    "identity": identity.collect,
    "edac": edac.collect,
    "rasdaemon": rasdaemon.collect,
    "kernel_log": kernel_log.collect,
    "mce": mce.collect,
    "sel": ipmi.collect_sel,
    "sensors": ipmi.collect_sensors,
    "smart": smart.collect,
    "interrupts": interrupts.collect,
    "isolated_workload": isolated_workload.collect,
    "cputime": cputime.collect,
    "memory_tiers": memory_tiers.collect,
    "smi": smi.collect,
    "stalls": stalls.collect,
    "error_reporting": error_reporting.collect,
    "gpu": gpu.collect,
    "capacity": capacity.collect,
    "network": network.collect,
    "thermal_throttle": thermal_throttle.collect,
    "cxl": cxl.collect,
    "pcie": pcie.collect,
    "filesystems": filesystems.collect,
    "time_sync": time_sync.collect,
}

log = logging.getLogger(__name__)


def _unless_redfish(collector: Collector, section: str, protocol: str) -> Collector:
    """An IPMI collector that leaves its section to Redfish: always under bmc_protocol=redfish; under
    both, when the redfish collector (which runs first) filled the section this cycle."""

    def collect(ctx: Context) -> None:
        if protocol == "redfish":
            raise Unavailable("the BMC is read over Redfish (bmc_protocol=redfish): see the redfish collector")
        if getattr(ctx.observations, section) is not None and ctx.observations.redfish is not None:
            raise Unavailable(f"{section} was read over Redfish this cycle (bmc_protocol=both: Redfish preferred)")
        collector(ctx)

    return collect


def bmc_collectors(protocol: str, settings: RedfishSettings | None) -> dict[str, Collector]:
    """COLLECTORS for a host's BMC protocol (docs/agent.md, "Redfish"): ipmi reads the SEL and sensors
    with ipmitool only; redfish with the redfish collector only; both runs the redfish collector first
    and the ipmi ones only for the sections Redfish did not fill this cycle (its BMC did not answer, or
    lists no log service or chassis)."""
    if protocol not in BMC_PROTOCOLS:
        raise ValueError(f"bmc protocol {protocol!r} is not one of {', '.join(BMC_PROTOCOLS)}")
    if protocol == "ipmi":
        return dict(COLLECTORS)
    collectors: dict[str, Collector] = {}
    for name, collector in COLLECTORS.items():
        if name == "sel":  # Redfish first, so `both` can tell whether it answered
            collectors["redfish"] = redfish.RedfishCollector(settings, protocol)
        if name in ("sel", "sensors"):
            collector = _unless_redfish(collector, name, protocol)
        collectors[name] = collector
    return collectors


def run_collector(name: str, collector: Collector, ctx: Context) -> CollectorRun:
    started = time.perf_counter()
    status, reason, excerpt = CollectorStatus.ok, None, None
    try:
        collector(ctx)
    except Unavailable as why:
        status, reason = CollectorStatus.unavailable, str(why)
    except ParseFailed as why:
        status, reason, excerpt = CollectorStatus.error, str(why), why.excerpt or None
    except BudgetExceeded as why:
        status, reason = CollectorStatus.timeout, str(why)
    except Exception as error:  # a collector bug must not cost the other collectors their report
        log.exception("checker.collector.failed", extra={"fields": {"collector": name}})
        status, reason = CollectorStatus.error, f"{type(error).__name__}: {error}"
    return CollectorRun(
        status=status,
        duration_ms=(time.perf_counter() - started) * 1000,
        reason=reason[:1000] if reason else None,
        excerpt=excerpt,
        source=ctx.source,
        problems=ctx.problems,
    )


def run_cycle(
    host: HostAccess,
    *,
    hostname: str | None = None,
    interval_s: int = 60,
    collectors: Mapping[str, Collector] | None = None,
    state: CollectorState | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    timeouts: Mapping[str, float] | None = None,
    memo_s: float = 0.0,
    max_report_bytes: int = MAX_REPORT_BYTES,
) -> Report:
    """Run the collectors against `host` and build the report. `state` holds the incremental
    collectors' cursors: new ones are staged, and the caller commits them once the report is
    delivered or spooled (a fresh CollectorState, as `fleetfix check` uses, reads everything)."""
    state = state if state is not None else CollectorState()
    budgets = {**DEFAULT_TIMEOUTS, **(timeouts or {})}
    observations = Observations()
    runs: dict[str, CollectorRun] = {}
    for name, collector in (collectors if collectors is not None else COLLECTORS).items():
        ctx = Context(host, observations, state, budgets.get(name, timeout_s), memo_s=memo_s)
        runs[name] = run_collector(name, collector, ctx)
    boot_id = host.read_text("/proc/sys/kernel/random/boot_id")
    machine_id = host.read_text("/etc/machine-id")
    report = Report(
        host=HostIdentity(
            hostname=hostname or socket.gethostname(),
            boot_id=boot_id.strip()[:64] if boot_id else None,
            machine_id=machine_id.strip()[:64] if machine_id else None,
            agent_version=AGENT_VERSION,
        ),
        captured_at=dt.datetime.now(dt.UTC),
        interval_s=interval_s,
        collectors=runs,
        observations=observations,
    )
    return bound_report(report, max_report_bytes)


def report_size(report: Report) -> int:
    return len(report.model_dump_json())


def _trim_lines(report: Report, keep: int) -> bool:
    log_state = report.observations.kernel_log
    if log_state is None or not any(len(e.lines) > keep for e in log_state.events):
        return False
    for event in log_state.events:
        if len(event.lines) > keep:
            event.lines_dropped += len(event.lines) - keep
            event.lines = event.lines[:keep]
    return True


def _halve_events(report: Report) -> bool:
    log_state = report.observations.kernel_log
    if log_state is None or len(log_state.events) <= 1:
        return False
    drop = len(log_state.events) // 2
    log_state.events = log_state.events[drop:]
    log_state.truncated += drop
    return True


def _halve_sel(report: Report) -> bool:
    sel = report.observations.sel
    if sel is None or len(sel.entries) <= 1:
        return False
    drop = len(sel.entries) // 2
    sel.entries = sel.entries[drop:]
    sel.truncated += drop
    return True


def _halve_mce(report: Report) -> bool:
    cut = False
    records = report.observations.mce
    if records and len(records) > 1:
        drop = len(records) // 2
        report.observations.mce = records[drop:]
        if (run := report.collectors.get("mce")) is not None and len(run.problems) < 20:
            run.problems.append(f"{drop} older MCE records dropped to keep the report bounded")
        cut = True
    ras = report.observations.rasdaemon  # rasdaemon's mce_record rows, read by its own collector too
    if ras is not None and ras.mce_records and len(ras.mce_records) > 1:
        drop = len(ras.mce_records) // 2
        ras.mce_records = ras.mce_records[drop:]
        ras.truncated += drop
        cut = True
    return cut


# In order: a kernel event's first lines carry what it is, so the rest of its lines go before
# any event does; then the oldest events, the oldest SEL entries, the oldest MCE records.
_CUTS: tuple[Callable[[Report], bool], ...] = (
    lambda r: _trim_lines(r, 10),
    lambda r: _trim_lines(r, 1),
    _halve_events,
    _halve_sel,
    _halve_mce,
)


def bound_report(report: Report, max_bytes: int = MAX_REPORT_BYTES) -> Report:
    """Keep the report under max_bytes of JSON. The schema bounds every list; this bounds their sum.
    Every cut is counted where the central side reads it (`lines_dropped`, `truncated`, a collector
    problem)."""
    cuts = iter(_CUTS)
    cut = next(cuts)
    while report_size(report) > max_bytes:
        while not cut(report):
            next_cut = next(cuts, None)
            if next_cut is None:
                return report  # nothing left that may be cut: send it as it is
            cut = next_cut
    return report
