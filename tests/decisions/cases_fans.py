"""The fan scenarios of the issue 16 leftovers (rule fan-degraded): a fan slowing below the lower non-critical
threshold its BMC publishes is ticketed in service once it stays there half an hour; a shorter dip, or a
listing without that threshold or state, tickets nothing.

The agent runs `ipmitool sdr elist` (checker/collectors/ipmi.py): five columns, no thresholds, the BMC's state
(`lnc` for a fan below its lower non-critical threshold: ipmitool lib/ipmi_sdr.c, ipmi_sdr_get_status with
sdr_extended). Its listing here is the real Supermicro `ipmitool sensor list` (FAN1 4400 RPM, lnr 300, lcr 500,
lnc 700 RPM) printed as sdr elist prints it (`name | 41h | ok | 29.1 | 4400 RPM`, ipmitool's
ipmi_sdr_print_sensor_fc; entity 29 is a fan, IPMI 2.0 table 43-13), FAN1's line changed as the host would show
it. One case keeps the `sensor list` itself, which a snapshot may hold (review r4, finding 1: every case used to
answer `sdr elist` with the 10-column list the agent never receives)."""

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
ENTITY = {"fan": "29", "temperature": "3", "voltage": "7"}  # IPMI entity ids: cooling device, processor, board


def sdr_elist(sensor_list: str, **states: tuple[str, str]) -> str:
    """A `sensor list` printed as `ipmitool sdr elist` prints it: name | sensor number | state | entity |
    reading, without thresholds; `states`: a sensor's (state, reading) as the BMC would give them. A sensor
    without a reading is `ns | No Reading`, as ipmitool prints it."""
    lines = []
    for number, line in enumerate(sensor_list.splitlines(), start=0x30):
        cols = [c.strip() for c in line.split("|")]
        if len(cols) != 10:
            continue
        name, value, unit, status = cols[:4]
        kind = "fan" if unit == "RPM" or "FAN" in name else "temperature" if "Temp" in name else "voltage"
        if value == "na":
            status, value = "ns", "No Reading"
        elif value.startswith("0x"):  # a discrete sensor: sdr elist prints its state's text, not a number
            status, value = "ok", ""
        else:
            value = f"{float(value):g} {unit}"
        state, reading = states.get(name, (status, value))
        lines.append(f"{name:<16} | {number:02X}h | {state:<3} | {ENTITY[kind]}.1 | {reading}")
    return "\n".join(lines) + "\n"


def _slow_fan(tmp: Path, listing: str, minutes: tuple[int, ...]) -> tuple[SnapHost, list[Report]]:
    host = SnapHost(tmp)
    host.sensors(listing)
    return host, [host.cycle(m) for m in minutes]


def _in_service(_session: Session, _remediation: Remediation | None, ticket: Ticket | None) -> None:
    assert ticket is not None
    assert ticket.part == "FAN1"
    assert not ticket.holds_host  # a slowing fan: the other fans carry the load


@case(
    "sdr elist (what the agent runs): FAN1 at 600 RPM in the BMC's lnc state for half an hour: a fan ticket, "
    "the host in service, the title saying the listing had no thresholds",
    "fan-degraded",
)
def fan_slowing(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host, reports = _slow_fan(tmp, sdr_elist(supermicro_sensors(), FAN1=("lnc", "600 RPM")), (0, 10, 20, 31))
    expect = Expect(
        "fan-degraded",
        "ticket",
        # the BMC's state alone, which may hold above the threshold (hysteresis): the title says the BMC flags it
        title=r"Fan FAN1 on dt-host-01 slowing: the BMC flags it below its lower non-critical threshold \(reading "
        r"600, none listed\)$",
        part_type="fan",
        never=frozenset({"sensor-critical-fan", "fan-failure"}),
        also=_in_service,
    )
    return host, reports, expect


@case(
    "a snapshot's sensor list: FAN1 at 600 RPM, below its lower non-critical 700 and above its lower critical "
    "500, for half an hour: a fan ticket naming the thresholds, the host in service",
    "fan-degraded",
)
def fan_slowing_sensor_list(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host, reports = _slow_fan(tmp, supermicro_sensors(FAN1=SLOW_FAN1), (0, 10, 20, 31))
    expect = Expect(
        "fan-degraded",
        "ticket",
        title=r"Fan FAN1 on dt-host-01 slowing: 600 at or below its lower non-critical threshold \(lnc 700, lcr 500",
        part_type="fan",
        never=frozenset({"sensor-critical-fan", "fan-failure"}),
        also=_in_service,
    )
    return host, reports, expect


@case("sdr elist: FAN1 in the lnc state for 20 minutes only: nothing yet (for 30m)", None)
def fan_slowing_briefly(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host, reports = _slow_fan(tmp, sdr_elist(supermicro_sensors(), FAN1=("lnc", "600 RPM")), (0, 10, 20))
    return host, reports, Expect(None)


@case("sdr elist: FAN1 at 600 RPM that the BMC reads ok (no thresholds listed): no signal, nothing planned", None)
def fan_slow_but_ok_in_sdr_elist(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host, reports = _slow_fan(tmp, sdr_elist(supermicro_sensors(), FAN1=("ok", "600 RPM")), (0, 10, 20, 31, 45))
    return host, reports, Expect(None)


@case("a slow fan whose BMC publishes no lower non-critical threshold: no signal, nothing planned", None)
def fan_slow_without_lnc(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host, reports = _slow_fan(tmp, supermicro_sensors(FAN1=NO_LNC_FAN1), (0, 10, 20, 31, 45))
    return host, reports, Expect(None)
