"""IPMI sensors past their thresholds, from the real `ipmitool sensor list` listings."""

from __future__ import annotations

from bench.samples import sample
from checker.parsers.ipmi import parse_sdr
from checker.schemas import SensorReading
from tests.builders.observations import Deriver, at, by_subject, of, report


def sensors(path: str) -> list[SensorReading]:
    parsed = parse_sdr(sample(path))
    assert parsed.problems == []
    return parsed.value


def test_a_cpu_past_its_upper_critical_threshold() -> None:
    found = Deriver()(
        report(at(0), sensors=sensors("thermal/ipmitool-sensor-list-cpu2-temp-cr-above-upper-critical.txt"))
    )
    signal = by_subject(found, "sensor_critical")["CPU2 Temp"]
    assert signal.value == 33.0
    assert signal.detail["kind"] == "temperature"
    assert signal.detail["status"] == "cr"
    assert signal.detail["thresholds"]["ucr"] == 30.0  # the evidence shows the threshold it crossed
    assert signal.detail["non_recoverable"] is False
    assert "CPU1 Temp" not in by_subject(found, "sensor_critical")


def test_a_full_listing_with_absent_sensors_flags_only_the_one_past_its_thresholds() -> None:
    listing = sensors("thermal/ipmitool-sensor-list-supermicro-dual-socket-cpu2-temp-nr-lowered-thresholds.txt")
    assert any(s.status == "na" for s in listing)  # unpopulated DIMM slots and absent fans: not faults
    found = of(Deriver()(report(at(0), sensors=listing)), "sensor_critical")
    assert [(s.subject, s.detail["status"]) for s in found] == [("CPU2 Temp", "nr")]
    # the thresholds someone lowered to 30 °C are on the signal, for the person who reads the ticket
    assert found[0].detail["thresholds"] == {
        "lnr": 10.0,
        "lcr": 10.0,
        "lnc": 10.0,
        "unc": 30.0,
        "ucr": 30.0,
        "unr": 30.0,
    }
    assert found[0].detail["non_recoverable"] is True


def test_healthy_sensors_say_nothing() -> None:
    healthy = sensors("ipmi-sdr/ipmitool-sdr-list-intel-s2600-healthy.txt")
    assert of(Deriver()(report(at(0), sensors=healthy)), "sensor_critical") == []
