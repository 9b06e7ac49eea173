"""The sensor parser on the corpus's thermal listings: every status ipmitool prints there ('ok', 'cr', 'nr',
'na' for absent sensors, a discrete state such as 0x0100), and 'nc' (past a non-critical threshold only),
which is no critical sensor."""

from __future__ import annotations

from bench.samples import sample
from checker.parsers.ipmi import parse_sdr
from checker.schemas import SensorReading
from remediator.derive.sensors import sensor_signals

CR = "thermal/ipmitool-sensor-list-cpu2-temp-cr-above-upper-critical.txt"
NR = "thermal/ipmitool-sensor-list-supermicro-dual-socket-cpu2-temp-nr-lowered-thresholds.txt"


def test_every_status_of_the_real_listings_is_read() -> None:
    parsed = parse_sdr(sample(CR) + sample(NR))
    assert parsed.problems == []
    statuses = {s.status for s in parsed.value}
    assert {"ok", "cr", "nr", "na", "0x0100", "0x01ff", "0x0000"} <= statuses
    absent = next(s for s in parsed.value if s.name == "P1-DIMMA2 Temp")
    assert (absent.status, absent.reading, absent.unit, absent.thresholds) == ("na", None, None, {})
    psu = next(s for s in parsed.value if s.name == "PS1 Status")
    assert (psu.kind, psu.reading) == ("psu", None)  # a discrete state, no number


def test_non_critical_is_not_critical() -> None:
    # ipmitool's own wording for a reading past its upper non-critical threshold only
    line = (
        "CPU1 Temp        | 87.000     | degrees C  | nc    | 0.000     | 0.000     | 0.000     "
        "| 85.000    | 90.000    | 95.000    \n"
    )
    parsed = parse_sdr(line)
    assert parsed.value[0].status == "nc"
    assert sensor_signals(parsed.value) == []


def _line(
    name: str, reading: str, status: str, limits: str = "na        | na        | na        | na        | na        | na"
) -> str:
    return f"{name:<17}| {reading:<11}| degrees C  | {status:<6}| {limits}\n"


def test_the_direction_and_the_thresholds_are_read() -> None:
    """Before: a sensor past a LOWER critical threshold (a cold inlet, a failed sensor reading 0) was as
    'hot' as one past its upper threshold. ipmitool sensor list prints cr/nr both ways: the thresholds
    tell; sdr elist (the agent's) says lcr/ucr/lnr/unr itself."""
    listed = parse_sdr(sample(NR) + sample(CR)).value
    by = {(s.subject, s.detail["status"]): s for s in sensor_signals(listed)}
    nr = by[("CPU2 Temp", "nr")]
    assert (nr.detail["level"], nr.detail["non_recoverable"]) == ("upper_nr", True)
    assert nr.detail["limits"] == "lnr 10, lcr 10, ucr 30, unr 30"  # someone lowered them: the ticket shows it
    assert by[("CPU2 Temp", "cr")].detail["level"] == "upper_cr"
    cold = parse_sdr(
        _line("Inlet Temp", "0.000", "cr", "-5.000    | 0.000     | 5.000     | 40.000    | 45.000    | 50.000")
    ).value
    (signal,) = sensor_signals(cold)
    assert (signal.detail["direction"], signal.detail["level"]) == ("lower", "lower_cr")
    elist = [
        SensorReading(name="CPU1 Temp", kind="temperature", status="ucr", reading=93.0, unit="degrees C"),
        SensorReading(name="Inlet Temp", kind="temperature", status="lnr", reading=0.0, unit="degrees C"),
        SensorReading(name="Exhaust", kind="temperature", status="cr", reading=70.0, unit="degrees C"),
    ]
    levels = {s.subject: (s.detail["level"], s.detail["limits"]) for s in sensor_signals(elist)}
    assert levels == {
        "CPU1 Temp": ("upper_cr", "thresholds not listed"),
        "Inlet Temp": ("lower_nr", "thresholds not listed"),
        "Exhaust": ("unknown_cr", "thresholds not listed"),  # neither the state nor thresholds say: counted as heat
    }


def test_only_heat_matches_the_airflow_rules() -> None:
    """A rule's detail_matches compares by substring: no level may be found inside another."""
    from remediator.rules import load_ruleset

    rules = {r.id: r for r in load_ruleset([]).rules}
    cr, nr = rules["sensor-critical-temperature"].when, rules["sensor-critical-temperature-nr"].when
    for status, reading, expected in (
        ("ucr", 93.0, "cr"),
        ("unr", 99.0, "nr"),
        ("lcr", 0.0, None),
        ("lnr", -9.0, None),
    ):
        (signal,) = sensor_signals(
            [SensorReading(name="Inlet Temp", kind="temperature", status=status, reading=reading, unit="degrees C")]
        )
        assert (cr.matches(signal), nr.matches(signal)) == (expected == "cr", expected == "nr"), status
