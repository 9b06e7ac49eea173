"""`fleetfix up`: API, web UI, a worker, the scheduler and (optionally) a simulated
fleet in one process, on the in-process broker.

The worker is Celery's own WorkController run in a thread (as Celery's test
harness does), so tasks take exactly the path they take in production. With a
simulated fleet the same worker also consumes every virtual host's
host.<hostname> queue and runs cyborg's executor there with the simulated
driver: plans of host actions are signed, sent, verified and carried out on the
virtual hosts, power cycles go through their simulated BMCs, and drains and undrains
through the fleet's simulated scheduler (cyborg.drivers.scheduler).
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from pathlib import Path
from typing import Any

import uvicorn
from celery import Celery, beat
from celery.worker import WorkController

from api.app import create_app
from api.bootstrap import bootstrap_admin
from api.runtime import build_central, central_celery, repair_reactions
from api.settings import CentralSettings
from api.web.demo import OPERATOR_USERNAME, accounts_file, demo_accounts, technician_name
from checker.sim import SimulatedFleet, showcase
from checker.sim.repairs import replace_dimm
from core.queue import CENTRAL_QUEUES, INGEST_QUEUE, host_queue
from cyborg.central import Cyborg
from cyborg.central.settings import CyborgSettings
from migrations import upgrade
from remediator.inventory import HostInventory, apply_inventory
from remediator.tasks import INGEST_BATCH
from ticketing.lifecycle import LifecycleEvent, Reaction, Reactions

log = logging.getLogger(__name__)
DEMO_BASELINES = Path(__file__).with_name("demo_baselines.yaml")
DEMO_RULES = Path(__file__).with_name("demo_rules.yaml")


class EmbeddedWorker:
    """A Celery worker and the beat scheduler, each in a background thread of this process.

    Beat is started here as a thread: the worker's own `beat=True` would fork
    it into a child process, where the in-process broker is a different one.
    """

    def __init__(
        self,
        app: Celery,
        *,
        concurrency: int = 2,
        schedule_file: str | None = None,
        host_queues: tuple[str, ...] = (),
    ) -> None:
        self.beat = beat.EmbeddedService(app, thread=True, schedule_filename=schedule_file)
        self.controller = WorkController(
            app=app,
            pool="threads",
            concurrency=concurrency,
            queues=[*CENTRAL_QUEUES, *host_queues],
            prefetch_multiplier=INGEST_BATCH,  # so single-report messages fill an ingest batch
            without_heartbeat=True,
            without_mingle=True,
            without_gossip=True,
            hostname="embedded@fleetfix",
        )
        self.thread = threading.Thread(target=self.controller.start, name="celery-worker", daemon=True)

    def start(self) -> None:
        self.thread.start()
        self.beat.start()

    def stop(self) -> None:
        self.beat.stop()
        self.controller.stop(in_sighandler=False)


class FleetSimulator:
    """Sends the simulated fleet's reports through the ingest queue every `interval_s`."""

    def __init__(
        self,
        app: Celery,
        fleet: SimulatedFleet,
        *,
        interval_s: float,
        batch: int = 100,
        lock: threading.RLock | None = None,
    ) -> None:
        self.app = app
        self.fleet = fleet
        self.lock = lock or threading.RLock()  # shared with the simulated driver: actions and reports never interleave
        self.interval_s = interval_s
        self.batch = batch
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="simulated-fleet", daemon=True)

    def tick(self, now: dt.datetime) -> int:
        with self.lock:
            reports = self.fleet.reports(now, interval_s=max(1, round(self.interval_s)))
        for start in range(0, len(reports), self.batch):
            chunk: list[dict[str, Any]] = [r.model_dump(mode="json") for r in reports[start : start + self.batch]]
            self.app.send_task("remediator.ingest_reports", args=[chunk], queue=INGEST_QUEUE)
        return len(reports)

    def catch_up(self, now: dt.datetime) -> int:
        """What the virtual hosts' agents spooled before this process came up (SimulatedFleet.spooled), one
        catch-up batch per host, as agents send theirs; then a report interval's pause, so the worker has the
        batches before the live reports come."""
        with self.lock:
            batches = self.fleet.spooled(now)
        for batch in batches:
            chunk: list[dict[str, Any]] = [r.model_dump(mode="json") for r in batch]
            self.app.send_task("remediator.ingest_reports", args=[chunk], queue=INGEST_QUEUE)
        return sum(len(batch) for batch in batches)

    def _run(self) -> None:
        sent = self.catch_up(dt.datetime.now(dt.UTC))
        log.info("checker.sim.caught_up", extra={"fields": {"reports": sent}})
        self._stop.wait(self.interval_s)
        while not self._stop.is_set():
            sent = self.tick(dt.datetime.now(dt.UTC))
            log.debug("checker.sim.tick", extra={"fields": {"reports": sent}})
            self._stop.wait(self.interval_s)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self._stop.set()


def simulated_hosts(
    settings: CyborgSettings, app: Celery, fleet: SimulatedFleet, lock: threading.RLock
) -> tuple[Cyborg, tuple[str, ...]]:
    """Cyborg on every virtual host: an executor with the simulated driver (holding the central key's
    public half, as a real agent would), handed to `app`, and the central executor with the fleet's
    simulated BMCs for power cycles and reimages and its simulated scheduler for drains and undrains (the
    demo configures no FLEETFIX_SCHEDULER_HOOKS: without it every drain would be a no-op and every load
    test a "host not drained" gap). Returns that executor and the hosts' queues for the worker to consume."""
    import cyborg.host.tasks  # noqa: F401 - registers cyborg.run_action on this process's app
    from cyborg.central import CentralCyborg
    from cyborg.drivers.bmc import SimulatedBmc
    from cyborg.drivers.reach import SimulatedReach
    from cyborg.drivers.scheduler import SimulatedScheduler
    from cyborg.drivers.simulated import SimulatedDriver
    from cyborg.host.executor import CeleryReporter, HostExecutor
    from cyborg.host.journal import Journal
    from cyborg.host.runtime import HostExecutors

    executors = HostExecutors().provide_to(app)

    def boot(hostname: str) -> None:  # the agent of a host that came back finishes what it left
        executors.executor_for(host_queue(hostname)).resume()

    by_name = {h.hostname: h for h in fleet.hosts}
    bmc, reach = SimulatedBmc(by_name, lock=lock, on_boot=boot), SimulatedReach(by_name, lock=lock)
    scheduler = SimulatedScheduler(by_name, lock=lock)
    central = CentralCyborg(settings, bmc=bmc, reach=reach, scheduler=scheduler, app=app)
    verifier = central.signer().verifier()
    reporter = CeleryReporter(app)
    for host in fleet.hosts:
        driver = SimulatedDriver(host, lock=lock)
        executors.install(
            HostExecutor(host.hostname, verifier=verifier, driver=driver, journal=Journal(None), reporter=reporter)
        )
    return central, tuple(host_queue(h.hostname) for h in fleet.hosts)


def simulated_technician(fleet: SimulatedFleet, lock: threading.RLock) -> Reaction:
    """The hands behind a resolve in the demo: each DIMM the technician recorded as replaced is swapped in
    the virtual host (checker.sim.repairs) before the repair's load test reaches it (docs/simulated-fleet.md)."""

    def swap(_session: Any, event: LifecycleEvent) -> None:
        ticket = event.ticket
        if event.kind != "resolved" or ticket.part_type != "dimm":
            return
        try:
            host = fleet.by_name(ticket.hostname)
        except KeyError:
            return  # not a virtual host
        for repair in ticket.repairs:
            if repair.replaced_at == event.at:
                with lock:
                    swapped = replace_dimm(host, repair.part or ticket.part, repair.new_serial, event.at)
                log.info("checker.sim.dimm_swapped", extra={"fields": {"host": host.hostname, **swapped}})

    return swap


def demo_guide(fleet: SimulatedFleet, settings: CentralSettings) -> list[str]:
    """The few lines `fleetfix up --simulate` prints at start: where to look, as whom, and at which host first
    (chosen from this fleet's own faults: checker/sim/showcase.py HIGHLIGHTS)."""
    url = settings.effective_public_url + "/"
    found = showcase.highlights(fleet.hosts)
    lines = [
        f"fleetfix: the demo fleet: {len(fleet.hosts)} virtual hosts, {sum(bool(h.faults) for h in fleet.hosts)} of "
        f"them faulty; open {url}",
        f"fleetfix:   passwords of the demo accounts: {accounts_file(settings)}",
    ]
    for number, highlight in enumerate(found):  # the first is the technician's, the others the operator's
        who = technician_name(highlight.datacenter) if number == 0 else OPERATOR_USERNAME
        lines.append(f"fleetfix:   sign in as {who}, then {highlight.hostname}: {highlight.what}")
    lines.append(
        "fleetfix:   the first tickets come within a minute, a decision of every family of the default pack "
        "within five (docs/simulated-fleet.md)"
    )
    return lines


def run_up(settings: CentralSettings, *, simulate: int = 0, sim_interval: float = 5.0, seed: int = 1) -> None:
    settings.data_dir.mkdir(parents=True, exist_ok=True)  # the signing key of a simulated fleet is made there
    if simulate and settings.baselines_path is None:
        # The demo's baselines give the Opteron class a new kernel build with a side effect: a staged rollout
        # that halts on its canary within minutes (api/demo_baselines.yaml, docs/simulated-fleet.md).
        settings = settings.model_copy(update={"baselines_path": DEMO_BASELINES})
    if simulate and not settings.rules_paths:
        # Caps a demo fleet of a few dozen hosts can move under (api/demo_rules.yaml).
        settings = settings.model_copy(update={"rules_paths": [DEMO_RULES]})
    app = central_celery(settings)
    # The demo shows what fleetfix decides: half the hosts faulty (more if needed), every kind of fault once first.
    fleet = SimulatedFleet(simulate, seed=seed, fault_fraction=0.5, showcase=True) if simulate else None
    lock = threading.RLock()
    cyborg, host_queues = simulated_hosts(settings, app, fleet, lock) if fleet else (None, ())
    # The one worker of this process carries out every action (on the simulated fleet, if there is one).
    reactions = Reactions((simulated_technician(fleet, lock), *repair_reactions())) if fleet else None
    runtime = build_central(settings, celery=app, cyborg=cyborg, runs_actions=True, reactions=reactions)
    database = runtime.database
    upgrade(settings.effective_database_url)
    bootstrap_admin(database, settings)
    worker = EmbeddedWorker(app, schedule_file=str(settings.data_dir / "celerybeat-schedule"), host_queues=host_queues)
    worker.start()
    simulator = None
    if fleet is not None:
        with database.session() as session:
            apply_inventory(session, [HostInventory(**row) for row in fleet.inventory()], actor="system:simulator")
        simulator = FleetSimulator(app, fleet, interval_s=sim_interval, lock=lock)
        simulator.start()
        faulty = [h.hostname for h in fleet.hosts if h.faults]
        log.info("checker.sim.started", extra={"fields": {"hosts": simulate, "faulty": len(faulty)}})
    demo_accounts(database, settings)  # a technician per datacenter and an operator, for the web UI
    if fleet is not None:
        for line in demo_guide(fleet, settings):
            print(line, flush=True)
    api = create_app(runtime)
    try:
        uvicorn.run(api, host=settings.api_host, port=settings.api_port, log_level=settings.log_level.lower())
    finally:
        if simulator:
            simulator.stop()
        worker.stop()
        database.dispose()
