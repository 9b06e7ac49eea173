"""The composition root of a central process: settings -> database -> Celery app -> each stage's runtime.

Every central process (`fleetfix api`, `worker`, `ingester`, `scheduler`, `up`) builds its runtime here,
once, as plain objects, and hands it on: Celery tasks find their stage's part on their app
(`Remediator.of(self.app)`, `Ticketing.of(self.app)`), routes on `request.app.state.runtime`
(api/deps.py), and code deep in a unit of work on its session (the Database carries the audit
listeners, the reactions to ticket changes, the alerts' subject look-ups and the remediator). No module
keeps a service in a global, so two runtimes built side by side in one process share nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from celery import Celery

from api.settings import CentralSettings
from core.audit import AuditListeners
from core.db import Database
from core.queue import create_celery, provide
from cyborg.central import SCHEDULER_ACTIONS, CentralCyborg, Cyborg
from remediator.rules import RuleRegistry
from remediator.runtime import Remediator
from ticketing.lifecycle import Reactions
from ticketing.notify.events import Subjects
from ticketing.runtime import Ticketing

CENTRAL_TASK_MODULES = ("remediator.tasks", "ticketing.notify.tasks", "ticketing.tasks")


@dataclass(frozen=True, eq=False)
class CentralRuntime:
    """What one central process runs with."""

    settings: CentralSettings
    database: Database
    celery: Celery
    remediator: Remediator
    ticketing: Ticketing
    closes_on_stop: _CloseOnStop | None = None  # a worker's: its cyborg's BMC sessions are closed when it stops

    def dispose(self) -> None:
        if self.closes_on_stop is not None:
            self.closes_on_stop.disconnect()
        self.database.dispose()


def central_celery(settings: CentralSettings) -> Celery:
    """The central Celery app, with the central tasks and their beat schedule (no runtime yet)."""
    app = create_celery(
        settings.broker_url,
        include=CENTRAL_TASK_MODULES,
        tls=settings.broker_tls,
        datacenter_brokers=settings.datacenter_brokers,
    )
    import remediator.tasks as remediator_tasks  # registers the tasks on the new app
    import ticketing.notify.tasks as alert_tasks

    app.conf.beat_schedule = {
        **remediator_tasks.beat_schedule(settings.report_interval_s),
        **alert_tasks.beat_schedule(settings),
    }
    app.conf.beat_schedule_filename = str(settings.data_dir / "celerybeat-schedule")
    app.loader.import_default_modules()
    return app


def build_central(
    settings: CentralSettings,
    *,
    database: Database | None = None,
    celery: Celery | None = None,
    cyborg: Cyborg | None = None,
    runs_actions: bool = False,
    rules: RuleRegistry | None = None,
    reactions: Reactions | None = None,
) -> CentralRuntime:
    """The runtime of a central process. `database`, `celery`, `cyborg`, `rules` and `reactions`: built from the
    settings unless given (tests, the demo's simulated fleet). Cyborg's executor carries out every action in a
    process that `runs_actions` (a worker); elsewhere (the API, the ingesters) only the scheduler's drain and
    undrain hooks, and any other action fails as having no executor."""
    if database is None:
        settings.data_dir.mkdir(parents=True, exist_ok=True)  # the embedded database, beat's schedule, the key
        database = Database(settings.effective_database_url, pool_size=settings.database_pool_size)
    if celery is None:
        celery = central_celery(settings)
    closes_on_stop = None
    if cyborg is None:
        central = CentralCyborg(settings, app=celery, actions=None if runs_actions else SCHEDULER_ACTIONS)
        if runs_actions:  # a worker's processes log out of the BMCs' Redfish sessions they kept when they stop
            closes_on_stop = _CloseOnStop(central)
        cyborg = central
    remediator = Remediator.build(settings, database, cyborg, rules=rules)
    ticketing = Ticketing(
        settings=settings,
        database=database,
        subjects=alert_subjects(),
        reactions=reactions if reactions is not None else repair_reactions(),
    )
    wire(database, celery, remediator, ticketing)
    return CentralRuntime(settings, database, celery, remediator, ticketing, closes_on_stop)


class _CloseOnStop:
    """Closes one central cyborg when a worker or its process stops. Celery's signals are the process's: the
    receiver is connected strongly under a key of its own, so it lives as long as the worker even when the
    runtime is thrown away once its app is taken (`fleetfix worker`), and is disconnected when the runtime is
    disposed, so a runtime disposed of is not closed again at shutdown (a lambda per runtime built, never
    disconnected, closed every one ever built)."""

    def __init__(self, central: CentralCyborg) -> None:
        from celery.signals import worker_process_shutdown, worker_shutdown

        self.central = central
        self.signals = (worker_process_shutdown, worker_shutdown)
        self.uid = f"fleetfix-close-on-stop-{id(self)}"
        for signal in self.signals:
            signal.connect(self, weak=False, dispatch_uid=self.uid)

    def __call__(self, **_: object) -> None:
        self.central.close()

    def disconnect(self) -> None:
        for signal in self.signals:
            signal.disconnect(self, dispatch_uid=self.uid)


def wire(database: Database, celery: Celery, remediator: Remediator, ticketing: Ticketing) -> None:
    """Hand the stages to the app's tasks and to the database's sessions."""
    from ticketing import notify as alerts

    provide(celery, Remediator, remediator)
    provide(celery, Ticketing, ticketing)
    database.provide(Remediator, remediator)
    database.provide(Reactions, ticketing.reactions)
    database.provide(Subjects, ticketing.subjects)
    database.provide(AuditListeners, AuditListeners(alerts.audit_listeners(ticketing.settings)))


def repair_reactions() -> Reactions:
    """The remediator's reaction to ticket changes (a resolve starts verification, a cancel releases the
    host), run by ticketing in the changing transaction (ticketing may not import the remediator)."""
    from remediator import repairs

    return Reactions((repairs.on_ticket_change,))


def alert_subjects() -> Subjects:
    """The look-ups that find the host and datacenter of a host or a remediation for Slack alerts
    (ticketing.notify; ticketing may not import the remediator)."""
    from sqlalchemy import String, cast, select

    from remediator.models import Host, Remediation

    return Subjects(
        {
            "host": lambda names: select(Host.hostname, Host.hostname, Host.datacenter).where(Host.hostname.in_(names)),
            "remediation": lambda ids: (
                select(cast(Remediation.id, String), Host.hostname, Remediation.datacenter)
                .join(Host, Host.id == Remediation.host_id)
                .where(Remediation.id.in_([int(i) for i in ids if i.isdigit()]))
            ),
        }
    )
