"""Signals from the Redfish section (remediator/derive/redfish.py), on the real samples parsed by the agent's
parsers and on modules built around them, through derive()."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from bench.samples import sample
from checker.parsers.redfish_inventory import (
    firmware_from_collection_id,
    parse_collection_links,
    parse_memory,
    parse_memory_metrics_alone,
)
from checker.parsers.redfish_sensors import parse_power
from checker.report_types import CollectorRun, CollectorStatus
from checker.schemas import (
    EdacController,
    EdacState,
    RedfishMemoryModule,
    RedfishPsu,
    RedfishRedundancy,
    RedfishState,
    SelState,
    SensorReading,
)
from remediator.derive.redfish import EDAC_RULE_FLOOR, EDAC_SHARE, MAX_DIMMS
from remediator.signals import MAX_GAP_S, SignalValue
from tests.builders.observations import (
    Deriver,
    at,
    by_subject,
    event,
    identity,
    kernel_log,
    of,
    report,
    sel_entry,
    sel_state,
)

SERVICE = "https://bmc.example"
DIMM_KINDS = ("bmc_dimm_ce_rate", "bmc_dimm_uncorrectable", "bmc_dimm_ce_alarm")


def doc(name: str) -> Any:
    return json.loads(sample(f"redfish/{name}"))


def supermicro_dimm(**counts: Any) -> RedfishMemoryModule:
    """The X10SDV's DIMMB1 as served, with the MemoryMetrics counts the scenario needs (its BMC serves none)."""
    module = parse_memory(doc("supermicro-x10sdv-memory-dimmb1-health-ok.json")).value
    assert module is not None
    return module.model_copy(update={"metrics_read": True, **counts})


def dell_dimm(**trips: bool) -> RedfishMemoryModule:
    metrics = doc("dell-idrac9-r650-memorymetrics-dimm-a1-alarmtrips-only-no-counts.json")
    metrics["HealthData"]["AlarmTrips"].update(trips)
    module = parse_memory(doc("dell-idrac9-r650-memory-dimm-socket-a1-no-memorylocation.json"), metrics).value
    assert module is not None
    return module


def state(memory: list[RedfishMemoryModule] | None = None, **fields: Any) -> RedfishState:
    return RedfishState(service=SERVICE, memory=memory, **fields)


def edac_ce(total: int, ue: int = 0) -> EdacState:
    return EdacState(controllers=[EdacController(mc=0, ce_count=total, ue_count=ue)])


def dimm_signals(signals: list[SignalValue]) -> list[SignalValue]:
    return [s for s in signals if s.kind in DIMM_KINDS]


# -- the BMC's CE count per DIMM ---------------------------------------------------------------------


def test_a_dimm_count_is_a_rate_between_reads_with_the_dimm_named_and_first_sight_records_only() -> None:
    run = Deriver()
    assert dimm_signals(run(report(at(0), redfish=state([supermicro_dimm(ce_lifetime=100)])))) == []
    # the inventory is re-read hourly: between reads the section has no memory and nothing is lost
    assert dimm_signals(run(report(at(30), redfish=state(None)))) == []
    (rate,) = of(run(report(at(60), redfish=state([supermicro_dimm(ce_lifetime=100 + 7200)]))), "bmc_dimm_ce_rate")
    assert rate.subject == "DIMMB1"
    assert rate.value == 7200 / 3600
    detail = rate.detail
    assert (detail["delta"], detail["elapsed_s"], detail["count"], detail["counter"]) == (
        7200,
        3600.0,
        7300,
        "lifetime",
    )
    # where the BMC says it is, with the base it counts from, and what it is
    assert (detail["socket"], detail["memory_controller"], detail["channel"], detail["slot"]) == (0, 0, 1, 0)
    assert (detail["location_base"], detail["serial"], detail["device_locator"]) == (0, "16E1FD2E", "DIMMB1")
    # no EDAC section at either read: the BMC's count is the only one
    assert (detail["edac"], detail["edac_delta"], detail["edac_under_reports"]) == ("absent", None, True)


def test_a_count_going_backwards_is_a_reset_not_a_negative_rate() -> None:
    run = Deriver()
    run(report(at(0), redfish=state([supermicro_dimm(ce_lifetime=5000)])))
    assert dimm_signals(run(report(at(60), redfish=state([supermicro_dimm(ce_lifetime=3)])))) == []
    (rate,) = of(run(report(at(120), redfish=state([supermicro_dimm(ce_lifetime=3 + 360)]))), "bmc_dimm_ce_rate")
    assert rate.value == 360 / 3600  # from the new baseline


def test_current_period_counts_when_no_lifetime_and_a_switch_of_counter_restarts() -> None:
    run = Deriver()
    run(report(at(0), redfish=state([supermicro_dimm(ce_current_period=10)])))
    (rate,) = of(run(report(at(60), redfish=state([supermicro_dimm(ce_current_period=3610)]))), "bmc_dimm_ce_rate")
    assert (rate.value, rate.detail["counter"]) == (1.0, "current_period")
    # the BMC starts serving LifeTime: another counter, a first sight
    assert dimm_signals(run(report(at(120), redfish=state([supermicro_dimm(ce_lifetime=9000)])))) == []


def test_reads_too_far_apart_give_no_rate() -> None:
    run = Deriver()
    run(report(at(0), redfish=state([supermicro_dimm(ce_lifetime=0)])))
    later = at(MAX_GAP_S / 60 + 60)
    assert dimm_signals(run(report(later, redfish=state([supermicro_dimm(ce_lifetime=999_999)])))) == []


def test_edac_counting_as_much_is_not_under_reporting_and_counting_less_is() -> None:
    run = Deriver()
    run(report(at(0), redfish=state([supermicro_dimm(ce_lifetime=0)]), edac=edac_ce(1000)))
    (seen,) = of(
        run(report(at(60), redfish=state([supermicro_dimm(ce_lifetime=4000)]), edac=edac_ce(1000 + 3900))),
        "bmc_dimm_ce_rate",
    )
    assert (seen.detail["edac"], seen.detail["edac_delta"], seen.detail["edac_under_reports"]) == (
        "counted",
        3900,
        False,
    )
    # less than half, but EDAC itself counted 0.55 CE/s host-wide: the EDAC rules (from 0.05 CE/s, dimm-ce-ppr)
    # judge the DIMM, so the BMC's count is not a second ticket's (the review of the Redfish rules, finding 4)
    under = int(4000 * EDAC_SHARE) - 1
    (busy,) = of(
        run(report(at(120), redfish=state([supermicro_dimm(ce_lifetime=8000)]), edac=edac_ce(4900 + under))),
        "bmc_dimm_ce_rate",
    )
    assert (busy.detail["edac_delta"], busy.detail["edac_rate"], busy.detail["edac_under_reports"]) == (
        under,
        round(under / 3600, 6),
        False,
    )
    # less than half and below EDAC_RULE_FLOOR host-wide (100 in an hour: 0.028 CE/s): no EDAC rule can fire
    slow = 100
    (missed,) = of(
        run(report(at(180), redfish=state([supermicro_dimm(ce_lifetime=12000)]), edac=edac_ce(4900 + under + slow))),
        "bmc_dimm_ce_rate",
    )
    assert slow / 3600 < EDAC_RULE_FLOOR
    assert (missed.detail["edac_delta"], missed.detail["edac_under_reports"]) == (slow, True)
    # EDAC's counters restarted (a reboot): no comparison, so no claim either way
    (unknown,) = of(
        run(report(at(240), boot="boot-2", redfish=state([supermicro_dimm(ce_lifetime=16000)]), edac=edac_ce(0))),
        "bmc_dimm_ce_rate",
    )
    assert unknown.detail["edac_under_reports"] is None


def test_a_swapped_dimm_or_a_restart_without_edac_starts_a_new_baseline() -> None:
    """The reviewer's probe_dimm case 1: the old DIMM erred, was swapped during a restart, and the BMC's count
    of the slot carried on: no rate may be pinned on the new DIMM (its serial differs), nor on a host without
    EDAC across a restart; the next read after is a rate again."""
    run = Deriver()
    run(report(at(0), redfish=state([supermicro_dimm(ce_lifetime=5000, serial="OLD")])))
    swapped = run(report(at(60), boot="boot-2", redfish=state([supermicro_dimm(ce_lifetime=17000, serial="NEW")])))
    assert dimm_signals(swapped) == []
    (rate,) = of(
        run(report(at(120), boot="boot-2", redfish=state([supermicro_dimm(ce_lifetime=17360, serial="NEW")]))),
        "bmc_dimm_ce_rate",
    )
    assert (rate.value, rate.detail["serial"]) == (0.1, "NEW")
    # the same serial across a restart, no EDAC: nothing tells the errors before it from after, a baseline
    assert (
        dimm_signals(
            run(report(at(180), boot="boot-3", redfish=state([supermicro_dimm(ce_lifetime=30000, serial="NEW")])))
        )
        == []
    )
    # a serial change without a restart is another DIMM too
    assert (
        dimm_signals(
            run(report(at(240), boot="boot-3", redfish=state([supermicro_dimm(ce_lifetime=40000, serial="THIRD")])))
        )
        == []
    )
    assert run.memory["redfish"]["dimms"]["1/Memory/3"][3] == "THIRD"


def test_memory_kept_before_serials_were_stored_still_gives_a_rate() -> None:
    run = Deriver()
    run(report(at(0), redfish=state([supermicro_dimm(ce_lifetime=0)])))
    run.memory["redfish"]["dimms"] = {k: v[:3] for k, v in run.memory["redfish"]["dimms"].items()}
    (rate,) = of(run(report(at(60), redfish=state([supermicro_dimm(ce_lifetime=3600)]))), "bmc_dimm_ce_rate")
    assert rate.value == 1.0


def test_a_failed_edac_collector_is_not_a_host_without_edac() -> None:
    """The review's note 11: no EDAC section because its collector failed is 'not comparable', not 'absent'."""
    failed = {"edac": CollectorRun(status=CollectorStatus.error, duration_ms=1.0, reason="parse error")}
    run = Deriver()
    run(report(at(0), redfish=state([supermicro_dimm(ce_lifetime=0)])).model_copy(update={"collectors": failed}))
    grown = report(at(60), redfish=state([supermicro_dimm(ce_lifetime=7200)]))
    (rate,) = of(run(grown.model_copy(update={"collectors": failed})), "bmc_dimm_ce_rate")
    assert (rate.detail["edac"], rate.detail["edac_under_reports"]) == ("collector failed", None)
    alarmed = report(at(120), redfish=state([dell_dimm(UncorrectableECCError=True)]))
    (alarm,) = of(run(alarmed.model_copy(update={"collectors": failed})), "bmc_dimm_uncorrectable")
    assert alarm.detail["edac_silent"] is None
    # 'unavailable' (no EDAC driver here) is a host without EDAC
    absent = {"edac": CollectorRun(status=CollectorStatus.unavailable, duration_ms=1.0, reason="no EDAC")}
    other = Deriver()
    other(report(at(0), redfish=state([supermicro_dimm(ce_lifetime=0)])).model_copy(update={"collectors": absent}))
    (seen,) = of(other(grown.model_copy(update={"collectors": absent})), "bmc_dimm_ce_rate")
    assert (seen.detail["edac"], seen.detail["edac_under_reports"]) == ("absent", True)


def test_uncorrectable_count_rising_is_a_signal() -> None:
    run = Deriver()
    run(report(at(0), redfish=state([supermicro_dimm(ce_lifetime=0, ue_lifetime=2)])))
    (ue,) = of(
        run(report(at(60), redfish=state([supermicro_dimm(ce_lifetime=0, ue_lifetime=3)]))), "bmc_dimm_uncorrectable"
    )
    assert (ue.subject, ue.value, ue.detail["edac_silent"]) == ("DIMMB1", 1.0, True)


# -- alarm flags only (iDRAC) -------------------------------------------------------------------------


def test_alarm_flags_false_are_not_zero_errors_and_true_is_a_signal() -> None:
    run = Deriver()
    healthy = dell_dimm()
    assert healthy.ce_lifetime is None
    assert healthy.alarm_trips["CorrectableECCError"] is False
    assert dimm_signals(run(report(at(0), redfish=state([healthy])))) == []
    assert run.memory["redfish"]["dimms"] == {}  # no count: nothing to keep, never a 0
    signals = run(report(at(60), redfish=state([dell_dimm(CorrectableECCError=True)]), edac=edac_ce(0)))
    (alarm,) = dimm_signals(signals)
    assert (alarm.kind, alarm.subject, alarm.detail["alarm"]) == ("bmc_dimm_ce_alarm", "DIMM A1", "CorrectableECCError")
    assert alarm.detail["location_source"] == "oem_hint"  # Dell serves no MemoryLocation
    assert alarm.detail["edac_silent"] is True
    # still set at the next hourly read of the same boot: the same trip, said once (review note 12)
    assert (
        dimm_signals(run(report(at(120), redfish=state([dell_dimm(CorrectableECCError=True)]), edac=edac_ce(5)))) == []
    )
    (ue,) = dimm_signals(run(report(at(180), redfish=state([dell_dimm(UncorrectableECCError=True)]), edac=edac_ce(5))))
    assert (ue.kind, ue.detail["edac_silent"]) == ("bmc_dimm_uncorrectable", True)
    # where EDAC counts correctable errors, the flag is a second opinion
    other = Deriver()
    (counted,) = dimm_signals(
        other(report(at(120), redfish=state([dell_dimm(CorrectableECCError=True)]), edac=edac_ce(5)))
    )
    assert counted.detail["edac_silent"] is False


def test_an_alarm_is_said_when_it_turns_true_once_a_boot() -> None:
    run = Deriver()
    tripped = state([dell_dimm(CorrectableECCError=True)])
    assert len(dimm_signals(run(report(at(0), redfish=tripped)))) == 1
    assert dimm_signals(run(report(at(60), redfish=tripped))) == []  # a level, not a new trip
    assert dimm_signals(run(report(at(90), redfish=state(None)))) == []  # between inventory reads
    assert dimm_signals(run(report(at(120), redfish=state([dell_dimm()])))) == []  # cleared
    assert len(dimm_signals(run(report(at(180), redfish=tripped)))) == 1  # false -> true: a new trip
    # a reset clears AlarmTrips (DMTF): set again after a reboot is a new trip
    assert len(dimm_signals(run(report(at(240), boot="boot-2", redfish=tripped)))) == 1


def test_gpu_hbm_counts_are_never_a_dimm() -> None:
    hbm = parse_memory_metrics_alone(doc("supermicro-gb300-hgx-gpu0-hbm-memorymetrics-lifetime-ecc-row-remapping.json"))
    module = hbm.value
    assert module is not None
    assert (module.kind, module.ce_lifetime) == ("gpu_hbm", 0)
    run = Deriver()
    run(report(at(0), redfish=state([module])))
    grown = module.model_copy(
        update={"ce_lifetime": 90000, "ue_lifetime": 4, "alarm_trips": {"UncorrectableECCError": True}}
    )
    assert dimm_signals(run(report(at(60), redfish=state([grown])))) == []


def test_dimm_memory_is_bounded() -> None:
    run = Deriver()
    base = supermicro_dimm(ce_lifetime=1)
    many = [base.model_copy(update={"uri": f"/redfish/v1/Systems/1/Memory/{i}", "id": str(i)}) for i in range(200)]
    run(report(at(0), redfish=state(many)))
    assert len(run.memory["redfish"]["dimms"]) == MAX_DIMMS
    long = [base.model_copy(update={"uri": f"/redfish/v1/Systems/{'S' * 200}/Memory/{i}"}) for i in range(200)]
    run(report(at(60), redfish=state(long)))
    assert len(run.memory["redfish"]["dimms"]) == MAX_DIMMS  # told apart by their URIs' ends
    assert len(json.dumps(run.memory["redfish"])) < 14_000  # keys cut to MAX_KEY characters


# -- PSUs and redundancy -----------------------------------------------------------------------------


def power(name: str) -> RedfishState:
    parsed = parse_power(doc(name)).value
    return state(psus=parsed.psus, redundancy=parsed.redundancy)


POWER_KINDS = ("psu_failure", "psu_input_lost", "power_unit_fault", "bmc_psu_unhealthy", "fan_failure")


def test_empty_bays_and_implausible_voltages_are_not_failures() -> None:
    run = Deriver()
    hpe = run(report(at(0), redfish=power("hpe-ilo5-xl675d-gen10plus-a40-power-empty-bays-absent-warning.json")))
    assert [s for s in hpe if s.kind in POWER_KINDS] == []  # bays 1 and 6: Absent with Health Warning
    # 572 V and 13 V on two healthy PSUs, redundancy Disabled (not in force): nothing lost
    intel = run(report(at(1), redfish=power("intel-s2600bpb-power-psu-lineinputvoltage-572-and-13.json")))
    assert [s for s in intel if s.kind in POWER_KINDS] == []


def test_a_critical_psu_is_a_psu_failure_and_explains_the_lost_redundancy() -> None:
    hpe = power("hpe-ilo5-xl675d-gen10plus-a40-power-empty-bays-absent-warning.json")
    psus = [p.model_copy(update={"health": "Critical"}) if p.bay == 3 else p for p in hpe.psus]
    lost = RedfishRedundancy(name="PSU Redundancy", of="psu", mode="N+m", health="Critical", state="Enabled")
    signals = Deriver()(report(at(0), redfish=hpe.model_copy(update={"psus": psus, "redundancy": [lost]})))
    (failed,) = of(signals, "psu_failure")
    assert (failed.subject, failed.detail["serial"], failed.detail["source"]) == ("PS3", "5WWQV0B5NEL17S", "redfish")
    assert of(signals, "power_unit_fault") == []
    assert of(signals, "psu_input_lost") == []
    # Critical without an input reading may be a lost input (a feed): no PSU to replace from the section
    unread = [p.model_copy(update={"line_input_voltage": None}) if p.bay == 3 else p for p in psus]
    quiet = Deriver()(report(at(0), redfish=hpe.model_copy(update={"psus": unread})))
    assert of(quiet, "psu_failure") == []
    assert [(s.subject, s.detail["health"]) for s in of(quiet, "bmc_psu_unhealthy")] == [("PS3", "Critical")]


def test_a_critical_psu_reading_zero_volts_lost_its_input_and_is_no_psu_to_replace() -> None:
    """The reviewer's probe_psu: PS2 Critical with LineInputVoltage 0 is a PSU on a failed feed (domain.md),
    so no psu_failure ("Replace power supply PS2") and the lost redundancy is not explained by it."""
    parsed = parse_power(
        {
            "PowerSupplies": [
                {"MemberId": "PSU.Slot.1", "Name": "PS1 Status", "Status": {"Health": "OK"}, "LineInputVoltage": 230},
                {
                    "MemberId": "PSU.Slot.2",
                    "Name": "PS2 Status",
                    "Status": {"Health": "Critical"},
                    "LineInputVoltage": 0,
                },
            ],
            "Redundancy": [
                {"Name": "PS Redundancy", "Mode": "N+m", "Status": {"Health": "Critical", "State": "Enabled"}}
            ],
        }
    ).value
    signals = Deriver()(report(at(0), redfish=state(psus=parsed.psus, redundancy=parsed.redundancy)))
    assert of(signals, "psu_failure") == []
    (unhealthy,) = of(signals, "bmc_psu_unhealthy")
    assert (unhealthy.subject, unhealthy.detail["line_input_voltage"], unhealthy.detail["input_lost"]) == (
        "PS2",
        0,
        True,
    )
    (unit,) = of(signals, "power_unit_fault")  # the power ticket: check its PSUs and feeds, naming PS2
    assert unit.detail["psu"] == "PS2"
    # the same PSU with input (230 V) is the failed part
    live = [p.model_copy(update={"line_input_voltage": 230.0}) for p in parsed.psus]
    failed = Deriver()(report(at(0), redfish=state(psus=live, redundancy=parsed.redundancy)))
    assert [(s.subject, s.detail["input_lost"]) for s in of(failed, "psu_failure")] == [("PS2", False)]
    assert of(failed, "power_unit_fault") == []


def test_lost_redundancy_alone_names_the_psus_and_a_disabled_one_is_not_lost() -> None:
    psus = [
        RedfishPsu(member_id="PSU.Slot.1", present=True, health="OK"),
        RedfishPsu(member_id="PSU.Slot.2", present=True, health="Warning"),
    ]
    lost = RedfishRedundancy(name="System Board PS Redundancy", of="psu", health="Warning", state="Enabled")
    fans_lost = RedfishRedundancy(name="System Board Fan Redundancy", of="fan", health="Critical", state="Enabled")
    signals = Deriver()(report(at(0), redfish=state(psus=psus, redundancy=[lost, fans_lost])))
    (unit,) = of(signals, "power_unit_fault")
    assert (unit.subject, unit.detail["psu"], unit.detail["ambiguous"]) == ("System Board PS Redundancy", "PS2", False)
    assert [s.subject for s in of(signals, "bmc_psu_unhealthy")] == ["PS2"]
    assert of(signals, "fan_failure") == []  # the group is no fan to replace (review finding 9)
    (group,) = of(signals, "fan_redundancy_lost")
    assert (group.subject, group.detail["ambiguous"], group.detail["fan"]) == (
        "System Board Fan Redundancy",
        True,
        "a fan the BMC does not name",
    )
    # the fans the sensors read: the one below its lower critical threshold is the candidate
    fans = [
        SensorReading(name="Fan1A", kind="fan", status="ok", reading=9000, thresholds={"lcr": 600}),
        SensorReading(name="Fan2A", kind="fan", status="ok", reading=300, thresholds={"lcr": 600}),
    ]
    named = of(Deriver()(report(at(0), redfish=state(redundancy=[fans_lost]), sensors=fans)), "fan_redundancy_lost")
    assert [(s.detail["fan"], s.detail["ambiguous"]) for s in named] == [("Fan2A", False)]
    healthy = [f.model_copy(update={"reading": 9000.0}) for f in fans]
    (every,) = of(
        Deriver()(report(at(0), redfish=state(redundancy=[fans_lost]), sensors=healthy)), "fan_redundancy_lost"
    )
    assert (every.detail["fan"], every.detail["ambiguous"]) == ("one of Fan1A, Fan2A", True)
    disabled = lost.model_copy(update={"state": "Disabled"})
    assert of(Deriver()(report(at(0), redfish=state(psus=psus, redundancy=[disabled]))), "power_unit_fault") == []


def test_a_lost_input_in_the_log_explains_the_lost_redundancy() -> None:
    lost = RedfishRedundancy(name="PSU Redundancy", of="psu", health="Warning", state="Enabled")
    run = Deriver()
    run(report(at(0), sel=sel_state(count=0)))
    ac = sel_entry(1, "Power Supply", "Power Supply AC lost", component="PS1", when=at(1))
    signals = run(report(at(1), sel=sel_state(ac, count=1), redfish=state(redundancy=[lost])))
    assert [s.subject for s in of(signals, "psu_input_lost")] == ["PS1"]
    assert of(signals, "power_unit_fault") == []
    # still within the hour the SEL deriver lets a lost input explain it
    assert of(run(report(at(30), sel=sel_state(count=1), redfish=state(redundancy=[lost]))), "power_unit_fault") == []
    assert (
        len(of(run(report(at(120), sel=sel_state(count=1), redfish=state(redundancy=[lost]))), "power_unit_fault")) == 1
    )


def test_a_lost_input_explains_the_lost_redundancy_while_its_psu_stays_unwell() -> None:
    """The reviewer's probe_pu: 'AC lost PS1' at minute 1, the feed still down an hour later: no second,
    power-unit ticket from minute 62; once PS1 is OK again a redundancy still lost is a fault of its own."""
    lost = RedfishRedundancy(name="PSU Redundancy", of="psu", health="Warning", state="Enabled")
    down = [
        RedfishPsu(member_id="0", bay=1, present=True, health="Warning"),
        RedfishPsu(member_id="1", bay=2, present=True, health="OK", line_input_voltage=230),
    ]
    run = Deriver()
    run(report(at(0), sel=sel_state(count=0)))
    ac = sel_entry(1, "Power Supply", "Power Supply AC lost", component="PS1", when=at(1))
    first = run(report(at(1), sel=sel_state(ac, count=1), redfish=state(psus=down, redundancy=[lost])))
    assert [s.subject for s in of(first, "psu_input_lost")] == ["PS1"]
    for minute in (30, 62, 90, 180):
        signals = run(report(at(minute), sel=sel_state(count=1), redfish=state(psus=down, redundancy=[lost])))
        assert of(signals, "power_unit_fault") == [], minute
    back = [p.model_copy(update={"health": "OK"}) for p in down]
    (fault,) = of(
        run(report(at(200), sel=sel_state(count=1), redfish=state(psus=back, redundancy=[lost]))), "power_unit_fault"
    )
    assert fault.detail["ambiguous"] is True
    # and the explanation is not kept once PS1 was OK
    again = run(report(at(210), sel=sel_state(count=1), redfish=state(psus=down, redundancy=[lost])))
    assert len(of(again, "power_unit_fault")) == 1


# -- firmware inventory ------------------------------------------------------------------------------


def dell_firmware() -> RedfishState:
    links = parse_collection_links(doc("dell-idrac9-r650-firmwareinventory-collection-installed-current-previous.json"))
    found = [f for f in (firmware_from_collection_id(uri) for uri in links.value) if f is not None]
    return state(firmware=found)


def test_redfish_firmware_fills_in_what_the_host_did_not_read_and_the_host_wins() -> None:
    run = Deriver()  # class compute-skx-2s: BIOS 2.10.2, BMC 4.40.40.40 (remediator/firmware_baselines.yaml)
    signals = run(report(at(0), redfish=dell_firmware()))
    below = by_subject(signals, "firmware_below_baseline")
    assert set(below) == {"bios"}  # BIOS 1.2.4; the BMC runs 5.10.00.00 (its Previous- 5.00.20.10 is not running)
    assert (below["bios"].detail["current"], below["bios"].detail["source"]) == ("1.2.4", "redfish")
    # kept between inventory reads
    assert set(by_subject(run(report(at(30), redfish=state())), "firmware_below_baseline")) == {"bios"}
    # the host's own reading (dmidecode) wins
    own = identity()
    own.firmware.bios_version = "2.10.2"
    assert by_subject(run(report(at(60), redfish=dell_firmware(), identity=own)), "firmware_below_baseline") == {}


# -- the log's new kinds, on the real Redfish samples and the ipmitool ones --------------------------


def redfish_log(name: str) -> SelState:
    from checker.parsers.redfish_log import parse_log_entries

    entries = parse_log_entries(doc(name)).value
    return SelState(entries=entries, entry_count=len(entries))


def first_sight_at(sel: SelState) -> dt.datetime:
    return max(e.timestamp for e in sel.entries if e.timestamp is not None) + dt.timedelta(minutes=5)


def test_temperature_past_upper_critical_in_the_dmtf_log() -> None:
    sel = redfish_log("dmtf-public-rackmount1-log1-entries-sel-temperature-upper-critical-mockup.json")
    signals = Deriver()(report(first_sight_at(sel), sel=sel))
    hot = by_subject(signals, "sel_temperature_high")
    assert set(hot) == {"Temperature #0x01", "Temperature #0x02"}
    assert hot["Temperature #0x01"].detail["level"] == "upper_cr"


def test_chassis_intrusion_is_recorded_and_closing_is_not() -> None:
    sel = redfish_log("dell-idrac9-r650-sel-entries-chassis-intrusion-post-critical-log-cleared.json")
    run = Deriver()
    run(report(min(e.timestamp for e in sel.entries if e.timestamp is not None), sel=sel_state(count=0)))
    signals = run(report(first_sight_at(sel), sel=sel))  # every entry new after an empty log
    (opened,) = of(signals, "chassis_intrusion")
    assert opened.value == 5  # five 'open' assertions; the five 'closed' deassertions are not
    # POST and Front LED Panel 'Critical' entries are not hardware kinds the centre judges
    assert of(signals, "sel_critical_interrupt") == []
    assert of(signals, "sel_temperature_high") == []


def test_ipmitool_listing_keeps_its_kinds_lower_temperatures_and_correctable_pcie_are_nothing() -> None:
    from checker.parsers.ipmi_sel import parse_sel

    entries = parse_sel(
        sample("ipmi-sel/ipmitool-sel-elist-intel-s2600-uncorrectable-ecc-temp-readings-pcie.txt")
    ).value
    when = max(e.timestamp for e in entries if e.timestamp is not None) + dt.timedelta(minutes=5)
    run = Deriver()
    run(report(min(e.timestamp for e in entries if e.timestamp is not None), sel=sel_state(count=0)))
    signals = run(report(when, sel=SelState(entries=entries, entry_count=len(entries))))
    kinds = {s.kind for s in signals if s.kind.startswith(("sel_", "psu_", "power_", "chassis"))}
    # SSB Temp 'Lower Critical going low' is cold, 'PCIe Cor Sensor' is correctable: neither is a new kind here
    assert kinds == {"sel_memory_ecc", "psu_input_lost"}


def test_fatal_critical_interrupts_only() -> None:
    run = Deriver()
    run(report(at(0), sel=sel_state(count=0)))
    entries = [
        sel_entry(1, "Critical Interrupt", "PCI SERR", name="PCI SERR Sensor", when=at(1)),
        sel_entry(2, "Critical Interrupt", "Bus Uncorrectable error", name="BUS Sensor", when=at(1)),
        sel_entry(3, "Critical Interrupt", "Bus Correctable error", name="PCIe Cor Sensor", when=at(1)),
        sel_entry(4, "Critical Interrupt", "NMI/Diag Interrupt", name="Front NMI", when=at(1)),
        sel_entry(5, "Critical Interrupt", "PCI SERR", name="PCI SERR Sensor", direction="deasserted", when=at(1)),
    ]
    signals = run(report(at(1), sel=sel_state(*entries, count=5)))
    fatal = by_subject(signals, "sel_critical_interrupt")
    assert {s: v.value for s, v in fatal.items()} == {"PCI SERR Sensor": 1, "BUS Sensor": 1}


def test_sel_memory_signals_say_whether_edac_counted() -> None:
    run = Deriver()
    run(report(at(0), sel=sel_state(count=0)))
    ce = sel_entry(1, "Memory", "Correctable ECC", component="DIMMB1", when=at(1))
    (silent,) = of(run(report(at(1), sel=sel_state(ce, count=1))), "sel_memory_ecc")
    assert silent.detail["edac_silent"] is True
    more = sel_entry(2, "Memory", "Correctable ECC", component="DIMMB1", when=at(2))
    (counted,) = of(run(report(at(2), sel=sel_state(more, count=2), edac=edac_ce(12))), "sel_memory_ecc")
    assert (counted.detail["edac_silent"], counted.detail["edac_counted"]) == (False, 12)


def test_redfish_readings_reach_the_sensor_rules_and_absent_zeros_do_not() -> None:
    from checker.parsers.redfish_sensors import parse_thermal

    absent = parse_thermal(doc("supermicro-x10sdv-thermal-all-sensors-absent-zero-readings.json")).value
    dell = parse_thermal(doc("dell-idrac9-r650-thermal-healthy-16-fans-redundancy.json")).value
    run = Deriver()
    # every X10SDV sensor Absent with reading 0 and thresholds 0: not a stopped fan or 0 degC
    assert of(run(report(at(0), sensors=absent.readings)), "sensor_critical") == []
    assert of(run(report(at(1), sensors=dell.readings)), "sensor_critical") == []  # all OK, as served
    # the R650's inlet past the upper critical threshold it publishes (42), as the BMC would serve it
    served = doc("dell-idrac9-r650-thermal-healthy-16-fans-redundancy.json")
    inlet_doc = next(t for t in served["Temperatures"] if "Inlet" in t["Name"])
    inlet_doc.update(ReadingCelsius=45, Status={"Health": "Critical", "State": "Enabled"})
    hot = parse_thermal(served).value.readings
    (inlet,) = of(run(report(at(2), sensors=hot)), "sensor_critical")
    assert (inlet.detail["direction"], inlet.detail["thresholds"]["ucr"]) == ("upper", 42.0)


def test_psus_are_named_as_the_log_names_them() -> None:
    from remediator.derive.redfish_power import psu_name

    intel = parse_power(doc("intel-s2600bpb-power-psu-lineinputvoltage-572-and-13.json")).value
    hpe = parse_power(doc("hpe-ilo5-xl675d-gen10plus-a40-power-empty-bays-absent-warning.json")).value
    # Intel: no bay and a bare MemberId (from 0): its name and id, as its status sensor is named
    assert [psu_name(p.member_id, p.bay, p.name) for p in intel.psus] == ["Power Supply Bay 0", "Power Supply Bay 1"]
    assert {f"{psu_name(p.member_id, p.bay, p.name)} Status" for p in intel.psus} <= {r.name for r in intel.readings}
    # HPE: the bay (Oem.Hpe.BayNumber), never the MemberId 0-5
    assert [psu_name(p.member_id, p.bay, p.name) for p in hpe.psus] == [f"PS{n}" for n in range(1, 7)]
    assert (psu_name("PSU.Slot.2", None, None), psu_name("1", None, "PS2 Status")) == ("PS2", "PS2")


def test_the_dell_logs_dimm_is_keyed_by_its_device_locator() -> None:
    """Review finding 8: Dell's log names DIMM_A1, its R650 DeviceLocator is 'DIMM A1'; one DIMM, one subject
    (so sel-memory-uncorrectable and bmc-dimm-uncorrectable are one part, not two tickets)."""
    run = Deriver()
    run(report(at(0), sel=sel_state(count=0), redfish=state([dell_dimm()])))
    ue = sel_entry(1, "Memory", "Uncorrectable ECC", component="DIMM_A1", when=at(1))
    (logged,) = of(run(report(at(1), sel=sel_state(ue, count=1), redfish=state())), "sel_memory_ecc")
    assert (logged.subject, logged.detail["log_name"], logged.detail["uncorrectable"]) == ("DIMM A1", "DIMM_A1", True)
    # a name no DIMM of this BMC is spelled like stays the log's
    other = sel_entry(2, "Memory", "Uncorrectable ECC", component="DIMM_B7", when=at(2))
    (kept,) = of(run(report(at(2), sel=sel_state(other, count=2), redfish=state())), "sel_memory_ecc")
    assert (kept.subject, "log_name" in kept.detail) == ("DIMM_B7", False)


def test_critical_interrupts_say_uncorrectable_or_fatal_name_the_function_and_defer_to_the_os_aer() -> None:
    """Review finding 10: PERR, SERR, I/O channel check and Bus Uncorrectable are 'uncorrectable' (not
    necessarily fatal); Dell's wordings match; the bus/device/function become candidates; an uncorrected AER
    the kernel logged within the hour makes it the device's ticket (os_saw_aer)."""
    run = Deriver()
    run(report(at(0), sel=sel_state(count=0)))
    entries = [
        sel_entry(
            1, "Critical Interrupt", "PCI SERR detected on bus 0x3a device 0x00 function 0x1", name="SERR", when=at(1)
        ),
        sel_entry(
            2,
            "Critical Interrupt",
            "A fatal error was detected on a component at bus 59 device 0 function 0.",
            name="PCIe Fatal",
            when=at(1),
        ),
        sel_entry(3, "Critical Interrupt", "I/O channel check error", name="IOCHK", when=at(1)),
    ]
    found = by_subject(run(report(at(1), sel=sel_state(*entries, count=3))), "sel_critical_interrupt")
    assert {s: v.detail["severity"] for s, v in found.items()} == {
        "SERR": "uncorrectable",
        "PCIe Fatal": "fatal",
        "IOCHK": "uncorrectable",
    }
    assert found["SERR"].detail["candidates"] == [
        {"bus": "0x3a", "device": "0x00", "function": "0x1", "bdf": "3a:00.1"}
    ]
    assert found["PCIe Fatal"].detail["candidates"] == [{"bus": "59", "device": "0", "function": "0"}]  # base unsaid
    assert {v.detail["os_saw_aer"] for v in found.values()} == {False}
    # the kernel logged an uncorrected AER error: the device's own rule tickets it
    aer = kernel_log(event("pcie_aer_uncorrected", seq=1, when=at(2), subject="0000:3a:00.1"))
    serr = sel_entry(4, "Critical Interrupt", "PCI SERR", name="SERR", when=at(2))
    (seen,) = of(run(report(at(2), kernel_log=aer, sel=sel_state(serr, count=4))), "sel_critical_interrupt")
    assert seen.detail["os_saw_aer"] is True
    # remembered for an hour of entry time, then not
    later = sel_entry(5, "Critical Interrupt", "PCI SERR", name="SERR", when=at(50))
    assert of(run(report(at(50), sel=sel_state(later, count=5))), "sel_critical_interrupt")[0].detail["os_saw_aer"]
    gone = sel_entry(6, "Critical Interrupt", "PCI SERR", name="SERR", when=at(180))
    assert not of(run(report(at(180), sel=sel_state(gone, count=6))), "sel_critical_interrupt")[0].detail["os_saw_aer"]
