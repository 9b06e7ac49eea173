"""`fleetfix agent`: the Celery worker on a host.

It consumes the host's own queue (host.<hostname>) for actions, and runs the
check cycle every interval in a background thread, sending each report to the
central `ingest` queue by task name (the agent never imports central code).
"""

from __future__ import annotations

import logging
import socket
import threading
import uuid

from celery import Celery

from checker.agent import state
from checker.collectors.base import LiveHost
from checker.cycle import run_cycle
from core.queue import INGEST_QUEUE, create_celery, host_queue
from core.settings import Settings

log = logging.getLogger(__name__)


class CheckLoop:
    def __init__(self, app: Celery, hostname: str, interval_s: int) -> None:
        self.app = app
        self.hostname = hostname
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, name="check-cycle", daemon=True)

    def once(self) -> uuid.UUID:
        with self._lock:  # the timer and a run_check_now task never overlap
            report = run_cycle(LiveHost(), hostname=self.hostname, interval_s=self.interval_s)
            payload = [report.model_dump(mode="json")]
            self.app.send_task("remediator.ingest_reports", args=[payload], queue=INGEST_QUEUE)
        log.info("checker.report.sent", extra={"fields": {"report_id": str(report.report_id)}})
        return report.report_id

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.once()
            except Exception:  # the loop must outlive a broker hiccup
                log.exception("checker.report.send_failed")
            self._stop.wait(self.interval_s)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self._stop.set()


def run_agent(settings: Settings, *, hostname: str | None = None, loglevel: str = "INFO") -> None:
    name = hostname or settings.hostname or socket.gethostname()
    queue = host_queue(name)
    app = create_celery(settings.broker_url, extra_queues=(queue,), include=("checker.agent.tasks",))
    loop = CheckLoop(app, name, settings.report_interval_s)
    state.check_loop = loop
    loop.start()
    try:
        app.worker_main(
            [
                "worker",
                "-Q",
                queue,
                "-n",
                f"agent@{name}",
                "-P",
                "solo",
                "--without-gossip",
                "--without-mingle",
                "-l",
                loglevel,
            ]
        )
    finally:
        loop.stop()
