"""The demo of `make run` (`fleetfix up --simulate 50`) driven on a simulated clock, inside a test's session.

api/embedded.py runs the fleet on the wall clock: every `sim_interval` seconds the virtual hosts' reports go
through the ingest queue, the one worker runs what the remediator sends (remediations, cyborg's actions on
the virtual hosts' executors with the simulated driver, their results), and beat runs the periodic tasks.
`DemoRun` does the same work in the same order, each task's body with the simulated clock's `now` (the
functions the tasks of remediator/tasks.py wrap), so five minutes of the demo take seconds and no commit.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from api.embedded import DEMO_BASELINES, DEMO_RULES, simulated_technician
from api.runtime import repair_reactions
from checker.sim import SimulatedFleet
from core.dispatch import _PENDING
from core.queue import HOST_QUEUE_PREFIX
from cyborg.central import CentralCyborg
from cyborg.drivers.bmc import SimulatedBmc
from cyborg.drivers.reach import SimulatedReach
from cyborg.drivers.scheduler import SimulatedScheduler
from cyborg.drivers.simulated import SimulatedDriver
from cyborg.host.executor import RESULT_TASK, HostExecutor
from cyborg.host.journal import Journal
from remediator import deadlines, handoff, host_results, planning, repairs, rollouts, runner, unreachable
from remediator.host_evaluation import evaluate_host
from remediator.ingest import ingest
from remediator.inventory import HostInventory, apply_inventory
from remediator.models import Host, HostState, Remediation, RemediationState, Signal
from remediator.rules import RuleRegistry
from tests.builders.runtime import rewire, runtime_of
from tests.cyborg.helpers import Reports
from ticketing.lifecycle import Reactions

# What `make run` builds (Makefile `run`, api/cli.py `up`, api/embedded.py run_up).
DEMO_SIZE, DEMO_SEED, DEMO_INTERVAL_S = 50, 1, 5.0
# Beat's periods (remediator/tasks.py beat_schedule) of the tasks that move remediations along.
BEAT_S = {"unreachable": 60, "admit": 15, "deadlines": 10, "settle": 30, "repairs": 30, "rollouts": 60}


@dataclass
class DemoRun:
    """The demo fleet, its central side in `session`, and a clock that moves one report interval per tick."""

    session: Session
    now: dt.datetime
    fleet: SimulatedFleet = field(init=False)
    unhandled: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.fleet = SimulatedFleet(DEMO_SIZE, seed=DEMO_SEED, fault_fraction=0.5, showcase=True)
        self.start = self.now
        lock = threading.RLock()
        old = runtime_of(self.session).settings
        settings = old.model_copy(update={"baselines_path": DEMO_BASELINES, "rules_paths": [DEMO_RULES]})
        by_name = {h.hostname: h for h in self.fleet.hosts}
        cyborg = CentralCyborg(
            settings,
            bmc=SimulatedBmc(by_name, lock=lock, on_boot=self._boot),
            reach=SimulatedReach(by_name, lock=lock),
            scheduler=SimulatedScheduler(by_name, lock=lock),
        )
        self.registry = RuleRegistry([DEMO_RULES])
        reactions = Reactions((simulated_technician(self.fleet, lock), *repair_reactions()))
        rewire(self.session, settings=settings, cyborg=cyborg, rules=self.registry, reactions=reactions)
        self.replies = Reports()
        verifier = cyborg.signer().verifier()
        self.executors = {
            h.hostname: HostExecutor(
                h.hostname,
                verifier=verifier,
                driver=SimulatedDriver(h, lock=lock),
                journal=Journal(None),
                reporter=self.replies,
            )
            for h in self.fleet.hosts
        }
        rows = [HostInventory(**row) for row in self.fleet.inventory()]
        apply_inventory(self.session, rows, actor="system:simulator")
        for batch in self.fleet.spooled(self.now):  # the agents' catch-up batches (FleetSimulator.catch_up)
            ingest(self.session, batch, ruleset=self.ruleset, now=self.now)
            self.work()

    def _boot(self, hostname: str) -> None:
        self.executors[hostname].resume()

    @property
    def ruleset(self) -> Any:
        return self.registry.ruleset

    def run(self, seconds: float) -> None:
        until = self.now + dt.timedelta(seconds=seconds)
        while self.now < until:
            self.tick()

    def tick(self) -> None:
        """One report interval: the fleet's reports through ingest, then the worker's queue, then beat."""
        interval = round(DEMO_INTERVAL_S)
        ingest(self.session, self.fleet.reports(self.now, interval_s=interval), ruleset=self.ruleset, now=self.now)
        self.work()
        elapsed = round((self.now - self.start).total_seconds())
        ruleset, now = self.ruleset, self.now
        if elapsed % BEAT_S["unreachable"] < interval:
            self.mark_unreachable()
        if elapsed % BEAT_S["admit"] < interval:
            waiting = self.session.scalars(
                select(Remediation).where(Remediation.state == RemediationState.detected).order_by(Remediation.id)
            ).all()
            for remediation in waiting:
                planning.admit(self.session, remediation, ruleset, now)
        if elapsed % BEAT_S["deadlines"] < interval:
            deadlines.check_deadlines(self.session, ruleset, now)
        if elapsed % BEAT_S["settle"] < interval:
            due = self.session.scalars(
                select(Remediation).where(
                    Remediation.state == RemediationState.verifying, Remediation.settle_until <= now
                )
            ).all()
            for remediation in due:
                runner.settle_if_due(self.session, remediation, now, ruleset)
        if elapsed % BEAT_S["repairs"] < interval:
            repairs.settle_repairs(self.session, now=now)
        if elapsed % BEAT_S["rollouts"] < interval:
            rollouts.evaluate(self.session, ruleset, now)
        self.work()
        self.session.flush()
        self.now += dt.timedelta(seconds=DEMO_INTERVAL_S)

    def mark_unreachable(self) -> None:
        """remediator.mark_unreachable, then remediator.probe_silent_host for each host it marked."""
        stale_after = runtime_of(self.session).settings.stale_after_intervals
        hosts = self.session.scalars(select(Host).where(Host.state == HostState.in_service)).all()
        for host in hosts:
            silent = self.now - host.last_report_at if host.last_report_at else None
            if silent is None or silent <= dt.timedelta(seconds=host.report_interval_s * stale_after):
                continue
            host.state = HostState.unreachable
            self.probe(host)

    def probe(self, host: Host) -> None:
        remediator = runtime_of(self.session).remediator
        seen = unreachable.probe(handoff.target_of(host), remediator.cyborg)
        stale_s = host.report_interval_s * remediator.settings.stale_after_intervals
        seen = unreachable.with_rack(seen, host.rack, unreachable.rack_silent(self.session, host, self.now, stale_s))
        seen = unreachable.with_network(seen, unreachable.network_suspect(self.session, host))
        signal = unreachable.unreachable_signal(host, seen, self.now)
        self.session.add(
            Signal(
                host_id=host.id,
                kind=signal.kind,
                subject=signal.subject,
                value=signal.value,
                detail=signal.detail,
                observed_at=self.now,
            )
        )
        memory = dict(host.memory or {})
        firings = evaluate_host(host, [signal], self.ruleset, memory, self.now)
        host.memory = memory
        self.session.flush()
        for firing in firings:
            planning.decide(self.session, host, firing, self.ruleset, None, self.now)

    def work(self) -> None:
        """Run what would be sent on commit, as the embedded worker would, until nothing is left."""
        for _ in range(100):
            pending = self.session.info.pop(_PENDING, [])
            if not pending:
                return
            for _savepoint, signature in pending:
                self.run_task(signature)

    def run_task(self, signature: Any) -> None:
        ruleset, now = self.ruleset, self.now
        if signature.task == "remediator.run_remediation":
            [remediation_id] = signature.args
            runner.advance(self.session, remediation_id, ruleset=ruleset, now=now)
            remediation = self.session.get_one(Remediation, remediation_id)
            if runner.has_next(remediation):
                self.run_task(signature)
        elif signature.task == "cyborg.run_action":
            hostname = signature.options["queue"].removeprefix(HOST_QUEUE_PREFIX)
            self.executors[hostname].handle(signature.args[0])
            self.answer()
        else:
            self.unhandled[signature.task] += 1

    def answer(self) -> None:
        """The hosts' messages back to the remediator (remediator.step_started, step_result, action_refused)."""
        sent, self.replies.sent = self.replies.sent, []
        for task, body in sent:
            if task == RESULT_TASK:
                host_results.record_host_result(self.session, body, self.ruleset, self.now)
            elif task == "remediator.step_started":
                host_results.record_host_started(self.session, body, self.now)
            elif task == "remediator.action_refused":
                host_results.record_refusal(self.session, body, self.ruleset, self.now)
            else:
                self.unhandled[task] += 1
