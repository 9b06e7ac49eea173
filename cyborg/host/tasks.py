"""The task an agent runs for cyborg on its own host.<hostname> queue, and the agent's wiring.

In a `fleetfix agent` process the executor is built when the worker starts, from the check loop the
agent's root (checker.agent.worker.run_agent) handed to the app (the agent's config: public key,
allow-list, driver, state directory), and kept on that app; when the worker is ready the executor
finishes what the agent's last run left: an action cut short, a result not sent. `fleetfix up` hands
its app the simulated hosts' executors itself (api/embedded.py).
"""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task
from celery.signals import worker_init, worker_ready

from core.queue import find
from cyborg.host.runtime import HostExecutors

log = logging.getLogger(__name__)


@shared_task(name="cyborg.run_action", bind=True)
def run_action(self: Any, message: dict[str, Any]) -> dict[str, Any]:
    """Run one signed action envelope (see cyborg.host.executor)."""
    routing_key = (self.request.delivery_info or {}).get("routing_key")
    return HostExecutors.of(self.app).executor_for(routing_key).handle(message)


@worker_init.connect
def _agent_executor(sender: Any = None, **_: Any) -> None:
    from checker.agent.worker import CheckLoop

    app = getattr(sender, "app", None)
    loop = find(app, CheckLoop) if app is not None else None
    if loop is None:  # not an agent (the embedded process hands its app the simulated hosts' executors)
        return
    from cyborg.host.agent import executor_for_agent

    HostExecutors([executor_for_agent(loop)]).provide_to(app)


@worker_ready.connect
def _resume(sender: Any = None, **_: Any) -> None:
    app = getattr(sender, "app", None)
    for executor in HostExecutors.of(app).executors() if app is not None else ():
        try:
            resumed = executor.resume()
        except Exception:  # the worker must still serve new envelopes
            log.exception("cyborg.resume.failed", extra={"fields": {"host": executor.hostname}})
            continue
        if resumed:
            log.info("cyborg.resume.done", extra={"fields": {"host": executor.hostname, "entries": resumed}})
