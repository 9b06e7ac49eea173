"""IPMI sensors past their critical thresholds, as the BMC judges them.

`ipmitool` marks a threshold sensor `cr` (past a critical threshold) or `nr` (past a
non-recoverable one); `sdr elist` and `sensor list` print the same states. Those are the BMC's
verdicts against thresholds the vendor (or an operator) set: the signal carries the reading and
the thresholds so a person can tell a hot CPU from a threshold someone lowered. A state, emitted
on every report while it holds.
"""

from __future__ import annotations

from checker.schemas import SensorReading
from remediator.signals import SignalValue

CRITICAL_STATES = frozenset({"cr", "nr", "lcr", "ucr", "lnr", "unr"})
MAX_SENSORS = 32


def sensor_signals(sensors: list[SensorReading] | None) -> list[SignalValue]:
    if not sensors:
        return []
    signals = []
    for sensor in sensors:
        status = sensor.status.strip().lower()
        if status not in CRITICAL_STATES:
            continue
        detail = {
            "kind": sensor.kind,
            "status": status,
            "reading": sensor.reading,
            "unit": sensor.unit,
            "thresholds": dict(sensor.thresholds),
            "non_recoverable": status in ("nr", "lnr", "unr"),
        }
        value = sensor.reading if sensor.reading is not None else 1.0
        signals.append(SignalValue("sensor_critical", sensor.name, value, detail))
        if len(signals) >= MAX_SENSORS:
            break
    return signals
