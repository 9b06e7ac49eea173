"""The executors of one process, by host: one in an agent, one per simulated host in `fleetfix up`.

The process's root builds a HostExecutors and hands it to its Celery app (core.queue.provide), where
`cyborg.run_action` finds it; nothing here is process-wide.
"""

from __future__ import annotations

import threading
from typing import Any

from core.queue import HOST_QUEUE_PREFIX, find, provide
from cyborg.host.executor import HostExecutor


class HostExecutors:
    def __init__(self, executors: list[HostExecutor] | None = None) -> None:
        self._executors: dict[str, HostExecutor] = {}
        self._lock = threading.Lock()
        for executor in executors or ():
            self.install(executor)

    def install(self, executor: HostExecutor) -> None:
        with self._lock:
            self._executors[executor.hostname] = executor

    def remove(self, hostname: str) -> None:
        with self._lock:
            self._executors.pop(hostname, None)

    def executors(self) -> list[HostExecutor]:
        with self._lock:
            return list(self._executors.values())

    def executor_for(self, routing_key: str | None) -> HostExecutor:
        """The executor of the host whose queue the message came from: the queue decides, not the envelope."""
        with self._lock:
            if routing_key and routing_key.startswith(HOST_QUEUE_PREFIX):
                found = self._executors.get(routing_key[len(HOST_QUEUE_PREFIX) :])
                if found is not None:
                    return found
            if routing_key is None and len(self._executors) == 1:
                return next(iter(self._executors.values()))
        raise LookupError(f"no cyborg executor in this process for queue {routing_key!r}")

    @classmethod
    def of(cls, app: Any) -> HostExecutors:
        """The executors a Celery app carries; an app whose root gave it none has none (not an agent)."""
        found = find(app, cls)
        return found if found is not None else cls()

    def provide_to(self, app: Any) -> HostExecutors:
        provide(app, HostExecutors, self)
        return self
