"""Start-up of the central side: settings -> database -> Celery app with its tasks."""

from __future__ import annotations

from celery import Celery

from core.db import Database, configure_database
from core.queue import create_celery
from core.settings import Settings

CENTRAL_TASK_MODULES = ("remediator.tasks",)


def boot_central(settings: Settings) -> tuple[Database, Celery]:
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    database = configure_database(settings.effective_database_url, pool_size=settings.database_pool_size)
    app = create_celery(settings.broker_url, include=CENTRAL_TASK_MODULES)
    import remediator.tasks as remediator_tasks  # registers the tasks on the new app

    app.conf.beat_schedule = remediator_tasks.beat_schedule(settings.report_interval_s)
    app.conf.beat_schedule_filename = str(settings.data_dir / "celerybeat-schedule")
    app.loader.import_default_modules()
    return database, app
