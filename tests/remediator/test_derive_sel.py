"""SEL signals on built entries and on real SEL listings parsed by the real parsers."""

from __future__ import annotations

import datetime as dt

from bench.samples import sample
from checker.parsers.ipmi import parse_sel_info
from checker.parsers.ipmi_sel import parse_sel
from checker.schemas import SelEntry, SelState
from remediator.derive.sel import FIRST_SIGHT_LOOKBACK_S, SEL_FULL_PERCENT, sensor_of
from remediator.signals import SignalValue
from tests.builders.observations import T0, Deriver, at, by_subject, of, report, sel_entry, sel_state

FAILURES = ("psu_failure", "psu_input_lost", "power_unit_fault", "fan_failure", "sel_memory_ecc")


def failures(signals: list[SignalValue]) -> dict[tuple[str, str], float]:
    return {(s.kind, s.subject): s.value for s in signals if s.kind in FAILURES}


def real(path: str) -> list[SelEntry]:
    parsed = parse_sel(sample(path))
    assert parsed.value
    return parsed.value


def after(entries: list[SelEntry], minutes: int = 5) -> dt.datetime:
    stamps = [e.timestamp for e in entries if e.timestamp is not None]
    return max(stamps) + dt.timedelta(minutes=minutes)


# -- real listings -------------------------------------------------------------------------


def test_real_fan_and_psu_redundancy_listing_in_two_reports() -> None:
    entries = real("ipmi-sel/ipmitool-sel-elist-intel-s2600-fan-redundancy-bmcfw-psu-intrusion.txt")
    head, rest = [e for e in entries if e.record_id <= 3], [e for e in entries if e.record_id > 3]
    run = Deriver()
    first = run(report(after(head, 1), sel=SelState(entries=head, entry_count=len(head))))
    assert failures(first) == {}
    assert of(first, "sel_cleared") == []  # the reset entry of a first sight is history, not news
    second = run(report(after(rest), sel=SelState(entries=rest, entry_count=len(entries))))
    found = failures(second)
    assert {subject for kind, subject in found if kind == "fan_failure"} == {"Fan #0x0c", "Fan #0x38"}
    # PS1 lost its AC input (a feed, not a failed PSU), and that explains the Power Unit's lost redundancy
    assert {subject for kind, subject in found if kind.startswith(("psu", "power"))} == {"PS1"}
    assert found[("psu_input_lost", "PS1")] == 2
    # 'Redundancy Lost' and 'Non-Redundant' asserted twice each on fan #0x0c; its deasserts are recoveries
    assert found[("fan_failure", "Fan #0x0c")] == 4
    fan = by_subject(second, "fan_failure")["Fan #0x38"]
    assert fan.detail["events"] == ["Lower Critical going low"]  # 'Lower Non-critical' is a warning, not a failure
    assert of(second, "sel_cleared") == []
    # the same listing again (an agent without a cursor) says nothing new
    assert failures(run(report(after(rest, 10), sel=SelState(entries=entries, entry_count=len(entries))))) == {}


def test_real_csv_ac_lost_then_the_bmc_log_is_cleared() -> None:
    entries = real("ipmi-sel/ipmitool-c-sel-list-intel-psu-ac-lost-redundancy.csv")
    run = Deriver()
    first = run(report(after(entries), sel=SelState(entries=entries, entry_count=len(entries))))
    # AC lost on a PSU is its feed; the redundancy the Power Unit lost follows from it
    assert set(failures(first)) == {("psu_input_lost", "Power Supply #0x51")}
    assert of(first, "sel_cleared") == []
    cleared_at = after(entries, 60)
    reset = sel_entry(1, "Event Logging Disabled", "Log area reset/cleared", name="#0x07", when=cleared_at)
    again = run(report(cleared_at, sel=sel_state(reset, count=1)))
    (signal,) = of(again, "sel_cleared")
    assert signal.detail["reason"] == "record_ids_backwards"
    assert signal.detail["previous_last_record_id"] == max(e.record_id for e in entries)
    failing = sel_entry(2, "Power Supply", "Power Supply AC lost", component="PS1", when=cleared_at)
    assert failures(run(report(after(entries, 70), sel=sel_state(reset, failing, count=2)))) == {
        ("psu_input_lost", "PS1"): 1
    }


def test_real_freeipmi_listing_without_clock_and_a_direction_column() -> None:
    entries = real("ipmi-sel/ipmi-sel-freeipmi-psu-failure-os-stop-postinit.txt")
    run = Deriver()
    first = run(report(after(entries), sel=SelState(entries=entries, entry_count=len(entries))))
    # PostInit entries cannot be placed in time: a first sight counts only the dated ones
    dated = [e for e in entries if e.timestamp is not None and e.event == "Power Supply Failure detected"]
    assert failures(first) == {("psu_failure", "PS2"): len(dated)}
    new = SelEntry.model_validate({**entries[1].model_dump(), "record_id": 7})
    assert failures(run(report(after(entries, 10), sel=SelState(entries=[new], entry_count=7)))) == {
        ("psu_failure", "PS2"): 1
    }


def test_real_uncorrectable_ecc_and_power_unit_failure_with_recoveries() -> None:
    entries = real("ipmi-sel/ipmitool-sel-elist-intel-s2600-uncorrectable-ecc-temp-readings-pcie.txt")
    head = [e for e in entries if e.record_id < 0x2CD]
    rest = [e for e in entries if e.record_id >= 0x2CD]
    run = Deriver()
    run(report(after(head), sel=SelState(entries=head, entry_count=len(head))))
    second = run(report(after(rest), sel=SelState(entries=rest, entry_count=len(entries))))
    ecc = by_subject(second, "sel_memory_ecc")["Mmry ECC Sensor"]
    assert ecc.detail["uncorrectable"] is True
    assert ecc.value == 1
    # the Power Unit failed because PS1 lost its AC input, at the same second: a feed check, no PSU to replace
    assert set(failures(second)) == {("sel_memory_ecc", "Mmry ECC Sensor"), ("psu_input_lost", "PS1")}


def test_real_correctable_ecc_names_the_dimm_and_sel_info_fill_level() -> None:
    entries = real("ipmi-sel/ipmitool-sel-list-correctable-ecc-cpu0-dimm8-chassis-intrusion.txt")
    info = parse_sel_info(sample("ipmi-sel/ipmitool-sel-info-545-entries.txt")).value
    state = SelState(entries=entries, entry_count=info.entry_count, percent_used=info.percent_used)
    run = Deriver()
    run(report(after(entries[:1]) - dt.timedelta(minutes=4), sel=SelState(entries=entries[:1], entry_count=500)))
    signals = run(report(after(entries), sel=state))
    ecc = by_subject(signals, "sel_memory_ecc")["CPU 0 DIMM 8"]
    assert ecc.value == sum(e.event == "Correctable ECC" for e in entries)
    assert ecc.detail["uncorrectable"] is False
    assert info.percent_used is not None
    assert info.percent_used < SEL_FULL_PERCENT
    assert of(signals, "sel_full") == []


# -- built entries -------------------------------------------------------------------------


def test_first_sight_counts_only_recent_history() -> None:
    old = sel_entry(5, "Power Supply", "Failure detected", component="PS1", when=T0 - dt.timedelta(days=400))
    recent = sel_entry(6, "Fan", "Lower Critical going low", component="Fan 2", when=T0 - dt.timedelta(hours=1))
    assert FIRST_SIGHT_LOOKBACK_S < 400 * 86400
    assert failures(Deriver()(report(T0, sel=sel_state(old, recent, count=6)))) == {("fan_failure", "Fan 2"): 1}


def test_deasserted_entries_never_fire() -> None:
    run = Deriver()
    run(report(at(0), sel=sel_state(count=0)))
    signals = run(
        report(
            at(1),
            sel=sel_state(
                sel_entry(1, "Power Supply", "Failure detected", component="PS1", direction="deasserted"),
                sel_entry(2, "Fan", "Redundancy Lost", component="Fan 1", direction="deasserted"),
                sel_entry(3, "Memory", "Uncorrectable ECC", component="DIMM A1", direction="deasserted"),
                count=3,
            ),
        )
    )
    assert failures(signals) == {}


def test_entry_count_dropping_or_the_collector_saying_so_is_a_clear() -> None:
    run = Deriver()
    run(report(at(0), sel=sel_state(sel_entry(40, "OS Boot", "C: boot completed"), count=40)))
    (dropped,) = of(run(report(at(1), sel=sel_state(count=12))), "sel_cleared")
    assert dropped.detail["reason"] == "entry_count_dropped"
    assert of(run(report(at(2), sel=sel_state(count=13))), "sel_cleared") == []
    # a BMC that keeps counting ids after a clear: the collector's flag says what happened
    reset = sel_entry(41, "Event Logging Disabled", "Log area reset/cleared", when=at(3))
    failing = sel_entry(42, "Fan", "Lower Critical going low", component="Fan 4", when=at(3))
    signals = run(report(at(3), sel=sel_state(reset, failing, count=2, cleared=True, last_record_id=42)))
    (told,) = of(signals, "sel_cleared")
    assert told.detail["reason"] == "collector_saw_fewer_entries"
    assert failures(signals) == {("fan_failure", "Fan 4"): 1}


def test_a_clear_entry_among_new_ones_is_a_clear() -> None:
    run = Deriver()
    run(report(at(0), sel=sel_state(sel_entry(7, "OS Boot", "C: boot completed"), count=7)))
    reset = sel_entry(8, "Event Logging Disabled", "Log area reset/cleared", name="SEL Fullness", when=at(1))
    (signal,) = of(run(report(at(1), sel=sel_state(reset, count=8))), "sel_cleared")
    assert signal.detail["reason"] == "log_area_reset"


def test_sel_full_fires_every_report_while_full() -> None:
    run = Deriver()
    assert of(run(report(at(0), sel=sel_state(count=800, percent=SEL_FULL_PERCENT - 1))), "sel_full") == []
    for minute in (1, 2):
        (full,) = of(run(report(at(minute), sel=sel_state(count=950, percent=SEL_FULL_PERCENT + 3))), "sel_full")
        assert full.value == SEL_FULL_PERCENT + 3
    (overflow,) = of(run(report(at(3), sel=sel_state(count=3639, overflow=True))), "sel_full")
    assert overflow.detail["overflow"] is True


def test_failures_on_one_part_are_one_signal_per_part() -> None:
    run = Deriver()
    run(report(at(0), sel=sel_state(count=0)))
    entries = [
        sel_entry(1, "Power Supply", "Power Supply AC lost", component="PS2"),
        sel_entry(2, "Power Supply", "Failure detected", component="PS2"),
        sel_entry(3, "Memory", "Correctable ECC", component="CPU1_DIMM_B2"),
        sel_entry(4, "Memory", "Uncorrectable ECC", component="CPU1_DIMM_B2"),
    ]
    signals = run(report(at(1), sel=sel_state(*entries, count=4)))
    assert failures(signals) == {
        ("psu_input_lost", "PS2"): 1,
        ("psu_failure", "PS2"): 1,
        ("sel_memory_ecc", "CPU1_DIMM_B2"): 2,
    }
    ecc = by_subject(signals, "sel_memory_ecc")["CPU1_DIMM_B2"]
    assert (ecc.detail["uncorrectable"], ecc.detail["uncorrectable_count"], ecc.detail["correctable_count"]) == (
        True,
        1,
        1,
    )


def test_a_lost_redundancy_alone_is_a_power_unit_fault_but_not_after_a_lost_input() -> None:
    run = Deriver()
    run(report(at(0), sel=sel_state(count=0)))
    lost = sel_entry(1, "Power Unit", "Redundancy Lost", name="#0x02", when=at(1))
    assert failures(run(report(at(1), sel=sel_state(lost, count=1)))) == {("power_unit_fault", "Power Unit #0x02"): 1}
    ac = sel_entry(2, "Power Supply", "Power Supply AC lost", component="PS1", when=at(2))
    assert failures(run(report(at(2), sel=sel_state(ac, count=2)))) == {("psu_input_lost", "PS1"): 1}
    again = sel_entry(3, "Power Unit", "Non-Redundant: Sufficient from Redundant", name="#0x02", when=at(30))
    assert failures(run(report(at(30), sel=sel_state(again, count=3)))) == {}  # explained by the lost input
    later = sel_entry(4, "Power Unit", "Redundancy Lost", name="#0x02", when=at(120))
    assert failures(run(report(at(120), sel=sel_state(later, count=4)))) == {
        ("power_unit_fault", "Power Unit #0x02"): 1
    }


def flood(first_id: int, count: int, start: dt.datetime, every: dt.timedelta) -> list[SelEntry]:
    return [
        sel_entry(first_id + i, "Critical Interrupt", "", name="PCIe Cor Sensor", when=start + i * every)
        for i in range(count)
    ]


def test_a_sensor_flooding_the_sel_is_named_and_a_full_log_says_it_was_flooded() -> None:
    """The PCIe correctable-error sensor of the real Intel S2600 listing, logging every minute."""
    real_listing = real("ipmi-sel/ipmitool-sel-elist-intel-s2600-uncorrectable-ecc-temp-readings-pcie.txt")
    sensor = next(sensor_of(e) for e in real_listing if "PCIe" in e.sensor_name)
    run = Deriver()
    run(report(at(0), sel=sel_state(count=900, percent=88)))
    quiet = run(report(at(30), sel=sel_state(*flood(901, 20, at(1), dt.timedelta(minutes=1)), count=920, percent=89)))
    assert of(quiet, "sel_flood") == []  # 20 a day is noise, not a flood
    loud = run(report(at(70), sel=sel_state(*flood(921, 40, at(31), dt.timedelta(minutes=1)), count=960, percent=94)))
    (signal,) = of(loud, "sel_flood")
    assert (signal.subject, signal.value) == (sensor, 60)
    (full,) = of(loud, "sel_full")
    assert full.detail["flooding"] is True
    assert full.detail["flooded_by"] == [sensor]
    # full and silent (the BMC logs nothing more): the flood is remembered for a week
    (still,) = of(run(report(at(60 * 24 * 3), sel=sel_state(count=1024, overflow=True))), "sel_full")
    assert still.detail["flooding"] is True
    (later,) = of(run(report(at(60 * 24 * 8), sel=sel_state(count=1024, overflow=True))), "sel_full")
    assert later.detail["flooding"] is False


def test_a_full_log_of_ordinary_history_is_not_flooded() -> None:
    run = Deriver()
    run(report(at(0), sel=sel_state(count=900, percent=88)))
    boots = [sel_entry(901 + i, "System Event", "OEM System boot event", when=at(i * 60)) for i in range(10)]
    (full,) = of(run(report(at(700), sel=sel_state(*boots, count=1000, percent=97))), "sel_full")
    assert (full.detail["flooding"], full.detail["flooded_by"]) == (False, [])
