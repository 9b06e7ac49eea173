"""Start-up of the central side: settings -> database -> Celery app with its tasks."""

from __future__ import annotations

from celery import Celery

from core.db import Database, configure_database
from core.queue import create_celery
from core.settings import Settings

CENTRAL_TASK_MODULES = ("remediator.tasks", "ticketing.notify.tasks", "ticketing.tasks")


def boot_central(settings: Settings) -> tuple[Database, Celery]:
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    database = configure_database(settings.effective_database_url, pool_size=settings.database_pool_size)
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
    wire_alerts(settings)
    wire_repairs()
    app.conf.beat_schedule_filename = str(settings.data_dir / "celerybeat-schedule")
    app.loader.import_default_modules()
    return database, app


def wire_repairs() -> None:
    """The remediator's reaction to ticket changes (a resolve starts verification, a cancel releases the
    host), run by ticketing in the changing transaction (ticketing may not import the remediator)."""
    from remediator import repairs
    from ticketing import lifecycle

    lifecycle.add_reaction(repairs.on_ticket_change)


def wire_alerts(settings: Settings) -> None:
    """Slack alerts (ticketing.notify): turn the outbox on or off, and hand it the look-ups that find the
    host and datacenter of a host or a remediation (ticketing may not import the remediator)."""
    from sqlalchemy import String, cast, select

    from remediator.models import Host, Remediation
    from ticketing import notify as alerts

    alerts.register_subject(
        "host", lambda names: select(Host.hostname, Host.hostname, Host.datacenter).where(Host.hostname.in_(names))
    )
    alerts.register_subject(
        "remediation",
        lambda ids: (
            select(cast(Remediation.id, String), Host.hostname, Remediation.datacenter)
            .join(Host, Host.id == Remediation.host_id)
            .where(Remediation.id.in_([int(i) for i in ids if i.isdigit()]))
        ),
    )
    alerts.configure(settings)
