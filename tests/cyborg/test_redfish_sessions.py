"""Central's Redfish sessions are bounded (issue 19 item 4): one process keeps at most `max_clients` BMC
clients, the least recently used beyond that is logged out (its session DELETEd), and one evicted while an
action is running on it is logged out when that call ends, not under it."""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

from cyborg.commands import ActionContext
from cyborg.drivers.redfish_client import LOGOUT_TIMEOUT_S, RedfishClient, RedfishClients, RedfishConfig
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
    clients.join_logouts()  # (logged out on a thread of its own: review r2 finding 7)
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


def test_a_client_an_action_holds_is_not_evicted_between_its_calls(
    service: RedfishService, password_file: Path
) -> None:
    """Review r2 finding 7: an action (a power wait, a task's polls) holds its BMC's client across many calls.
    Probes of other BMCs meanwhile do not evict it: one login for all its calls, and a second action on the
    same BMC gets the same client (its lock serialises the two)."""
    skeleton(service)
    clients = RedfishClients(RedfishConfig(username=USER, password_file=password_file), max_clients=2)
    with clients.using("bmc-a") as a:
        a.url = service.url
        read_root(a)
        read_root(reach(clients, "bmc-b", service))
        read_root(reach(clients, "bmc-c", service))  # probes of other silent hosts meanwhile
        for _ in range(5):
            read_root(a)  # the action's next polls
        assert clients.get("bmc-a") is a
    logins = [r for r in service.requests if r.method == "POST" and r.path == SESSIONS]
    assert len(logins) == 3  # a, b, c: one each
    assert len(clients) == 2  # a and c: b, the least recently used that nobody held, made room for c
    clients.join_logouts()
    assert deleted(service) == ["token-2"]
    clients.close()


def test_evicting_a_hung_bmcs_client_does_not_hold_up_the_caller(service: RedfishService, password_file: Path) -> None:
    """Review r2 finding 7: the evicted client's logout runs on its own thread, within LOGOUT_TIMEOUT_S; an
    unrelated caller's get() does not wait on a BMC that hangs."""
    skeleton(service)
    config = RedfishConfig(username=USER, password_file=password_file, read_timeout_s=8, connect_timeout_s=2)
    clients = RedfishClients(config, max_clients=1)
    a = reach(clients, "bmc-a", service)
    read_root(a)
    hole = socket.socket()  # accepts, never answers
    hole.bind(("127.0.0.1", 0))
    hole.listen(16)
    try:
        a._connector._url = f"http://127.0.0.1:{hole.getsockname()[1]}"  # bmc-a hangs from now on
        started = time.monotonic()
        reach(clients, "bmc-b", service)
        assert time.monotonic() - started < 1.0
        started = time.monotonic()
        clients.join_logouts(30)
        assert time.monotonic() - started < LOGOUT_TIMEOUT_S + 1.5  # not read_timeout_s
    finally:
        hole.close()
        clients.close()
