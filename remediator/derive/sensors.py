"""IPMI sensors past their critical thresholds, as the BMC judges them.

`ipmitool sdr elist` (what the agent runs) says which threshold a sensor crossed: `ucr`/`unr` upper
critical/non-recoverable, `lcr`/`lnr` lower; `ipmitool sensor list` prints only `cr`/`nr` for both
directions, with the thresholds beside them. Those are the BMC's verdicts against thresholds the
vendor (or an operator) set: the signal carries the reading, the thresholds and the threshold it
crossed, so a person can tell a hot CPU from a threshold someone lowered, and a rule can tell heat
from cold (a cold inlet, a failed sensor reading 0 past its lower threshold). A state, emitted on
every report while it holds.

`level`: upper_cr, upper_nr, lower_cr, lower_nr, or unknown_cr / unknown_nr when neither the state
nor the thresholds tell the direction (no level is a substring of another: a rule's detail_matches
compares by substring). `limits`: the thresholds
as text for a ticket's title (`ucr 30, unr 90`), or that the listing has none.

`fan_degraded`, subject the fan: a fan turning at or below the lower NON-critical threshold its BMC
publishes but above its lower critical one: slowing (a worn bearing, a blocked rotor) before it fails. The
BMC's own threshold is the judge, in whichever form the listing gives it: `ipmitool sdr elist` (what the
agent runs) prints no thresholds, only the state the BMC's threshold bits give, `lnc` for a fan below its
lower non-critical threshold (ipmitool lib/ipmi_sdr.c, ipmi_sdr_get_status with sdr_extended: lnr, unr,
lcr, ucr, lnc, unc in that order); `ipmitool sensor list` (a snapshot's) has the lnc column and prints
`nc`; Redfish has LowerThresholdNonCritical or Thresholds.LowerCaution (the parser's `lnc` state). A fan
with neither a published lnc nor the BMC's `lnc` state gives no such signal (no threshold of ours is
guessed); an lnc of 0 or less is a placeholder, no threshold (a fan stopped by design reads 0 at it); a fan
the BMC cannot read (`ns`, `na`) is not slowing; one at or below its critical threshold is a
sensor_critical fan, not this. A state, on every report while it holds, so a rule can ask that it last
(`for`): a BMC's quiet fan mode can dip a fan below it for a while. Only a fan read in RPM: a duty cycle
(Redfish ReadingUnits Percent, e.g. HPE iLO) is the BMC's command, not the fan's speed (review r7, finding 5).
The BMC's lnc state alone can hold above the threshold: a BMC clears a low alarm only once the reading is
past the threshold plus a hysteresis (OpenBMC dbus-sensors src/Thresholds.cpp, checkThresholds), so its
`verdict` says the BMC flags the fan, with the reading, not that the reading is below the threshold.
"""

from __future__ import annotations

from checker.schemas import SensorReading
from remediator.signals import SignalValue

CRITICAL_STATES = frozenset({"cr", "nr", "lcr", "ucr", "lnr", "unr"})
NON_RECOVERABLE = frozenset({"nr", "lnr", "unr"})
MAX_SENSORS = 32
MAX_FANS = 16
LOWER_CRITICAL = ("lcr", "lnr")
SHOWN = ("lnr", "lcr", "ucr", "unr")
UNREAD_STATES = frozenset({"ns", "na", ""})  # IPMI's no reading / not available, as the parsers keep them


def _direction(sensor: SensorReading, status: str) -> str | None:
    """upper / lower from sdr elist's state, else from the reading against the thresholds; None: unknown."""
    if status[0] in "ul" and len(status) == 3:
        return "upper" if status[0] == "u" else "lower"
    limits, reading = sensor.thresholds, sensor.reading
    if reading is None:
        return None
    if any(reading >= limits[k] for k in ("ucr", "unr") if k in limits):
        return "upper"
    if any(reading <= limits[k] for k in ("lcr", "lnr") if k in limits):
        return "lower"
    return None


def _limits(sensor: SensorReading) -> str:
    shown = [f"{k} {sensor.thresholds[k]:g}" for k in SHOWN if k in sensor.thresholds]
    return ", ".join(shown) if shown else "thresholds not listed"


def _fan_degraded(sensor: SensorReading) -> SignalValue | None:
    """A fan at or below its published lower non-critical threshold and above its lower critical ones
    (module docstring); None otherwise. Strictly below the lnc, or at it when the BMC itself says so (ipmitool's
    `nc`, the Redfish parser's `lnc`, which it gives at the threshold only when the BMC's Health is not OK):
    an `ok` fan exactly at its threshold is the BMC's to judge. A listing without thresholds (`sdr elist`):
    the BMC's `lnc` state is the verdict, and `limits` says the thresholds were not listed."""
    lnc, reading, status = sensor.thresholds.get("lnc"), sensor.reading, sensor.status.strip().lower()
    if sensor.kind != "fan" or reading is None or status in CRITICAL_STATES or status in UNREAD_STATES:
        return None
    if (sensor.unit or "").strip().lower() != "rpm":
        return None  # a duty cycle in percent (module docstring), or a unit not given: no speed to judge
    if any(reading <= sensor.thresholds[k] for k in LOWER_CRITICAL if k in sensor.thresholds):
        return None  # critical: the BMC's cr (sensor_critical) or the SEL's going-low event says so
    if lnc is not None and lnc <= 0:
        lnc = None  # a placeholder threshold (review r4, finding 7): no threshold, the BMC's state alone
    if lnc is None and not sensor.thresholds and status == "lnc":
        limits = "the BMC's lnc state; sdr elist lists no thresholds"
        # a title's detail text is cut at 120 characters (remediator.decisions.template_values): kept short
        verdict = f"the BMC flags it below its lower non-critical threshold (reading {reading:.0f}, none listed)"
    elif lnc is not None and (reading < lnc or (reading == lnc and status in ("nc", "lnc"))):
        limits = ", ".join(f"{k} {sensor.thresholds[k]:g}" for k in ("lnc", *LOWER_CRITICAL) if k in sensor.thresholds)
        verdict = f"{reading:.0f} at or below its lower non-critical threshold ({limits})"
    else:
        return None
    detail = {
        "kind": "fan",
        "status": status,
        "reading": reading,
        "unit": sensor.unit,
        "thresholds": dict(sensor.thresholds),
        "limits": limits,
        "verdict": verdict,  # the title's words: a reading against thresholds, or the BMC's state alone
    }
    return SignalValue("fan_degraded", sensor.name, reading, detail)


def sensor_signals(sensors: list[SensorReading] | None) -> list[SignalValue]:
    if not sensors:
        return []
    degraded = [s for s in map(_fan_degraded, sensors) if s is not None][:MAX_FANS]
    signals = []
    for sensor in sensors:
        status = sensor.status.strip().lower()
        if status not in CRITICAL_STATES:
            continue
        non_recoverable = status in NON_RECOVERABLE
        direction = _direction(sensor, status)
        severity = "nr" if non_recoverable else "cr"
        detail = {
            "kind": sensor.kind,
            "status": status,
            "reading": sensor.reading,
            "unit": sensor.unit,
            "thresholds": dict(sensor.thresholds),
            "limits": _limits(sensor),
            "non_recoverable": non_recoverable,
            "direction": direction or "unknown",
            "level": f"{direction or 'unknown'}_{severity}",
        }
        value = sensor.reading if sensor.reading is not None else 1.0
        signals.append(SignalValue("sensor_critical", sensor.name, value, detail))
        if len(signals) >= MAX_SENSORS:
            break
    return signals + degraded
