"""The demo's simulated scheduler (cyborg.drivers.scheduler), through the central executor: used only when the
cluster has no drain hook, its drain is a confirmed one (cyborg.central.issuing.drain_confirmed), a dry run
confirms nothing, and an unknown host fails the drain, saying so."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from checker.sim.host import VirtualHost
from checker.sim.standalone import standalone_host
from cyborg.central import CentralCyborg, Done, Order, StepFailed, Target
from cyborg.central.issuing import drain_confirmed
from cyborg.central.settings import CyborgSettings
from cyborg.drivers.scheduler import SimulatedScheduler


def order(action: str, hostname: str = "web-1", **params: object) -> Order:
    return Order(Target(hostname, cluster="c1"), 7, None, 0, action, params)


def central(tmp_path: Path, hooks: dict[str, Any] | None = None) -> tuple[VirtualHost, CentralCyborg]:
    host = standalone_host("web-1", hardware_class="compute-skx-2s")
    settings = CyborgSettings(data_dir=tmp_path, scheduler_hooks=hooks or {})
    return host, CentralCyborg(settings, scheduler=SimulatedScheduler({"web-1": host}))


def test_drain_and_undrain_mark_the_virtual_host(tmp_path: Path) -> None:
    host, cyborg = central(tmp_path)
    host.down = True  # the scheduler drains a host that does not answer all the same
    drained = cyborg.execute(order("drain"))
    assert isinstance(drained, Done)
    assert (drained.result["outcome"], drained.result["hook"], host.drained) == ("succeeded", "simulated", True)
    assert drained.result["commands"][0]["kind"] == "simulated"
    assert drain_confirmed({"drain": drained.result})
    undrained = cyborg.execute(order("undrain"))
    assert isinstance(undrained, Done)
    assert not host.drained
    assert not drain_confirmed({"drain": drained.result, "undrain": undrained.result})


def test_a_dry_run_drain_changes_and_confirms_nothing(tmp_path: Path) -> None:
    host, cyborg = central(tmp_path)
    done = cyborg.execute(order("drain", dry_run=True))
    assert isinstance(done, Done)
    assert not host.drained
    assert not drain_confirmed({"drain": done.result})


def test_a_configured_hook_wins(tmp_path: Path) -> None:
    host, cyborg = central(tmp_path, {"*": {"drain": ["/bin/echo", "drained", "{hostname}"]}})
    done = cyborg.execute(order("drain"))
    assert isinstance(done, Done)
    assert done.result["hook"] == "command"
    assert not host.drained


def test_an_unknown_host_fails_the_drain(tmp_path: Path) -> None:
    _host, cyborg = central(tmp_path)
    with pytest.raises(StepFailed, match="no host web-9 in the simulated scheduler"):
        cyborg.execute(order("drain", "web-9"))


def test_without_a_scheduler_or_hook_a_drain_is_a_recorded_no_op(tmp_path: Path) -> None:
    done = CentralCyborg(CyborgSettings(data_dir=tmp_path)).execute(order("drain"))
    assert isinstance(done, Done)
    assert "skipped" in done.result
    assert not drain_confirmed({"drain": done.result})
