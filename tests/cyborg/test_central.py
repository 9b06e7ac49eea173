"""Cyborg's central executor (cyborg.central.CentralCyborg) on its own, without a database: what it does
for each kind of order, which BMC it asks and how, and that its log events are its own."""

from __future__ import annotations

import datetime as dt
import logging
from pathlib import Path
from typing import Any

import pytest
from celery import Signature

from cyborg.central import SCHEDULER_ACTIONS, CentralCyborg, Done, HandedOver, Order, StepFailed, Target, signer_for
from cyborg.central.settings import CyborgSettings
from cyborg.commands import ActionContext, ActionFailed
from cyborg.drivers.bmc import IpmitoolBmc, SimulatedBmc
from cyborg.drivers.reach import SimulatedReach
from tests.cyborg.helpers import RecordedSystem

HOST = Target("h1", "dc1", "c1", {"bmc_address": "h1-ipmi", "address": "10.0.0.5"})


def order(action: str, *, target: Target = HOST, step: int | None = 0, **params: Any) -> Order:
    return Order(target, 7, step, 1, action, params)


@pytest.fixture
def settings(tmp_path: Path) -> CyborgSettings:
    return CyborgSettings(data_dir=tmp_path, scheduler_hooks={})


def ipmitool(power: str = "on", rc: int = 0) -> tuple[IpmitoolBmc, RecordedSystem]:
    system = RecordedSystem()
    system.answer(["ipmitool"], f"Chassis Power is {power}\n", rc=rc)
    return IpmitoolBmc("admin", None, system), system


def test_a_host_action_is_signed_and_given_to_send_and_waits_for_its_host(
    settings: CyborgSettings, caplog: pytest.LogCaptureFixture
) -> None:
    sent: list[Signature] = []
    with caplog.at_level(logging.INFO):
        handed = CentralCyborg(settings).execute(order("tune_error_reporting"), sent.append)
    assert isinstance(handed, HandedOver)
    [message] = sent
    assert (message.task, message.options["queue"]) == ("cyborg.run_action", "host.h1")
    assert message.options["task_id"] == handed.envelope_id == handed.record["envelope_id"]
    envelope = signer_for(settings).verifier().open(message.args[0], hostname="h1", now=dt.datetime.now(dt.UTC))
    assert (envelope.action, envelope.params, envelope.remediation_id) == (
        "tune_error_reporting",
        {"edac_poll_s": 37},
        7,
    )
    assert handed.awaits == "host"
    assert handed.deadline == envelope.expires_at + dt.timedelta(seconds=12)  # the budget's tenth (5-60 s)
    [logged] = [r for r in caplog.records if r.message == "cyborg.action.dispatched"]
    assert logged.name == "cyborg.central.executor"


def test_what_a_process_without_a_worker_runs(settings: CyborgSettings) -> None:
    hooks_only = CentralCyborg(settings, actions=SCHEDULER_ACTIONS)
    assert [hooks_only.runs(a) for a in ("drain", "undrain", "reboot", "power_cycle", "ticket")] == [
        True,
        True,
        False,
        False,
        False,
    ]
    with pytest.raises(StepFailed, match="no executor for action 'reboot'"):
        hooks_only.execute(order("reboot"), lambda _signature: None)
    assert hooks_only.execute(order("drain", step=None)) == Done({"skipped": "no drain hook configured for cluster c1"})


def test_a_host_action_needs_a_step_and_a_way_to_its_queue(settings: CyborgSettings) -> None:
    with pytest.raises(StepFailed, match="needs a step and a way to queue it"):
        CentralCyborg(settings).execute(order("reboot"))


def test_a_failed_bmc_command_fails_the_step_with_its_log(settings: CyborgSettings) -> None:
    bmc, _ = ipmitool(rc=1)
    with pytest.raises(StepFailed, match="power cycle through the BMC") as failed:
        CentralCyborg(settings, bmc=bmc).execute(order("power_cycle"))
    assert failed.value.detail["commands"][0]["exit_status"] == 1


def test_a_silent_host_is_power_cycled_only_when_that_can_help(
    settings: CyborgSettings, caplog: pytest.LogCaptureFixture
) -> None:
    bmc, system = ipmitool("on")
    executor = CentralCyborg(settings, bmc=bmc)
    assert executor.revive(order("tune_error_reporting")) is None  # the action does not restart the host
    unaddressed = Target("h2", "dc1", "c1", {})
    assert executor.revive(order("reboot", target=unaddressed)) is None  # no BMC address: nothing to ask
    assert system.ran == []
    with caplog.at_level(logging.WARNING):
        cycled = executor.revive(order("reboot"))
    assert cycled is not None
    assert (cycled["power"], cycled["was"]) == ("cycle", "Chassis Power is on")
    assert [c["argv"][-3:] for c in cycled["commands"]] == [
        ["chassis", "power", "status"],
        ["chassis", "power", "cycle"],
    ]
    [logged] = [r for r in caplog.records if r.message == "cyborg.host.power_cycled"]
    assert logged.name.startswith("cyborg.")
    settings.bmc_address_template = "{hostname}-ipmi.mgmt"  # the template reaches the one without a label
    assert executor.bmc_address(unaddressed) == "h2-ipmi.mgmt"


def test_the_simulated_fleets_bmc_reaches_every_host_without_an_address(settings: CyborgSettings) -> None:
    from checker.sim.standalone import standalone_host

    fleet = {"h2": standalone_host("h2")}
    executor = CentralCyborg(settings, bmc=SimulatedBmc(fleet), reach=SimulatedReach(fleet))
    seen = executor.look(Target("h2"))
    assert (seen.power, seen.ping, seen.bmc, seen.address, seen.notes) == ("on", "answered", None, "h2", [])
    assert executor.revive(order("reboot", target=Target("h2"))) is not None  # no address, and yet it can


def test_a_reinstall_that_cannot_reset_its_boot_device_says_so(settings: CyborgSettings) -> None:
    class StuckOnPxe:
        name = "stuck"
        system = None

        def can_reach(self, hostname: str, address: str | None) -> bool:
            return True

        def boot_device(self, hostname: str, address: str | None, device: str, ctx: ActionContext) -> dict[str, Any]:
            raise ActionFailed("bootdev refused")

    finished = CentralCyborg(settings, bmc=StuckOnPxe()).finish_reimage(order("reimage"))  # type: ignore[arg-type]
    assert finished == {"warning": "boot device not reset: bootdev refused", "commands": []}
