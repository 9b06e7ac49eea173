"""Fans (issue 16 leftovers): a fan slowing below the lower non-critical threshold its BMC publishes is
`fan_degraded`; a fan the BMC cannot read is a candidate of a lost fan redundancy, never taken for healthy;
and the redundancy's ticket is keyed by its one failing fan. Real listings: the Supermicro `ipmitool sensor
list` (FAN1 4400 RPM, lnr 300, lcr 500, lnc 700; FAN4-6, FANB na) and the Dell R650 Thermal (16 fans, lnc 840,
lcr 480 RPM)."""

from __future__ import annotations

import copy
import json
from typing import Any

from bench.samples import sample
from checker.parsers.ipmi import parse_sdr
from checker.parsers.redfish_sensors import parse_thermal
from checker.schemas import RedfishRedundancy, RedfishState, SensorReading
from remediator.derive.redfish_power import power_signals
from remediator.derive.sensors import sensor_signals
from remediator.signals import SignalValue

SUPERMICRO = "thermal/ipmitool-sensor-list-supermicro-dual-socket-cpu2-temp-nr-lowered-thresholds.txt"
DELL_THERMAL = "redfish/dell-idrac9-r650-thermal-healthy-16-fans-redundancy.json"
FAN1 = "FAN1             | 4400.000   | RPM        | ok    | 300.000   | 500.000   | 700.000   "
LOST = RedfishRedundancy(name="System Board Fan Redundancy", of="fan", health="Critical", state="Enabled")


def supermicro(fan1: str) -> list[SensorReading]:
    """The real listing with FAN1's reading, status and lower thresholds as given (its upper ones kept)."""
    return parse_sdr(sample(SUPERMICRO).replace(FAN1, fan1)).value


def dell(**fan1a: Any) -> list[SensorReading]:
    """The real R650 Thermal with System Board Fan1A's members changed (None: the member removed)."""
    thermal = copy.deepcopy(json.loads(sample(DELL_THERMAL)))
    member = thermal["Fans"][0]
    for key, value in fan1a.items():
        if value is None:
            member.pop(key, None)
        else:
            member[key] = value
    return parse_thermal(thermal).value.readings


def of(signals: list[SignalValue], kind: str) -> list[SignalValue]:
    return [s for s in signals if s.kind == kind]


def test_a_fan_below_its_lower_non_critical_threshold_is_degraded_ipmitool() -> None:
    assert of(sensor_signals(parse_sdr(sample(SUPERMICRO)).value), "fan_degraded") == []  # 4400 RPM: healthy
    slow = "FAN1             | 600.000    | RPM        | nc    | 300.000   | 500.000   | 700.000   "
    (degraded,) = of(sensor_signals(supermicro(slow)), "fan_degraded")
    assert (degraded.subject, degraded.value, degraded.detail["limits"]) == ("FAN1", 600.0, "lnc 700, lcr 500, lnr 300")
    fans_critical = [s.subject for s in of(sensor_signals(supermicro(slow)), "sensor_critical") if "FAN" in s.subject]
    assert fans_critical == []  # not critical (the listing's CPU2 Temp nr is its own)
    # no lower non-critical threshold published: no signal, whatever the reading (no threshold of ours)
    no_lnc = "FAN1             | 600.000    | RPM        | ok    | 300.000   | 500.000   | na        "
    assert of(sensor_signals(supermicro(no_lnc)), "fan_degraded") == []
    # at or below its lower critical threshold: the critical fan's signal, not this one
    stopped = "FAN1             | 400.000    | RPM        | cr    | 300.000   | 500.000   | 700.000   "
    assert of(sensor_signals(supermicro(stopped)), "fan_degraded") == []
    assert "FAN1" in [s.subject for s in of(sensor_signals(supermicro(stopped)), "sensor_critical")]
    # exactly at the lnc: the BMC judges (ok: not degraded; nc: degraded)
    at_ok = "FAN1             | 700.000    | RPM        | ok    | 300.000   | 500.000   | 700.000   "
    at_nc = at_ok.replace("| ok    |", "| nc    |")
    assert of(sensor_signals(supermicro(at_ok)), "fan_degraded") == []
    assert [s.subject for s in of(sensor_signals(supermicro(at_nc)), "fan_degraded")] == ["FAN1"]


def test_a_fan_below_its_lower_non_critical_threshold_is_degraded_redfish() -> None:
    assert of(sensor_signals(dell()), "fan_degraded") == []  # every fan 5400-9240 RPM over lnc 840
    (degraded,) = of(sensor_signals(dell(Reading=700)), "fan_degraded")  # between lcr 480 and lnc 840
    assert (degraded.subject, degraded.detail["limits"]) == ("System Board Fan1A", "lnc 840, lcr 480")
    assert of(sensor_signals(dell(Reading=700, LowerThresholdNonCritical=None)), "fan_degraded") == []
    assert of(sensor_signals(dell(Reading=300)), "fan_degraded") == []  # below lcr: critical, not degraded


def test_a_fan_the_bmc_cannot_read_is_a_candidate_never_healthy() -> None:
    state = RedfishState(service="https://bmc.example", redundancy=[LOST])
    # Fan1A below its lower critical threshold; Fan2A served with no Reading and no Health (the parser's ns)
    fans = dell(Reading=300)
    fans = [
        f.model_copy(update={"reading": None, "status": "ns"}) if f.name == "System Board Fan2A" else f for f in fans
    ]
    (group,) = of(power_signals(state, False, fans), "fan_redundancy_lost")
    candidates = {c["sensor"]: c["candidate"] for c in group.detail["fan_candidates"]}
    assert candidates == {"System Board Fan1A": "failing", "System Board Fan2A": "unreadable"}
    assert group.detail["ambiguous"] is True
    assert group.detail["fan"] == "System Board Fan1A, or one the BMC cannot read (System Board Fan2A)"
    assert group.detail["fan_part"] == "System Board Fan1A"
    # the real Supermicro listing: FAN1 failing, the na headers (FAN4-6, FANB) unreadable candidates
    stopped = "FAN1             | 400.000    | RPM        | cr    | 300.000   | 500.000   | 700.000   "
    (listed,) = of(power_signals(state, False, supermicro(stopped)), "fan_redundancy_lost")
    assert [(c["sensor"], c["candidate"]) for c in listed.detail["fan_candidates"]] == [
        ("FAN1", "failing"),
        ("FAN4", "unreadable"),
        ("FAN5", "unreadable"),
        ("FAN6", "unreadable"),
        ("FANB", "unreadable"),
    ]
    # every fan read and healthy: every fan listed, read ok, keyed by the group
    (every,) = of(power_signals(state, False, dell()), "fan_redundancy_lost")
    assert {c["candidate"] for c in every.detail["fan_candidates"]} == {"read ok"}
    assert (every.detail["ambiguous"], every.detail["fan_part"]) == (True, "System Board Fan Redundancy")


def test_sdr_elist_has_no_thresholds_the_bmc_s_lnc_state_is_its_verdict() -> None:
    """What the agent runs (review r4, finding 1): `sdr elist` prints five columns and no thresholds; a fan
    below its lower non-critical threshold is ipmitool's `lnc` (lib/ipmi_sdr.c, ipmi_sdr_get_status with
    sdr_extended). Before, thresholds={} gave no signal, so the rule could never fire on an IPMI host."""
    listing = (
        "FAN1             | 41h | lnc | 29.1 | 600 RPM\n"
        "FAN2             | 42h | ok  | 29.2 | 4300 RPM\n"
        "FAN3             | 43h | lcr | 29.3 | 400 RPM\n"
        "FAN4             | 44h | ns  | 29.4 | No Reading\n"
        "FAN5             | 45h | unc | 29.5 | 25300 RPM\n"
    )
    signals = sensor_signals(parse_sdr(listing).value)
    (degraded,) = of(signals, "fan_degraded")
    assert (degraded.subject, degraded.value) == ("FAN1", 600.0)
    assert degraded.detail["limits"] == "the BMC's lnc state; sdr elist lists no thresholds"
    assert [s.subject for s in of(signals, "sensor_critical")] == ["FAN3"]  # lcr stays critical, not degraded
    # a slow fan the BMC reads ok: no threshold of ours is guessed
    assert of(sensor_signals(parse_sdr("FAN1             | 41h | ok  | 29.1 | 600 RPM\n").value), "fan_degraded") == []


def test_a_placeholder_threshold_or_an_unread_fan_is_not_slowing() -> None:
    """Review r4, finding 7: a fan stopped by design (Redfish Reading 0, LowerThresholdNonCritical 0, Health
    OK) is no slowing fan; at a threshold the BMC calls OK it is not either; ns/na are no readings."""
    assert (
        of(sensor_signals(dell(Reading=0, LowerThresholdNonCritical=0, LowerThresholdCritical=None)), "fan_degraded")
        == []
    )
    # exactly at the lnc: Health OK is the BMC's verdict; Warning says it is slowing
    assert of(sensor_signals(dell(Reading=840)), "fan_degraded") == []
    warned = dell(Reading=840, Status={"State": "Enabled", "Health": "Warning"})
    assert [s.subject for s in of(sensor_signals(warned), "fan_degraded")] == ["System Board Fan1A"]
    unread = SensorReading(name="FAN1", kind="fan", status="ns", reading=600, unit="RPM", thresholds={"lnc": 700})
    assert of(sensor_signals([unread]), "fan_degraded") == []


def test_a_fan_the_bmc_ramped_past_an_upper_threshold_is_no_failing_candidate() -> None:
    """Review r4, finding 4: a fan past an upper threshold (the BMC ramping the others up when one fails)
    counted as failing: two failing fans, the group's key, a ticket beside the failed fan's."""
    state = RedfishState(service="https://bmc.example", redundancy=[LOST])
    failed = SensorReading(name="Fan2A", kind="fan", status="lcr", reading=240, unit="RPM", thresholds={"lcr": 600})
    ramped = SensorReading(name="Fan1A", kind="fan", status="ucr", reading=19000, unit="RPM", thresholds={})
    listed = SensorReading(
        name="Fan3A", kind="fan", status="nc", reading=16000, unit="RPM", thresholds={"unc": 15000, "lcr": 600}
    )
    (group,) = of(power_signals(state, False, [ramped, failed, listed]), "fan_redundancy_lost")
    assert group.detail["fan_part"] == "Fan2A"
    assert [c["sensor"] for c in group.detail["fan_candidates"]] == ["Fan2A"]
    assert group.detail["fans_seen"] == ["Fan1A", "Fan2A", "Fan3A"]


def test_a_fan_the_bmc_flags_slowing_above_its_lcr_is_slowing_not_failing() -> None:
    """Review r7, finding 1: a fan at lnc (above its lcr) counted as failing, so with another fan at 240 cr
    there were two failing fans and the slowing fan's ticket took the lost redundancy."""
    state = RedfishState(service="https://bmc.example", redundancy=[LOST])
    limits = {"lnc": 840.0, "lcr": 480.0}
    slow = SensorReading(name="Fan5A", kind="fan", status="lnc", reading=700, unit="RPM", thresholds=limits)
    failed = SensorReading(name="Fan2A", kind="fan", status="cr", reading=240, unit="RPM", thresholds=limits)
    (group,) = of(power_signals(state, False, [slow, failed]), "fan_redundancy_lost")
    assert [(c["sensor"], c["candidate"]) for c in group.detail["fan_candidates"]] == [
        ("Fan2A", "failing"),
        ("Fan5A", "slowing"),
    ]
    assert (group.detail["fan_part"], group.detail["fan"]) == ("Fan2A", "Fan2A")
    # below its lcr while the BMC still says lnc: failing (the reading is the verdict)
    stopped = slow.model_copy(update={"reading": 300})
    (alone,) = of(power_signals(state, False, [stopped]), "fan_redundancy_lost")
    assert alone.detail["fan_candidates"][0]["candidate"] == "failing"


def test_the_bmc_s_lnc_state_alone_is_worded_as_its_flag_and_a_percent_fan_is_not_judged() -> None:
    """Review r7, finding 5: a BMC clears a low alarm only above the threshold plus a hysteresis (OpenBMC
    dbus-sensors src/Thresholds.cpp, checkThresholds), so sdr elist's lnc can hold for a fan at 900 above an
    lnc of 840: the title said '900 at or below its lower non-critical threshold'. A fan read in percent (a
    duty cycle, HPE iLO's ReadingUnits Percent) is no speed: no signal."""
    listing = "FAN1             | 41h | lnc | 29.1 | 900 RPM\n"
    (degraded,) = of(sensor_signals(parse_sdr(listing).value), "fan_degraded")
    assert (
        degraded.detail["verdict"]
        == "the BMC flags it below its lower non-critical threshold (reading 900, none listed)"
    )
    listed = SensorReading(name="FAN1", kind="fan", status="nc", reading=600, unit="RPM", thresholds={"lnc": 700})
    (below,) = of(sensor_signals([listed]), "fan_degraded")
    assert below.detail["verdict"] == "600 at or below its lower non-critical threshold (lnc 700)"
    duty = listed.model_copy(update={"unit": "percent", "reading": 20.0, "thresholds": {"lnc": 25.0}})
    assert of(sensor_signals([duty]), "fan_degraded") == []
