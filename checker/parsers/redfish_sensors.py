"""Redfish Chassis/{id}/Thermal, Power and Sensors/{id} -> SensorReading, PSUs and redundancy groups.

Readings land in the report's `sensors` as ipmitool's `sdr elist` would give them, so the centre's
sensor deriver (remediator/derive/sensors.py) reads them unchanged: the status is the threshold the
reading crossed (`ucr`, `lnr` ...) against the thresholds the BMC publishes (UpperThresholdCritical and
friends; Fatal is IPMI's non-recoverable), else the BMC's Health (Critical `cr`, Warning `nc`, OK `ok`),
else `ns` (IPMI's "no reading"/not specified): never `ok` for a health the BMC did not give.

Not readings: a member whose Status.State is Absent (Supermicro X10 lists every sensor Absent with 0 for
the reading and every threshold; 0 is not 0 degC or a stopped fan), Disabled members, and a member that
serves 0 with all thresholds 0 and no Health (the same placeholder without the State). An Absent PSU
bay is an empty bay: HPE iLO serves Health 'Warning' on it, which says the bay is empty, not that a PSU
failed, so its health is not kept.

LineInputVoltage is checked against the input type's range: our own bands, wider than any real supply's
operating range (universal AC input 90-264 V and 277 V AC units up to about 305 V; -48 V DC telecom
feeds 40.5-57 V normal, 36-75 V abnormal, ETSI EN 300 132-2; 380 V DC 260-400 V, ETSI EN 300 132-3-1).
Outside them the value (572 V and 13 V on an Intel S2600BPB, both PSUs Health OK) is kept as
implausible and not believed; 0 V is kept: a PSU that lost its input.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from checker.parsers.common import Parsed, clip, guarded, problem
from checker.parsers.redfish_common import number, obj, status, text, whole
from checker.schemas import RedfishPsu, RedfishRedundancy, SensorReading

SensorKind = Literal["psu", "fan", "temperature", "voltage", "power", "other"]
MAX_READINGS = 1024
THRESHOLD_FIELDS: tuple[tuple[str, str], ...] = (
    ("lnr", "LowerThresholdFatal"),
    ("lcr", "LowerThresholdCritical"),
    ("lnc", "LowerThresholdNonCritical"),
    ("unc", "UpperThresholdNonCritical"),
    ("ucr", "UpperThresholdCritical"),
    ("unr", "UpperThresholdFatal"),
)
SENSOR_THRESHOLDS: tuple[tuple[str, str], ...] = (  # Sensor.v1_x Thresholds object
    ("lnr", "LowerFatal"),
    ("lcr", "LowerCritical"),
    ("lnc", "LowerCaution"),
    ("unc", "UpperCaution"),
    ("ucr", "UpperCritical"),
    ("unr", "UpperFatal"),
)
HEALTH_STATUS = {"Critical": "cr", "Warning": "nc", "OK": "ok"}
NOT_READINGS = ("Absent", "Disabled")
INPUT_BANDS: dict[str, tuple[float, float]] = {"DCNeg48V": (36.0, 75.0), "DC380V": (260.0, 410.0)}
AC_BAND = (85.0, 310.0)
SENSOR_UNITS: dict[str, tuple[SensorKind, str]] = {  # Sensor.ReadingType -> kind, ipmitool's unit
    "Temperature": ("temperature", "degrees C"),
    "Voltage": ("voltage", "Volts"),
    "Power": ("power", "Watts"),
    "Rotational": ("fan", "RPM"),
    "Current": ("other", "Amps"),
}


@dataclass
class ChassisReadings:
    """What one Thermal, Power or Sensor resource gave."""

    readings: list[SensorReading] = field(default_factory=list)
    psus: list[RedfishPsu] = field(default_factory=list)
    redundancy: list[RedfishRedundancy] = field(default_factory=list)
    absent: int = 0


def _status(reading: float | None, thresholds: dict[str, float], health: str | None) -> str:
    if reading is not None:
        for name, upper in (
            ("unr", True),
            ("lnr", False),
            ("ucr", True),
            ("lcr", False),
            ("unc", True),
            ("lnc", False),
        ):
            limit = thresholds.get(name)
            if limit is not None and reading == limit and name in ("unc", "lnc") and health == "OK":
                continue  # exactly at a non-critical threshold, the BMC says OK: its verdict (review r4, 7)
            if limit is not None and (reading >= limit if upper else reading <= limit):
                return name
    return HEALTH_STATUS.get(health or "", "ns")


def _reading(
    member: dict[str, Any],
    kind: SensorKind,
    value_key: str,
    unit: str,
    fields: tuple[tuple[str, str], ...] = THRESHOLD_FIELDS,
) -> tuple[SensorReading | None, bool]:
    """(the reading, or None; whether the member was a not-a-reading placeholder or Absent)."""
    health, state = status(member)
    if state in NOT_READINGS:
        return None, state == "Absent"
    source = obj(member.get("Thresholds")) if fields is SENSOR_THRESHOLDS else member
    thresholds: dict[str, float] = {}
    for short, key in fields:
        value = number(obj(source.get(key)), "Reading") if fields is SENSOR_THRESHOLDS else number(source, key)
        if value is not None:
            thresholds[short] = value
    reading = number(member, value_key)
    if reading == 0 and health is None and state is None and all(v == 0 for v in thresholds.values()):
        # Supermicro's placeholder: 0 with every threshold 0, no Health and no State. A member whose State the
        # BMC gives (Enabled) is a sensor that reads 0 — a stopped fan — and stays a reading (review r5
        # finding 11); an Absent one was dropped above.
        return None, True
    name = text(member, "Name", 128) or text(member, "FanName", 128) or text(member, "MemberId", 64) or "?"
    if fields is THRESHOLD_FIELDS and thresholds and all(v == 0 for v in thresholds.values()):
        thresholds = {}  # all-zero thresholds are no thresholds
    return (
        SensorReading(
            name=name,
            kind=kind,
            status=_status(reading, thresholds, health),
            reading=reading,
            unit=unit,
            thresholds=thresholds,
        ),
        False,
    )


def _redundancy(groups: object, of: Literal["psu", "fan"]) -> list[RedfishRedundancy]:
    found = []
    for group in groups if isinstance(groups, list) else []:
        doc = obj(group)
        name = text(doc, "Name", 128)
        if name is None and not doc.get("Mode"):
            continue  # a bare {"@odata.id": ...} reference (Intel lists each PSU's group this way)
        health, state = status(doc)
        members = doc.get("RedundancySet")
        found.append(
            RedfishRedundancy(
                name=name or text(doc, "MemberId", 64) or "redundancy",
                of=of,
                mode=text(doc, "Mode", 32),
                health=health,
                state=state,
                min_needed=whole(doc, "MinNumNeeded"),
                members=len(members) if isinstance(members, list) and members else None,
            )
        )
    return found


def _members(doc: dict[str, Any], key: str, problems: list[str]) -> list[dict[str, Any]]:
    value = doc.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        problems.append(problem(f"{key} is not a list", repr(value)))
        return []
    good = [m for m in value if isinstance(m, dict)]
    if len(good) < len(value):
        problems.append(f"{len(value) - len(good)} {key} members that are not objects")
    return good


@guarded(ChassisReadings)
def parse_thermal(doc: object) -> Parsed[ChassisReadings]:
    """Chassis/{id}/Thermal: Temperatures and Fans (RPM or Percent) with their thresholds, fan redundancy."""
    thermal, problems, out = obj(doc), list[str](), ChassisReadings()
    if not thermal:
        return Parsed(out, [problem("Thermal is not a JSON object", repr(doc)[:200])])
    for member in _members(thermal, "Temperatures", problems):
        reading, absent = _reading(member, "temperature", "ReadingCelsius", "degrees C")
        out.absent += absent
        if reading is not None:
            out.readings.append(reading)
    for member in _members(thermal, "Fans", problems):
        units = text(member, "ReadingUnits", 16) or "RPM"
        reading, absent = _reading(member, "fan", "Reading", "percent" if units == "Percent" else units)
        out.absent += absent
        if reading is not None:
            out.readings.append(reading)
    out.redundancy = _redundancy(thermal.get("Redundancy"), "fan")
    return Parsed(out, problems)


def _input_voltage(psu: dict[str, Any], problems: list[str], label: str) -> tuple[float | None, float | None]:
    """(believed LineInputVoltage, implausible one)."""
    volts = number(psu, "LineInputVoltage")
    if volts is None or volts == 0:
        return volts, None
    low, high = INPUT_BANDS.get(text(psu, "LineInputVoltageType", 32) or "", AC_BAND)
    if low <= volts <= high:
        return volts, None
    problems.append(f"{label}: LineInputVoltage {volts:g} V is outside {low:g}-{high:g} V: not believed")
    return None, volts


# The PSU's number in a MemberId or Name as the log parser reads it in a message (checker/parsers/redfish_log.py):
# Dell 'PSU.Slot.1', 'PS1 Status', 'Power Supply 1'. Not a bare MemberId ('0': HPE and Intel count from 0).
_PSU_NUMBER = re.compile(r"\bPSU\.Slot\.(\d{1,3})\b|\bPS\s?(\d{1,3})\b|\bpower supply\s*(\d{1,3})\b", re.IGNORECASE)


def psu_name(member_id: str, bay: int | None, name: str | None) -> str:
    """'PS2', as the SEL names a PSU (ipmitool's component, the log parser's PS<n>), where a bay or number says;
    else its Name and MemberId ('Power Supply Bay 0'). Its status reading is this name and ' Status': before,
    the reading took Name and MemberId whatever they said, and Dell's PSU (Name 'PS2 Status', MemberId
    'PSU.Slot.2') read 'PS2 Status PSU.Slot.2 Status', a sensor no log or ticket names (second review of the
    Redfish rules, finding 5)."""
    if bay is not None:
        return f"PS{bay}"
    for found in (member_id, name or ""):
        if (m := _PSU_NUMBER.search(found)) is not None:
            return f"PS{next(g for g in m.groups() if g)}"
    return f"{(name or 'PSU').strip()} {member_id}".strip()


def _psu(member: dict[str, Any], problems: list[str]) -> tuple[RedfishPsu, SensorReading | None]:
    health, state = status(member)
    hpe = obj(obj(member.get("Oem")).get("Hpe"))
    bay = whole(hpe, "BayNumber")
    member_id = text(member, "MemberId", 64) or "?"
    label = psu_name(member_id, bay, text(member, "Name", 100) or "Power Supply")
    absent = state == "Absent"
    believed, implausible = (None, None) if absent else _input_voltage(member, problems, label)
    psu = RedfishPsu(
        member_id=member_id,
        name=text(member, "Name", 128),
        bay=bay,
        present=False if absent else (True if state is not None else None),
        health=None if absent else health,
        state=state,
        model=text(member, "Model", 128),
        serial=text(member, "SerialNumber", 128),
        part_number=text(member, "PartNumber", 128) or text(member, "SparePartNumber", 128),
        firmware=text(member, "FirmwareVersion", 64),
        capacity_watts=number(member, "PowerCapacityWatts"),
        output_watts=number(member, "LastPowerOutputWatts"),
        line_input_voltage=believed,
        implausible_input_voltage=implausible,
    )
    if absent or state == "Disabled":
        return psu, None
    # A discrete reading, as ipmitool's 'PS1 Status' is: 'ok' while present, whatever its health ('ns' when the
    # BMC says nothing of it). A PSU's health is judged from the redfish section's PSUs (psu_failure only with
    # its input present, bmc_psu_unhealthy, lost redundancy: remediator/derive/redfish_power.py), never as a
    # sensor past a threshold it does not have: a 'cr' here gave a second, host-holding power ticket beside
    # those (second review of the Redfish rules, finding 1).
    reading = SensorReading(name=clip(f"{label} Status", 128), kind="psu", status="ok" if health else "ns")
    return psu, reading


@guarded(ChassisReadings)
def parse_power(doc: object) -> Parsed[ChassisReadings]:
    """Chassis/{id}/Power: PSUs (a discrete `psu` reading each, as ipmitool's 'PS1 Status'), Voltages,
    the consumed power, and PSU redundancy."""
    power, problems, out = obj(doc), list[str](), ChassisReadings()
    if not power:
        return Parsed(out, [problem("Power is not a JSON object", repr(doc)[:200])])
    for member in _members(power, "PowerSupplies", problems):
        psu, reading = _psu(member, problems)
        out.psus.append(psu)
        out.absent += psu.present is False
        if reading is not None:
            out.readings.append(reading)
    for member in _members(power, "Voltages", problems):
        volts, absent = _reading(member, "voltage", "ReadingVolts", "Volts")
        out.absent += absent
        if volts is not None:
            out.readings.append(volts)
    for member in _members(power, "PowerControl", problems):
        watts = number(member, "PowerConsumedWatts")
        if watts is not None:
            name = text(member, "Name", 100) or f"Power Control {text(member, 'MemberId', 16) or ''}".strip()
            said = HEALTH_STATUS.get(status(member)[0] or "", "ns")
            out.readings.append(
                SensorReading(name=f"{name} Consumed", kind="power", status=said, reading=watts, unit="Watts")
            )
    out.redundancy = _redundancy(power.get("Redundancy"), "psu")
    return Parsed(out, problems)


@guarded(ChassisReadings)
def parse_sensor(doc: object) -> Parsed[ChassisReadings]:
    """One Chassis/{id}/Sensors/{id} resource (Sensor.v1_x, what ThermalSubsystem and PowerSubsystem point
    at on newer BMCs): Reading, ReadingType, Thresholds.{UpperCritical,...}.Reading."""
    sensor, out = obj(doc), ChassisReadings()
    if not sensor:
        return Parsed(out, [problem("Sensor is not a JSON object", repr(doc)[:200])])
    kind, unit = SENSOR_UNITS.get(
        text(sensor, "ReadingType", 32) or "", ("other", text(sensor, "ReadingUnits", 32) or "")
    )
    reading, absent = _reading(sensor, kind, "Reading", unit or "", SENSOR_THRESHOLDS)
    out.absent += absent
    if reading is not None:
        out.readings.append(reading)
    return Parsed(out, [])
