"""update_bmc_firmware: BIOS or BMC firmware through the host's BMC (Redfish SimpleUpdate), a central action.

Its contract (both tables agree, its parameters are validated like every action's), the central executor on
the simulated fleet (a Redfish class's BMC updates, a BIOS waits for the plan's power cycle, every record says
which protocol the BMC speaks), and an IPMI-only host failing the step with a clear message. The same action
against a real Redfish service (sushy-emulator) is in tests/cyborg/test_redfish_bmc.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from checker.sim.standalone import standalone_host
from cyborg.actions import ACTIONS, HOST_ACTIONS, ActionRefused
from cyborg.central import CentralCyborg, Done, Order, StepFailed, Target
from cyborg.central.settings import CyborgSettings
from cyborg.commands import ActionContext, ActionFailed
from cyborg.drivers.bmc import IpmitoolBmc, SimulatedBmc
from cyborg.drivers.redfish import FallbackBmc, FirmwareBmc, RedfishBmc
from cyborg.drivers.redfish_client import RedfishConfig, RedfishUnreachable
from remediator.actions import ACTIONS as CONTRACT
from tests.cyborg.helpers import RecordedSystem

DIGEST = "ab" * 32
IMAGE = "https://images.example/bmc-7.00.00.00.bin"


def params(**overrides: object) -> dict[str, object]:
    return {"component": "bmc", "image": IMAGE, "sha256": DIGEST, **overrides}


def settings(tmp_path: Path) -> CyborgSettings:
    return CyborgSettings(data_dir=tmp_path, scheduler_hooks={})


# -- the contract -------------------------------------------------------------------------------------


def test_it_is_a_central_action_in_both_tables() -> None:
    action, spec = ACTIONS["update_bmc_firmware"], CONTRACT["update_bmc_firmware"]
    assert (action.site, action.restarts, action.idempotent) == ("central", False, False)  # never re-run mid-flash
    assert spec.idempotent is action.idempotent
    # the BMC updates while the host runs on; a BIOS needs the plan's own (disruptive) power cycle to run
    assert (spec.disruptive, spec.destructive) == (False, False)
    assert "update_bmc_firmware" not in HOST_ACTIONS  # no host allow-list may carry it


def test_its_parameters_are_validated() -> None:
    parsed = ACTIONS["update_bmc_firmware"].parse(params(sha256=DIGEST.upper(), component="bios", timeout_s=600))
    assert parsed.model_dump() == {"component": "bios", "image": IMAGE, "sha256": DIGEST, "version": None}


REFUSED = {
    "http": params(image="http://images.example/bmc.bin"),  # the image would travel unchecked
    "local-path": params(image="/srv/firmware/bmc.bin"),  # the BMC fetches it: a URL only
    "short-digest": params(sha256="abc"),
    "no-digest": {"component": "bmc", "image": IMAGE},
    "a-nic": params(component="nic:eth0"),  # not the BMC's to update
    "option-as-version": params(version="--force"),
    "unknown-key": params(reboot=True),
}


@pytest.mark.parametrize("given", REFUSED.values(), ids=REFUSED.keys())
def test_bad_parameters_are_refused(given: dict[str, object]) -> None:
    with pytest.raises(ActionRefused, match="update_bmc_firmware: bad parameters"):
        ACTIONS["update_bmc_firmware"].parse(given)


# -- the central executor on the simulated fleet -------------------------------------------------------


def test_a_redfish_hosts_bmc_firmware_is_updated_and_the_record_says_redfish(tmp_path: Path) -> None:
    host = standalone_host("rf-1", hardware_class="compute-icx-2s", faults=["firmware_old_bmc"])
    old = host.bmc_firmware
    executor = CentralCyborg(settings(tmp_path), bmc=SimulatedBmc({"rf-1": host}))
    order = Order(Target("rf-1"), 5, 0, 1, "update_bmc_firmware", params(version="7.00.00.00"))
    done = executor.execute(order)
    assert isinstance(done, Done)
    changed = done.result["changed"]
    assert (changed["protocol"], changed["version_before"], changed["version_after"]) == ("redfish", old, "7.00.00.00")
    assert (changed["pending_reboot"], changed["cleared"]) == (False, ["firmware_old_bmc"])
    assert host.bmc_firmware == "7.00.00.00"
    [note] = done.result["commands"]
    assert note["argv"] == [f"simulated BMC (redfish): SimpleUpdate bmc {IMAGE}"]


def test_a_bios_is_staged_until_the_plans_power_cycle(tmp_path: Path) -> None:
    host = standalone_host("rf-2", hardware_class="storage-epyc-1s", faults=["firmware_old_bios"])
    old = host.bios_version
    executor = CentralCyborg(settings(tmp_path), bmc=SimulatedBmc({"rf-2": host}))
    staged = executor.execute(Order(Target("rf-2"), 5, 0, 1, "update_bmc_firmware", params(component="bios")))
    assert isinstance(staged, Done)
    changed = staged.result["changed"]
    assert (changed["pending_reboot"], changed["version_after"], changed["staged"]) == (
        True,
        old,
        host.hardware.bios_version,
    )
    assert host.has("firmware_old_bios")
    cycled = executor.execute(Order(Target("rf-2"), 5, 1, 1, "power_cycle", {}))
    assert isinstance(cycled, Done)
    assert cycled.result["changed"]["protocol"] == "redfish"
    assert cycled.result["changed"]["changed"]["bios_applied"] == host.bios_version == host.hardware.bios_version
    assert not host.has("firmware_old_bios")


def test_a_version_the_bmc_does_not_read_back_fails_the_step(tmp_path: Path) -> None:
    host = standalone_host("rf-3", hardware_class="compute-icx-2s")

    class Stubborn(SimulatedBmc):  # a BMC whose task completed and still runs its old image
        def update_firmware(self, *args: object, **kwargs: object) -> dict[str, object]:
            done = super().update_firmware(*args, **kwargs)  # type: ignore[arg-type]
            return {**done, "version_after": "6.10.30.00"}

    executor = CentralCyborg(settings(tmp_path), bmc=Stubborn({"rf-3": host}))
    with pytest.raises(StepFailed, match=r"the bmc reads back '6.10.30.00', not '7.00.00.00'"):
        executor.execute(Order(Target("rf-3"), 5, 0, 1, "update_bmc_firmware", params(version="7.00.00.00")))


def test_a_dry_run_changes_nothing(tmp_path: Path) -> None:
    host = standalone_host("rf-4", hardware_class="compute-icx-2s")
    old = host.bmc_firmware
    executor = CentralCyborg(settings(tmp_path), bmc=SimulatedBmc({"rf-4": host}))
    done = executor.execute(Order(Target("rf-4"), 5, 0, 1, "update_bmc_firmware", params(dry_run=True)))
    assert isinstance(done, Done)
    assert host.bmc_firmware == old
    assert [c["kind"] for c in done.result["commands"]] == ["dry_run"]


def test_an_ipmi_only_host_fails_with_a_clear_message(tmp_path: Path) -> None:
    host = standalone_host("ipmi-1", hardware_class="compute-skx-2s")
    old = host.bmc_firmware
    simulated = CentralCyborg(settings(tmp_path), bmc=SimulatedBmc({"ipmi-1": host}))
    order = Order(Target("ipmi-1"), 5, 0, 1, "update_bmc_firmware", params())
    with pytest.raises(StepFailed, match=r"ipmi-1's BMC speaks ipmi only: .* needs Redfish"):
        simulated.execute(order)
    assert host.bmc_firmware == old
    # the real drivers: a host driven over ipmitool is refused before anything runs
    real = CentralCyborg(settings(tmp_path), bmc=IpmitoolBmc("admin", None))
    with pytest.raises(StepFailed, match=r"driven over IPMI \(ipmitool\), which has no firmware update") as failed:
        real.execute(Order(Target("ipmi-1", labels={"bmc_address": "10.0.0.9"}), 5, 0, 1, order.action, params()))
    assert failed.value.detail == {"commands": []}
    # and a host whose label picks IPMI gets the ipmitool driver, refused the same way
    chosen = CentralCyborg(settings(tmp_path))
    with pytest.raises(StepFailed, match="driven over IPMI"):
        chosen.execute(
            Order(
                Target("h", labels={"bmc_protocol": "ipmi", "bmc_address": "10.0.0.9"}), 5, 0, 1, order.action, params()
            )
        )


def test_under_both_a_redfish_service_that_does_not_answer_is_not_handed_to_ipmi(tmp_path: Path) -> None:
    class Silent(RedfishBmc):  # what the client raises when the service does not answer at all
        def update_firmware(self, *args: object, **kwargs: object) -> dict[str, object]:
            raise RedfishUnreachable("https://10.0.0.9: connection refused")

    system = RecordedSystem()
    both = FallbackBmc(Silent(RedfishConfig(username="admin", password_file=None)), IpmitoolBmc("admin", None, system))
    assert isinstance(both, FirmwareBmc)
    assert not isinstance(IpmitoolBmc("admin", None), FirmwareBmc)
    ctx = ActionContext(system, timeout_s=30)
    with pytest.raises(ActionFailed, match=r"did not answer \(https://10.0.0.9: connection refused\); IPMI has no"):
        both.update_firmware("h", "10.0.0.9", "bmc", IMAGE, DIGEST, ctx)
    assert system.ran == []  # nothing was asked of IPMI
