"""`fleetfix agent`: the Celery worker on a host.

It consumes the host's own queue (host.<hostname>) for actions, and runs the check cycle every
interval in a background thread that sleeps between cycles (no polling), sending each report to
the central `ingest` queue by task name (the agent never imports central code). Collector cursors
and the report spool live in the state directory; the process keeps off isolated cores (pinned to the
housekeeping ones found at start-up, or to FLEETFIX_AGENT_CPUS).
Cyborg's host tasks (`cyborg.host.tasks`) run in the same worker. With FLEETFIX_AGENT_DRIVER=simulated
the agent stands in for a virtual host (checker/sim): it reports that host's state, and cyborg's
simulated driver acts on it.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import logging
import os
import socket
import subprocess
import threading
import time
import uuid
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

from celery import Celery
from celery.utils.log import mlevel

from checker.agent.benchmark import BenchmarkSchedule, parse_window
from checker.agent.config import CPUS_UNPINNED, AgentConfig
from checker.agent.delivery import Delivery, Outcome
from checker.agent.probe import start_probe, stop_probe
from checker.agent.spool import Spool
from checker.agent.wire_state import WireState
from checker.collectors.base import HostAccess, LiveHost
from checker.collectors.context import CollectorState
from checker.collectors.isolated_workload import CMDLINE, SYS_ISOLATED, SYS_NOHZ_FULL, read_isolated
from checker.cycle import bmc_collectors, run_cycle
from checker.parsers.common import parse_cpu_list
from checker.schemas import AgentStatus, CollectorRun, CollectorStatus, Report
from core.queue import create_celery, host_queue, provide
from core.settings import Settings

if TYPE_CHECKING:  # the simulated fleet is loaded only by an agent that stands in for a virtual host
    from checker.sim.host import VirtualHost

log = logging.getLogger(__name__)

SYS_ONLINE = "/sys/devices/system/cpu/online"
EXPLICIT = "FLEETFIX_AGENT_CPUS"  # the reason of a pinning the operator set


class AgentStartError(Exception):
    """The agent cannot start as configured (a CPU set it may not run on)."""


def open_state_dir(directory: Path) -> tuple[Path | None, IO[str] | None, str | None]:
    """The state directory, locked for this agent. When it cannot be created or written, or another
    agent holds it, the agent still runs — cursors in memory only, no spool — and the third value
    says why (every report repeats it)."""
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o750)
        lock = (directory / "agent.lock").open("w")
    except OSError as error:
        why = f"state directory {directory} unusable ({error.strerror}): no cursors on disk, no spool"
    else:
        try:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.close()
            why = f"state directory {directory} is held by another agent: no cursors on disk, no spool"
        else:
            return directory, lock, None
    log.warning("checker.agent.state_dir_unusable", extra={"fields": {"state_dir": str(directory), "why": why}})
    return None, None, why


def pin_to_cpus(cpus: set[int]) -> None:
    """Keep this process, and every thread it starts after this, on the housekeeping CPUs."""
    if not cpus:
        return
    try:
        os.sched_setaffinity(0, cpus)
    except OSError as error:
        raise AgentStartError(f"cannot pin to CPUs {sorted(cpus)}: {error.strerror}") from None


@dataclass(frozen=True)
class Pinning:
    """Where the agent runs: the CPUs to pin it to (None: not pinned), why, and the isolated CPUs found."""

    cpus: frozenset[int] | None
    reason: str
    isolated: tuple[int, ...] = ()
    trouble: bool = False  # not pinned although it may run on isolated CPUs: logged as a warning


def _sys_cpus(host: HostAccess, path: str) -> set[int] | str | None:
    """The online CPUs' sysfs cpulist; None when the file cannot be read; a problem as text."""
    text = host.read_text(path)
    if text is None:
        return None
    if text.strip() == "(null)":  # nohz_full on kernels where no CPU is nohz_full
        return set()
    parsed = parse_cpu_list(text)
    if parsed.problems:
        return f"{path}: {parsed.problems[0]}"
    return set(parsed.value)


def housekeeping_pinning(host: HostAccess, allowed: set[int]) -> Pinning:
    """With FLEETFIX_AGENT_CPUS empty: the online CPUs that are neither isolated (isolcpus) nor nohz_full, and
    of those the ones the agent was started on (a CPUAffinity= or taskset is narrowed, never widened, unless it
    holds only isolated CPUs). A kernel without nohz_full support has no nohz_full file, so one of the two
    files is enough. Seed 004: the watcher must not jitter the isolated cores; but not knowing which they are
    is no reason to refuse to start, so then the agent stays where it was started, and says why."""
    online = _sys_cpus(host, SYS_ONLINE)
    if online is None:
        return Pinning(None, f"{SYS_ONLINE} cannot be read", trouble=True)
    if isinstance(online, str):
        return Pinning(None, online, trouble=True)
    if not online:
        return Pinning(None, f"{SYS_ONLINE} names no CPU", trouble=True)
    found, problems = read_isolated(host)
    if problems:
        return Pinning(None, problems[0], trouble=True)
    if found is None:
        return Pinning(None, f"{CMDLINE}, {SYS_ISOLATED} and {SYS_NOHZ_FULL} cannot be read", trouble=True)
    isolated = found & online
    if not isolated:
        return Pinning(None, "no isolated CPUs")
    named = tuple(sorted(isolated))
    housekeeping = online - isolated
    if not housekeeping:
        return Pinning(None, "every online CPU is isolated or nohz_full", named, trouble=True)
    return Pinning(frozenset(housekeeping & allowed or housekeeping), "isolated CPUs found", named)


def choose_pinning(config: AgentConfig, host: HostAccess, allowed: set[int]) -> Pinning:
    """An explicit FLEETFIX_AGENT_CPUS wins; 'all' turns pinning off; empty finds the housekeeping CPUs."""
    if config.pinning_off:
        return Pinning(None, f"FLEETFIX_AGENT_CPUS={CPUS_UNPINNED}")
    if config.cpu_set:
        return Pinning(frozenset(config.cpu_set), EXPLICIT)
    return housekeeping_pinning(host, allowed)


def pin_agent(config: AgentConfig, host: HostAccess) -> Pinning:
    """Pin this process as configured, before any thread starts, so all of them inherit it. An explicit CPU set
    it cannot run on stops the agent; housekeeping CPUs found that it cannot be pinned to leave it where it is."""
    pinning = choose_pinning(config, host, os.sched_getaffinity(0))
    if pinning.cpus is not None:
        try:
            pin_to_cpus(set(pinning.cpus))
        except AgentStartError as error:
            if pinning.reason == EXPLICIT:
                raise
            pinning = Pinning(None, str(error), pinning.isolated, trouble=True)
    fields: dict[str, object] = {"reason": pinning.reason}
    if pinning.isolated:
        fields["isolated"] = list(pinning.isolated)
    if pinning.cpus is not None:
        log.info("checker.agent.pinned", extra={"fields": {"cpus": sorted(pinning.cpus), **fields}})
    else:
        log.log(
            logging.WARNING if pinning.trouble else logging.INFO, "checker.agent.not_pinned", extra={"fields": fields}
        )
    return pinning


def own_status() -> tuple[int | None, float, list[int]]:
    """The agent's own resident memory (kB), CPU seconds and allowed CPUs — who watches the watchmen."""
    rss = None
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1])
                    break
    except (OSError, ValueError, IndexError):
        rss = None
    times = os.times()
    return rss, times.user + times.system, sorted(os.sched_getaffinity(0))


class CheckLoop:
    def __init__(
        self,
        app: Celery,
        hostname: str,
        interval_s: int,
        config: AgentConfig | None = None,
        host: HostAccess | None = None,
        simulated: VirtualHost | None = None,
    ) -> None:
        self.app = app
        self.hostname = hostname
        self.interval_s = interval_s
        self._rescheduled = threading.Event()
        self.config = config or AgentConfig()
        self.host = host if host is not None else LiveHost()
        self.state_dir, self._lock_file, self.state_problem = open_state_dir(self.config.state_dir)
        self.simulated = simulated  # a virtual host this agent stands in for (cyborg's simulated driver acts on it)
        self.sim_lock = threading.RLock()
        if simulated is not None and self.state_dir is not None:
            from checker.sim.standalone import load_host

            load_host(self.state_dir, simulated)  # what earlier actions changed on it
        self.cursors = CollectorState(self.state_dir / "cursors.json" if self.state_dir else None)
        # Built once: the redfish collector keeps its BMC session across cycles (docs/agent.md, "Redfish").
        self.collectors = bmc_collectors(self.config.bmc_protocol, self.config.redfish_settings)
        self.spool = Spool(self.state_dir / "spool", self.config.spool_max_reports) if self.state_dir else None
        self.delivery = Delivery(
            app,
            spool=self.spool,
            fallback_url=self.config.fallback_url,
            http_timeout_s=self.config.http_timeout_s,
            token=self.config.http_token,
            wire=WireState(
                hostname,
                path=self.state_dir / "wire_base.json" if self.state_dir else None,
                full_every=self.config.full_report_every,
                enabled=self.config.delta_reports,
            ),
        )
        self.last_delivery: Outcome | None = None
        self.benchmark = BenchmarkSchedule(
            parse_window(self.config.benchmark_window),
            hostname,
            self.state_dir / "benchmark.json" if self.state_dir else None,
        )
        self._dropped_reported = self.spool.dropped_total if self.spool else 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, name="check-cycle", daemon=True)
        self.probe: subprocess.Popen[bytes] | None = None  # the stall probe's process (checker/agent/probe.py)

    def build(self) -> Report | None:
        config = self.config
        if self.simulated is not None:
            with self.sim_lock:
                if self.simulated.down:  # a host that is down (or restarting) sends nothing
                    return None
                return self.simulated.report(dt.datetime.now(dt.UTC), interval_s=self.interval_s)
        report = run_cycle(
            self.host,
            hostname=self.hostname,
            interval_s=self.interval_s,
            state=self.cursors,
            collectors=self.collectors,
            timeout_s=config.collector_timeout_s,
            timeouts=config.collector_timeouts,
            memo_s=config.inventory_refresh_s,
            max_report_bytes=config.max_report_bytes,
        )
        ran = self.benchmark.maybe_run(self.host)  # about once a day, off-peak, on a housekeeping CPU
        if ran is not None:
            report.observations.benchmark, report.collectors["benchmark"] = ran
        started = time.perf_counter()
        rss, cpu, cpus = own_status()
        dropped_total = self.spool.dropped_total if self.spool else self.delivery.dropped_without_spool
        report.observations.agent = AgentStatus(
            spooled=len(self.spool) if self.spool else 0,
            spool_dropped_total=dropped_total,
            rss_kb=rss,
            cpu_seconds=round(cpu, 3),
            cpus=cpus,
            last_delivery=self.last_delivery,
        )
        problems = [self.state_problem] if self.state_problem else []
        if dropped_total > self._dropped_reported:
            problems.append(f"{dropped_total - self._dropped_reported} reports dropped since the last report")
        self._dropped_reported = dropped_total
        report.collectors["agent"] = CollectorRun(
            status=CollectorStatus.ok,
            duration_ms=(time.perf_counter() - started) * 1000,
            problems=problems,
        )
        return report

    def once(self) -> uuid.UUID | None:
        with self._lock:  # the timer and a run_check_now task never overlap
            report = self.build()
            if report is None:
                return None
            outcome = self.delivery.deliver(report.model_dump(mode="json"), report)  # over HTTP maybe as a delta
            if self.delivery.wire is not None:
                self.delivery.wire.finish()
            # Sent, spooled, or dropped and counted: either way these records were handled.
            self.cursors.commit()
            self.last_delivery = outcome
        log.info("checker.report.sent", extra={"fields": {"report_id": str(report.report_id), "via": outcome}})
        return report.report_id

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            try:
                self.once()
            except Exception:  # the loop must outlive any one bad cycle
                log.exception("checker.cycle.failed")
            next_at += self.interval_s
            now = time.monotonic()
            if next_at <= now:  # a cycle overran: skip the missed slots instead of bunching up
                next_at = now + self.interval_s
            # Woken early when the central side sets a new interval; the next cycle follows it.
            if self._rescheduled.wait(next_at - now):
                self._rescheduled.clear()
                next_at = time.monotonic() + self.interval_s

    def reschedule(self, interval_s: int) -> None:
        """Run the cycle every `interval_s` from now on (the central service's schedule)."""
        self.interval_s = interval_s
        self._rescheduled.set()

    def start(self) -> None:
        if self.simulated is None:  # a virtual host's stalls are the simulation's
            self.probe = start_probe(self.config, self.host, self.state_dir)
        self.thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._rescheduled.set()
        if self.thread.is_alive():
            self.thread.join(timeout=5)
        stop_probe(self.probe)
        if (redfish := self.collectors.get("redfish")) is not None and hasattr(redfish, "close"):
            redfish.close()  # ends the BMC session
        if isinstance(self.host, LiveHost):
            self.host.close()
        if self._lock_file is not None:
            self._lock_file.close()


def run_agent(
    settings: Settings, *, hostname: str | None = None, loglevel: str = "INFO", config: AgentConfig | None = None
) -> None:
    config = config or AgentConfig()
    pin_agent(config, LiveHost())  # before any thread starts, so all of them inherit it
    name = hostname or settings.hostname or socket.gethostname()
    queue = host_queue(name)
    app = create_celery(
        settings.broker_url,
        extra_queues=(queue,),
        include=("checker.agent.tasks", "cyborg.host.tasks"),
        tls=settings.broker_tls,
    )
    simulated = None
    if config.driver == "simulated":
        from checker.sim.standalone import standalone_host

        try:
            simulated = standalone_host(
                name,
                hardware_class=config.simulate_hardware_class,
                faults=config.simulate_faults,
                seed=zlib.crc32(name.encode()),  # the same host every start
            )
        except ValueError as error:
            raise AgentStartError(f"FLEETFIX_AGENT_SIMULATE_*: {error}") from None
    loop = CheckLoop(app, name, settings.report_interval_s, config, simulated=simulated)
    provide(app, CheckLoop, loop)  # the agent's runtime: its tasks (and cyborg's executor) find it on the app
    loop.start()
    try:
        # The worker `celery worker -Q … -n … -P solo --without-gossip --without-mingle -l …` builds, built
        # here without Celery's command line: that would load its CLI stack (click's REPL, prompt_toolkit),
        # about 9 MiB of resident memory on every host, to parse six fixed options (docs/agent.md, "Figures").
        worker = app.Worker(
            hostname=f"agent@{name}",
            queues=[queue],
            pool="solo",
            loglevel=mlevel(loglevel),
            without_gossip=True,
            without_mingle=True,
            optimization="default",
        )
        worker.start()
    finally:
        loop.stop()
