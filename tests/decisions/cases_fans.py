"""The fan scenarios of the issue 16 leftovers (rule fan-degraded): a fan slowing below the lower non-critical
threshold its BMC publishes is ticketed in service once it stays there half an hour; a shorter dip, or a
listing without that threshold, tickets nothing. The real Supermicro `ipmitool sensor list` (FAN1 4400 RPM,
lnr 300, lcr 500, lnc 700 RPM), FAN1's line changed as the host would show it (cases.supermicro_sensors)."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.orm import Session

from checker.schemas import Report
from remediator.models import Remediation
from tests.decisions.cases import case, supermicro_sensors
from tests.decisions.harness import Expect, SnapHost
from ticketing.models import Ticket

SLOW_FAN1 = (
    "FAN1             | 600.000    | RPM        | nc    | 300.000   | 500.000   | 700.000   "
    "| 25300.000 | 25400.000 | 25500.000 "
)
NO_LNC_FAN1 = SLOW_FAN1.replace("| 700.000   ", "| na        ").replace("| nc    |", "| ok    |")


def _slow_fan(tmp: Path, fan1: str, minutes: tuple[int, ...]) -> tuple[SnapHost, list[Report]]:
    host = SnapHost(tmp)
    host.sensors(supermicro_sensors(FAN1=fan1))
    return host, [host.cycle(m) for m in minutes]


def _in_service(_session: Session, _remediation: Remediation | None, ticket: Ticket | None) -> None:
    assert ticket is not None
    assert ticket.part == "FAN1"
    assert not ticket.holds_host  # a slowing fan: the other fans carry the load


@case(
    "a fan at 600 RPM, below its lower non-critical 700 and above its lower critical 500, for half an hour (the "
    "Supermicro list): a fan ticket, the host in service",
    "fan-degraded",
)
def fan_slowing(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host, reports = _slow_fan(tmp, SLOW_FAN1, (0, 10, 20, 31))
    expect = Expect(
        "fan-degraded",
        "ticket",
        title=r"Fan FAN1 on dt-host-01 slowing: 600 at or below its lower non-critical threshold \(lnc 700, lcr 500",
        part_type="fan",
        never=frozenset({"sensor-critical-fan", "fan-failure"}),
        also=_in_service,
    )
    return host, reports, expect


@case("a fan below its lower non-critical threshold for 20 minutes only: nothing yet (for 30m)", None)
def fan_slowing_briefly(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host, reports = _slow_fan(tmp, SLOW_FAN1, (0, 10, 20))
    return host, reports, Expect(None)


@case("a slow fan whose BMC publishes no lower non-critical threshold: no signal, nothing planned", None)
def fan_slow_without_lnc(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host, reports = _slow_fan(tmp, NO_LNC_FAN1, (0, 10, 20, 31, 45))
    return host, reports, Expect(None)
