"""A stop's revoke goes out on the broker the host's agent listens on.

Host tasks of a datacenter that FLEETFIX_DATACENTER_BROKERS names go out on that datacenter's broker
(core.queue.host_signature); a revoke broadcast on the central broker reaches no agent there, and the
envelope would wait for its expiry instead of being dropped (remediator.stopping.revoke)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from core.queue import create_celery, host_app
from remediator import stopping

CENTRAL = "redis://127.0.0.1:1/0"  # never connected to: the broadcasts below are recorded, not sent
SJC2 = "amqp://guest:guest@127.0.0.1:1//"


class Control:
    def __init__(self) -> None:
        self.revoked: list[list[str]] = []

    def revoke(self, task_ids: list[str]) -> None:
        self.revoked.append(list(task_ids))


def stopped(datacenter: str, *ids: str) -> Any:
    return SimpleNamespace(remediation=SimpleNamespace(id=7, datacenter=datacenter), revoke=list(ids))


def test_a_stop_revokes_on_the_datacenter_broker_its_host_listens_on() -> None:
    app = create_celery(CENTRAL, datacenter_brokers={"sjc2": SJC2}, make_current=False)
    sjc2 = host_app(app, "sjc2")
    assert sjc2 is not app
    assert sjc2.conf.broker_url == SJC2
    assert host_app(app, "ams1") is app  # no broker of its own: the central one
    central, remote = Control(), Control()
    app.control, sjc2.control = central, remote  # type: ignore[method-assign]

    stopping.revoke(app, stopped("sjc2", "e-1"))
    stopping.revoke(app, stopped("ams1", "e-2"))
    assert remote.revoked == [["e-1"]]
    assert central.revoked == [["e-2"]]
