"""A change request that times out is never sent twice (review r5 finding 1): sushy's connector resends on a
read timeout whatever the method, and `both` used to take any RedfishUnreachable to IPMI. Against our small
Redfish service (tests/checker/redfish_server.py) whose ComputerSystem.Reset answers only after 3 s while the
client waits 1 s: one POST, and no IPMI power cycle after it; a BMC that does not answer its first read still
goes to IPMI."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from cyborg.commands import ActionContext, ActionFailed
from cyborg.drivers.bmc import IpmitoolBmc
from cyborg.drivers.redfish import FallbackBmc, RedfishBmc
from cyborg.drivers.redfish_client import RedfishConfig, RedfishUnreachable
from tests.checker.redfish_server import (  # noqa: F401  (fixtures)
    USER,
    RedfishService,
    redfish_password_fixture,
    redfish_service_fixture,
    skeleton,
)
from tests.cyborg.helpers import RecordedSystem

SYSTEM = "/redfish/v1/Systems/1"
RESET = f"{SYSTEM}/Actions/ComputerSystem.Reset"
ADDRESS = "bmc-1.example"


def serve_system(service: RedfishService, power: str = "On") -> None:
    skeleton(service, systems={"1": {}})
    allowed = ["On", "ForceOff", "PowerCycle"]
    service.add(
        {
            "@odata.id": SYSTEM,
            "Id": "1",
            "PowerState": power,
            "Actions": {"#ComputerSystem.Reset": {"target": RESET, "ResetType@Redfish.AllowableValues": allowed}},
        }
    )
    service.actions.add(RESET)


def redfish(service: RedfishService, password_file: Path) -> RedfishBmc:
    config = RedfishConfig(
        username=USER,
        password_file=password_file,
        read_timeout_s=1,
        connect_timeout_s=1,
        retries=2,
        poll_s=0.1,
        cycle_off_wait_s=0.5,
    )
    bmc = RedfishBmc(config)
    bmc.clients.get(ADDRESS).url = service.url  # our test service speaks http; the driver refuses it elsewhere
    return bmc


def ipmi(password_file: Path) -> tuple[IpmitoolBmc, RecordedSystem]:
    system = RecordedSystem()
    system.answer(["ipmitool"], "Chassis Power is on\n")
    return IpmitoolBmc(USER, password_file, system), system


def posts(service: RedfishService, path: str) -> int:
    return sum(1 for r in service.requests if r.method == "POST" and r.path == path)


def test_a_reset_that_times_out_is_sent_once(service: RedfishService, password_file: Path) -> None:
    serve_system(service)
    service.hang = {RESET}
    bmc = redfish(service, password_file)
    with pytest.raises(RedfishUnreachable, match=r"ComputerSystem\.Reset PowerCycle"):
        bmc.power_cycle("h1", ADDRESS, ActionContext(None, timeout_s=60))
    assert posts(service, RESET) == 1  # not resent by sushy's connector
    assert bmc.clients.get(ADDRESS).changes == 1
    bmc.close()


def test_under_both_a_reset_that_timed_out_is_not_repeated_over_ipmi(
    service: RedfishService, password_file: Path
) -> None:
    serve_system(service)
    service.hang = {RESET}
    ipmitool, system = ipmi(password_file)
    both, ctx = FallbackBmc(redfish(service, password_file), ipmitool), ActionContext(system, timeout_s=60)
    with pytest.raises(ActionFailed, match="not repeated over IPMI") as failed:
        both.power_cycle("h1", ADDRESS, ctx)
    assert not isinstance(failed.value, RedfishUnreachable)
    assert posts(service, RESET) == 1
    assert system.ran == []  # no `ipmitool chassis power cycle` on top of the one the BMC may be doing
    assert any("ComputerSystem.Reset PowerCycle" in r.argv for r in ctx.log.records)  # the log says what went
    both.close()


def test_under_both_a_bmc_silent_before_any_change_goes_to_ipmi(service: RedfishService, password_file: Path) -> None:
    serve_system(service)
    service.hang = {SYSTEM}  # the first power state read times out: nothing was changed over Redfish
    ipmitool, system = ipmi(password_file)
    both = FallbackBmc(redfish(service, password_file), ipmitool)
    done: dict[str, Any] = both.power_cycle("h1", ADDRESS, ActionContext(system, timeout_s=60))
    assert done["protocol"] == "ipmi"
    assert posts(service, RESET) == 0
    assert [argv[-3:] for argv in system.ran] == [["chassis", "power", "status"], ["chassis", "power", "cycle"]]
    both.close()


def test_a_failed_request_logs_the_session_out_before_a_new_one(service: RedfishService, password_file: Path) -> None:
    """Review r5 finding 14 (its scratch test t/test_forget.py): a request that timed out used to drop the
    client's session without the DELETE, leaving it on the BMC, which has few session slots."""
    serve_system(service)
    bmc = redfish(service, password_file)
    client, ctx = bmc.clients.get(ADDRESS), ActionContext(None, timeout_s=60)
    assert bmc.power_state("h1", ADDRESS, ctx) == "on"
    assert len(service.sessions) == 1
    service.hang = {"/redfish/v1/Chassis"}
    with pytest.raises(RedfishUnreachable):
        client.call(ctx, "chassis", lambda root: root._conn.get("/redfish/v1/Chassis"))
    assert service.sessions == set()  # logged out, not left to time out
    assert [r.path for r in service.requests if r.method == "DELETE"] == ["/redfish/v1/SessionService/Sessions/token-1"]
    assert bmc.power_state("h1", ADDRESS, ctx) == "on"
    assert (client.opened, len(service.sessions)) == (2, 1)
    bmc.close()
    assert service.sessions == set()


def after_reset(service: RedfishService, **changes: Any) -> None:
    """The System as the BMC shows it: `changes` apply once a Reset was POSTed, for two reads, then On again
    (a cycle the driver can see), or for good where `changes` has no PowerState."""
    body = dict(service.resources[SYSTEM])  # type: ignore[arg-type]
    reads = {"n": 0}

    def now() -> dict[str, Any]:
        if not any(r.method == "POST" and r.path == RESET for r in service.requests):
            return body
        reads["n"] += 1
        if "PowerState" in changes and reads["n"] > 2:
            return {**body, **{k: v for k, v in changes.items() if k != "PowerState"}}
        return {**body, **changes}

    service.resources[SYSTEM] = now


def test_a_power_cycle_never_seen_is_said_to_be_unverified(service: RedfishService, password_file: Path) -> None:
    """Review r5 finding 9: the BMC accepts PowerCycle, the power reads On throughout and LastResetTime does
    not move: not reported as a cycle done."""
    serve_system(service)
    service.resources[SYSTEM] = {**service.resources[SYSTEM], "LastResetTime": "2026-01-01T00:00:00Z"}  # type: ignore[dict-item]
    bmc = redfish(service, password_file)
    done = bmc.power_cycle("h1", ADDRESS, ActionContext(None, timeout_s=60))
    assert (done["power"], done["now"], done.get("cycle")) == ("cycle", "on", "unverified")
    bmc.close()


def test_a_power_cycle_seen_off_is_verified(service: RedfishService, password_file: Path) -> None:
    serve_system(service)
    after_reset(service, PowerState="Off")
    bmc = redfish(service, password_file)
    done = bmc.power_cycle("h1", ADDRESS, ActionContext(None, timeout_s=60))
    assert (done["power"], done["now"], "cycle" in done) == ("cycle", "on", False)
    bmc.close()


def test_a_power_cycle_with_a_new_last_reset_time_is_verified(service: RedfishService, password_file: Path) -> None:
    serve_system(service)
    service.resources[SYSTEM] = {**service.resources[SYSTEM], "LastResetTime": "2026-01-01T00:00:00Z"}  # type: ignore[dict-item]
    after_reset(service, LastResetTime="2026-01-02T00:00:00Z")
    bmc = redfish(service, password_file)
    done = bmc.power_cycle("h1", ADDRESS, ActionContext(None, timeout_s=60))
    assert (done["power"], done["now"], "cycle" in done) == ("cycle", "on", False)
    bmc.close()


def test_a_hung_bmc_is_given_up_within_the_actions_budget(service: RedfishService, password_file: Path) -> None:
    """Review r5 finding 6: the read timeout (60 s here) and its retries ignored the action's budget; a call
    now waits at most what is left of it, in one attempt when retries would not fit."""
    serve_system(service)
    config = RedfishConfig(username=USER, password_file=password_file, read_timeout_s=60, retries=2)
    bmc = RedfishBmc(config)
    bmc.clients.get(ADDRESS).url = service.url
    ctx = ActionContext(None, timeout_s=30)
    assert bmc.power_state("h1", ADDRESS, ctx) == "on"  # the session opened with time to spare
    service.hang, service.hang_s = {SYSTEM}, 6.0
    started = time.monotonic()
    with pytest.raises(ActionFailed):
        bmc.power_state("h1", ADDRESS, ActionContext(None, timeout_s=1.5))
    assert time.monotonic() - started < 4.5  # not the 6 s the BMC takes, nor 2 x 60 s
    assert sum(1 for r in service.requests if r.method == "GET" and r.path == SYSTEM) == 2  # the first read + one
    bmc.close()


def test_under_both_a_finish_over_ipmi_says_the_iso_may_still_be_inserted(
    service: RedfishService, password_file: Path
) -> None:
    """Review r5 finding 16: IPMI cannot eject virtual media; the result used to say nothing of it."""
    serve_system(service)
    service.hang = {SYSTEM}
    ipmitool, system = ipmi(password_file)
    both = FallbackBmc(redfish(service, password_file), ipmitool)
    done = both.finish_media("h1", ADDRESS, "https://images.example/installer.iso", ActionContext(system, timeout_s=60))
    assert (done["protocol"], done["ejected"]) == ("ipmi", "unknown")
    assert system.ran[-1][-3:] == ["chassis", "bootdev", "disk"]
    both.close()
