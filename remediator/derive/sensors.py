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
"""

from __future__ import annotations

from checker.schemas import SensorReading
from remediator.signals import SignalValue

CRITICAL_STATES = frozenset({"cr", "nr", "lcr", "ucr", "lnr", "unr"})
NON_RECOVERABLE = frozenset({"nr", "lnr", "unr"})
MAX_SENSORS = 32
SHOWN = ("lnr", "lcr", "ucr", "unr")


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


def sensor_signals(sensors: list[SensorReading] | None) -> list[SignalValue]:
    if not sensors:
        return []
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
    return signals
