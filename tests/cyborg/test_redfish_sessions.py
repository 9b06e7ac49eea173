"""Central's Redfish sessions are bounded (issue 19 item 4): one process keeps at most `max_clients` BMC
clients, the least recently used beyond that is logged out (its session DELETEd), and one evicted while an
action is running on it is logged out when that call ends, not under it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cyborg.commands import ActionContext
from cyborg.drivers.redfish_client import RedfishClient, RedfishClients, RedfishConfig
from tests.checker.redfish_server import (  # noqa: F401  (fixtures)
    SESSIONS,
    USER,
    RedfishService,
    redfish_password_fixture,
    redfish_service_fixture,
    skeleton,
)


def reach(clients: RedfishClients, address: str, service: RedfishService) -> RedfishClient:
    client = clients.get(address)
    client.url = service.url  # our test service speaks http
    return client


def read_root(client: RedfishClient, work: Any = None) -> None:
    client.call(ActionContext(None, timeout_s=30), "root", work or (lambda root: root.redfish_version))


def deleted(service: RedfishService) -> list[str]:
    return [r.path.removeprefix(f"{SESSIONS}/") for r in service.requests if r.method == "DELETE"]


def test_the_least_recently_used_bmc_session_is_logged_out_beyond_the_cap(
    service: RedfishService, password_file: Path
) -> None:
    skeleton(service)
    clients = RedfishClients(RedfishConfig(username=USER, password_file=password_file), max_clients=2)
    a = reach(clients, "bmc-a", service)
    read_root(a)
    read_root(reach(clients, "bmc-b", service))
    read_root(reach(clients, "bmc-a", service))  # a used again: b is now the least recent
    assert deleted(service) == []
    read_root(reach(clients, "bmc-c", service))
    assert len(clients) == 2
    assert deleted(service) == ["token-2"]  # b's session, and only it
    assert len(service.sessions) == 2  # a's and c's
    clients.close()
    assert service.sessions == set()


def test_a_client_evicted_during_a_call_is_logged_out_when_the_call_ends(
    service: RedfishService, password_file: Path
) -> None:
    skeleton(service)
    clients = RedfishClients(RedfishConfig(username=USER, password_file=password_file), max_clients=1)
    a = reach(clients, "bmc-a", service)
    during: list[list[str]] = []

    def evict_meanwhile(root: Any) -> None:
        reach(clients, "bmc-b", service)  # a is evicted while this call runs on it
        during.append(deleted(service))

    read_root(a, evict_meanwhile)
    assert during == [[]]  # not logged out under the running call
    assert deleted(service) == ["token-1"]  # but when it ended
    assert service.sessions == set()
