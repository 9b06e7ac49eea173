"""The executors of this process, by host: one in an agent, one per simulated host in `fleetfix up`."""

from __future__ import annotations

import threading

from core.queue import HOST_QUEUE_PREFIX
from cyborg.host.executor import HostExecutor

_executors: dict[str, HostExecutor] = {}
_lock = threading.Lock()


def install(executor: HostExecutor) -> None:
    with _lock:
        _executors[executor.hostname] = executor


def remove(hostname: str) -> None:
    with _lock:
        _executors.pop(hostname, None)


def executors() -> list[HostExecutor]:
    with _lock:
        return list(_executors.values())


def executor_for(routing_key: str | None) -> HostExecutor:
    """The executor of the host whose queue the message came from: the queue decides, not the envelope."""
    with _lock:
        if routing_key and routing_key.startswith(HOST_QUEUE_PREFIX):
            found = _executors.get(routing_key[len(HOST_QUEUE_PREFIX) :])
            if found is not None:
                return found
        if routing_key is None and len(_executors) == 1:
            return next(iter(_executors.values()))
    raise LookupError(f"no cyborg executor in this process for queue {routing_key!r}")
