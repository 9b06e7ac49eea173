"""The task an agent runs for cyborg on its own host.<hostname> queue, and the agent's wiring.

In a `fleetfix agent` process the executor is built when the worker starts (from the agent's
config: public key, allow-list, driver, state directory), and when the worker is ready the
executor finishes what the agent's last run left: an action cut short, a result not sent.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task
from celery.signals import worker_init, worker_ready

from cyborg.host import runtime

log = logging.getLogger(__name__)


@shared_task(name="cyborg.run_action", bind=True)
def run_action(self: Any, message: dict[str, Any]) -> dict[str, Any]:
    """Run one signed action envelope (see cyborg.host.executor)."""
    routing_key = (self.request.delivery_info or {}).get("routing_key")
    return runtime.executor_for(routing_key).handle(message)


@worker_init.connect
def _agent_executor(**_: Any) -> None:
    from checker.agent import state

    loop = state.check_loop
    if loop is None:  # not an agent (the embedded process installs its simulated hosts' executors)
        return
    from cyborg.host.agent import executor_for_agent

    runtime.install(executor_for_agent(loop))


@worker_ready.connect
def _resume(**_: Any) -> None:
    for executor in runtime.executors():
        try:
            resumed = executor.resume()
        except Exception:  # the worker must still serve new envelopes
            log.exception("cyborg.resume.failed", extra={"fields": {"host": executor.hostname}})
            continue
        if resumed:
            log.info("cyborg.resume.done", extra={"fields": {"host": executor.hostname, "entries": resumed}})
