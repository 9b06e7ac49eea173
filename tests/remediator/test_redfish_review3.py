"""The third sceptical review of the Redfish/SEL/bond rule fixes (review r3 of feb6963): each finding through
derive() or the function it names, with the negative case beside it."""

from __future__ import annotations

import datetime as dt
from typing import Any

from checker.schemas import EdacState, NetworkState, NicPort
from checker.sections.pcie import PcieDevice, PcieState
from remediator.decisions import render_template, template_values
from remediator.derive.network_ports import FLAPPING_DOWNS, note_link_redundancy
from remediator.derive.sel_interrupts import remember_aers
from remediator.rules import load_ruleset
from remediator.signals import SignalValue
from tests.builders.observations import Deriver, at, event, kernel_log, of, report, sel_entry, sel_state
from tests.remediator.test_redfish_review2 import LACP, dell_dimm, edac, flaps_of, inventory, nic, one

RULES = {rule.id: rule for rule in load_ruleset([]).rules}


def fires(rule_id: str, signal: SignalValue) -> bool:
    rule = RULES[rule_id]
    return rule.when.matches(signal) and rule.when.holds(signal.value)


# -- finding 1: EDAC counts late; its count rising within the BMC's window is not silence -----------------


def burst_times(minutes: int) -> list[float]:
    """Seconds from T0: 12 errors in the 6 seconds before every other report (a burst each 2 minutes)."""
    return [m * 60 - 6 + k * 0.5 for m in range(2, minutes, 2) for k in range(12)]


def ce_entries(times: list[float], dimm: str = "DIMM_A1") -> list[Any]:
    return [sel_entry(i + 1, "Memory", "Correctable ECC", component=dimm, when=at(t / 60)) for i, t in enumerate(times)]


def sel_rule_fires(edac_at: Any, minutes: int = 60) -> list[int]:
    """The minutes at which sel-memory-correctable fires on DIMM_A1's bursts, EDAC's section from `edac_at`."""
    errors = burst_times(minutes)
    run, fired = Deriver(), []
    for minute in range(minutes):
        listed = [t for t in errors if t <= minute * 60]
        state = sel_state(*ce_entries(listed), count=len(listed))
        for signal in of(run(report(at(minute), sel=state, edac=edac_at(minute, errors))), "sel_memory_ce_rate"):
            if fires("sel-memory-correctable", signal):
                fired.append(minute)
    return fired


def lagging_one_report(minute: int, errors: list[float]) -> EdacState:
    """EDAC counts each error one report after the BMC logged it (its poll comes after the report)."""
    counted = sum(1 for t in errors if t <= (minute - 1) * 60)
    return edac(DIMM_A1=(counted, 0), DIMM_B1=(0, 0))


def test_edac_counting_the_same_dimm_one_report_late_is_not_silence() -> None:
    # feb6963 compared EDAC only over the previous report's interval: the burst's report saw 0 and fired
    assert sel_rule_fires(lagging_one_report) == []


def test_edac_counting_another_dimm_only_leaves_the_log_asking() -> None:
    def other_dimm(minute: int, errors: list[float]) -> EdacState:
        return edac(DIMM_A1=(0, 0), DIMM_B1=(sum(1 for t in errors if t <= (minute - 1) * 60), 0))

    fired = sel_rule_fires(other_dimm)
    assert fired
    assert fired[0] >= 25  # held once the entries span the 30-minute window (150 s buckets)


def test_an_edac_rise_before_the_window_does_not_silence_the_log() -> None:
    def long_ago(minute: int, errors: list[float]) -> EdacState:
        return edac(DIMM_A1=(0 if minute < 1 else 3, 0), DIMM_B1=(0, 0))  # rose at minute 1 only

    assert sel_rule_fires(long_ago, minutes=50)  # the window's start less the allowances is past minute 1


def test_a_ue_edac_counted_at_the_previous_inventory_read_keeps_the_alarm_quiet() -> None:
    run = Deriver()
    run(report(at(-1), edac=edac(DIMM_A1=(0, 0))))
    # EDAC's UE on DIMM A1 is counted in the report of the read that found no alarm yet; the BMC trips it later
    run(report(at(0), redfish=inventory(dell_dimm()), edac=edac(DIMM_A1=(0, 1))))
    ue = one(
        run(report(at(60), redfish=inventory(dell_dimm(UncorrectableECCError=True)), edac=edac(DIMM_A1=(0, 1)))),
        "bmc_dimm_uncorrectable",
    )
    assert (ue.detail["edac_counted"], ue.detail["edac_rose_at"]) == (0, at(0).isoformat())
    assert ue.detail["edac_silent"] is False
    # the same count risen an hour before the earlier read is no answer to this trip
    quiet = Deriver()
    quiet(report(at(-61), edac=edac(DIMM_A1=(0, 0))))
    quiet(report(at(-60), edac=edac(DIMM_A1=(0, 1))))
    quiet(report(at(0), redfish=inventory(dell_dimm()), edac=edac(DIMM_A1=(0, 1))))
    ue = one(
        quiet(report(at(60), redfish=inventory(dell_dimm(UncorrectableECCError=True)), edac=edac(DIMM_A1=(0, 1)))),
        "bmc_dimm_uncorrectable",
    )
    assert ue.detail["edac_silent"] is True


def test_the_rise_times_survive_the_memory_and_a_report_without_edac() -> None:
    run = Deriver()
    run(report(at(0), edac=edac(DIMM_A1=(1, 0))))
    run(report(at(1), edac=edac(DIMM_A1=(2, 0))))
    run(report(at(2)))
    rose = run.memory["edac"]["rose"]
    assert dt.datetime.fromisoformat(rose["ce:dimma1"]) == at(1)
    assert dt.datetime.fromisoformat(rose["ce:"]) == at(1)


# -- finding 2: only positive evidence (redundant False) holds the host -----------------------------------


def carrier_rule(signal: SignalValue) -> str:
    held = [r for r in ("nic-carrier-flapping", "nic-carrier-flapping-redundant") if fires(r, signal)]
    assert len(held) == 1, held
    return held[0]


def title_of(rule_id: str, signal: SignalValue) -> str:
    (step,) = RULES[rule_id].plan
    values = template_values("web-01", rule_id, signal.subject, signal.value, signal.detail)
    return render_template(str(step.params["title"]), values)


def flapping_beside(partner: NicPort, *, master: str, **own: Any) -> SignalValue:
    states = [
        [nic("p0", "0000:3b:00.0", downs=i, **own).model_copy(update={"master": master}), partner] for i in range(4)
    ]
    (flaps,) = flaps_of(states).values()
    return flaps


def test_an_ovs_member_beside_a_linked_partner_stays_in_service_and_says_why() -> None:
    # Open vSwitch's ports have master ovs-system and no bonding directory: never a bond state, even from a new agent
    flaps = flapping_beside(nic("p1", "0000:3b:00.1").model_copy(update={"master": "ovs-system"}), master="ovs-system")
    assert flaps.detail["redundant"] == "unreported"
    assert carrier_rule(flaps) == "nic-carrier-flapping-redundant"  # feb6963: unknown, held
    # no "bond partner": every OVS port has master ovs-system, a storage or tunnel port too (fourth review, 5)
    title = title_of("nic-carrier-flapping-redundant", flaps)
    assert "another port under Open vSwitch is linked (p1); whether it carries this port's traffic" in title
    assert "bond partner" not in title


def test_a_bridge_member_of_a_new_agent_is_named_as_no_bond() -> None:
    bonded = nic("p2", "0000:3c:00.0", **LACP, bond_state="active", bond_aggregator=1)
    states = [
        [
            nic("p0", "0000:3b:00.0", downs=i).model_copy(update={"master": "br0"}),
            nic("p1", "0000:3b:00.1").model_copy(update={"master": "br0"}),
            bonded,
        ]
        for i in range(4)
    ]
    flaps = flaps_of(states)["p0"]
    assert (flaps.detail["redundant"], flaps.detail["bond_partners_linked"]) == ("unreported", ["p1"])
    assert "br0 is not a bond" in str(flaps.detail["backup"])
    older = flapping_beside(nic("p1", "0000:3b:00.1"), master="bond0")  # no port with bond_mode: an older agent
    assert "an agent from before the bond state was read" in str(older.detail["backup"])


def test_positive_evidence_still_holds_the_host() -> None:
    # the partner has no link: nothing carries p0's traffic
    alone = flapping_beside(
        nic("p1", "0000:3b:00.1").model_copy(update={"operstate": "down", "carrier": False}), master="bond0"
    )
    assert (alone.detail["redundant"], alone.detail["backup"]) == (False, "none")
    assert carrier_rule(alone) == "nic-carrier-flapping"
    # the kernel log's downs on a host whose report has no network section: no partner known at all, held as before
    down = SignalValue("device_event_count", "p0", 3.0, {"kind": "nic_link_down"})
    note_link_redundancy([down], None)
    assert down.detail["redundant"] == "unknown"
    assert fires("nic-link-flapping", down)


# -- finding 3: a partner in another 802.3ad aggregator takes over once the port's aggregator is down ------


def test_a_partner_in_another_aggregator_backs_up_the_only_member_of_the_active_one() -> None:
    flaps = flapping_beside(
        nic("p1", "0000:3b:00.1", **LACP, bond_state="backup", bond_aggregator=2),
        master="bond0",
        **LACP,
        bond_state="active",
        bond_aggregator=1,
    )
    assert (flaps.detail["redundant"], flaps.detail["failover"]) == (True, "aggregator_reselection")  # feb6963: False
    assert carrier_rule(flaps) == "nic-carrier-flapping-redundant"
    assert "another 802.3ad aggregator" in title_of("nic-carrier-flapping-redundant", flaps)


def test_a_partner_in_another_aggregator_is_no_backup_while_a_steady_member_keeps_it_up() -> None:
    # p2 in p0's aggregator carries p0's traffic: redundant through p2, not p1's reselection
    states = [
        [
            nic("p0", "0000:3b:00.0", downs=i, **LACP, bond_state="active", bond_aggregator=1),
            nic("p1", "0000:3b:00.1", **LACP, bond_state="backup", bond_aggregator=2),
            nic("p2", "0000:3c:00.0", **LACP, bond_state="active", bond_aggregator=1),
        ]
        for i in range(4)
    ]
    flaps = flaps_of(states)["p0"]
    assert (flaps.detail["redundant"], flaps.detail["bond_partners_counted"], flaps.detail["failover"]) == (
        True,
        ["p2"],
        None,
    )


# -- note 9: the log path judges a flapping partner by the counters' day, as the counter path does -----------


def test_a_partner_that_flapped_earlier_today_is_no_backup_for_the_kernel_logs_downs() -> None:
    run = Deriver()
    seq = 0
    for minute, partner_downs in enumerate((0, 1, 2, 3)):  # p1's downs earlier in the day, by its counters
        ports = [
            nic("p0", "0000:3b:00.0", **LACP, bond_state="active", bond_aggregator=1),
            nic("p1", "0000:3b:00.1", downs=partner_downs, **LACP, bond_state="active", bond_aggregator=1),
        ]
        run(report(at(10 * minute), network=NetworkState(ports=ports)))
    downs = []
    for k in range(3):
        seq += 1
        downs.append(event("nic_link_down", seq, at(50 + k), "p0"))
    ports = [
        nic("p0", "0000:3b:00.0", **LACP, bond_state="active", bond_aggregator=1),
        nic("p1", "0000:3b:00.1", downs=3, **LACP, bond_state="active", bond_aggregator=1),
    ]
    signals = run(report(at(60), network=NetworkState(ports=ports), kernel_log=kernel_log(*downs, last_seq=seq)))
    (down,) = [s for s in of(signals, "device_event_count") if s.detail.get("kind") == "nic_link_down"]
    assert down.detail["flapping_linked"] == ["p1"]  # feb6963: [] (p1 has no signal in this report)
    assert down.detail["redundant"] is False
    assert fires("nic-link-flapping", down)


def test_the_flapping_threshold_is_the_rules_value() -> None:
    assert RULES["nic-carrier-flapping"].when.value == FLAPPING_DOWNS
    assert RULES["nic-carrier-flapping-redundant"].when.value == FLAPPING_DOWNS
    assert RULES["nic-link-flapping"].when.value == FLAPPING_DOWNS
    assert RULES["nic-link-flapping-redundant"].when.value == FLAPPING_DOWNS


# -- finding 5: a protocol switch compares times on one clock, and a first time uses the lookback ----------


def serr(record: int, when: dt.datetime, text: str = "PCI SERR") -> Any:
    return sel_entry(record, "Critical Interrupt", text, name="SERR", when=when)


def serrs(signals: list[SignalValue]) -> float:
    return sum(s.value for s in of(signals, "sel_critical_interrupt"))


BEHIND = dt.timedelta(hours=-6)  # a BMC on UTC-6: ipmitool prints local time, parsed as UTC


def test_a_bmc_on_local_time_switching_protocols_counts_each_entry_once() -> None:
    run = Deriver()
    run(report(at(0), sel=sel_state(count=0, source="ipmi")))
    for minute in range(1, 31):  # an entry logged half a minute before each report, read by ipmitool
        logged = serr(minute, at(minute - 0.5) + BEHIND)
        assert serrs(run(report(at(minute), sel=sel_state(logged, count=minute, source="ipmi")))) == 1
    # ipmitool fails; Redfish lists the same thirty under its own ids, by UTC, and one new
    listed = [serr(100 + m, at(m - 0.5)) for m in range(1, 32)]
    assert serrs(run(report(at(31), sel=sel_state(*listed, count=31, source="redfish")))) == 1  # feb6963: 31
    # ipmitool back: its 31 is Redfish's 131 (counted), 32 is new
    back = [serr(m, at(m - 0.5) + BEHIND) for m in range(1, 33)]
    assert serrs(run(report(at(32), sel=sel_state(*back, count=32, source="ipmi")))) == 1  # feb6963: 0 (lost)


def test_the_same_clock_on_both_protocols_still_counts_each_entry_once() -> None:
    run = Deriver()
    run(report(at(0), sel=sel_state(count=0, source="ipmi")))
    for minute in range(1, 11):
        run(report(at(minute), sel=sel_state(serr(minute, at(minute - 0.5)), count=minute, source="ipmi")))
    listed = [serr(100 + m, at(m - 0.5)) for m in range(1, 12)]
    assert serrs(run(report(at(11), sel=sel_state(*listed, count=11, source="redfish")))) == 1


def test_a_switch_with_no_time_seen_looks_back_only_a_day() -> None:
    run = Deriver()
    ahead = dt.timedelta(hours=8)  # a BMC on UTC+8: every entry ipmitool lists looks 8 hours in the future
    run(report(at(0), sel=sel_state(serr(1, at(-30) + ahead), count=1, source="ipmi")))
    assert run.memory["sel"].get("newest") is None
    psu = sel_entry(101, "Power Supply", "Failure detected", name="PS1", when=at(-60 * 24 * 30))
    listed = [psu, serr(102, at(-60 * 24 * 20)), serr(103, at(-30)), serr(104, at(1))]
    signals = run(report(at(2), sel=sel_state(*listed, count=4, source="redfish")))
    assert of(signals, "psu_failure") == []  # feb6963: the month-old PSU failure fired
    assert serrs(signals) == 2  # within the day: the one ipmitool listed (its time unknown) and the new one


# -- finding 4: an AER explains an entry naming the other end of its link; every source's AER counts --------


def pcie(nonfatal: int = 0) -> PcieState:
    """A root port 0000:3a:00.0 with a ConnectX endpoint below it whose sysfs counters count `nonfatal`."""
    return PcieState(
        source="sysfs",
        functions=2,
        aer_counters=True,
        devices=[
            PcieDevice(bdf="0000:3a:00.0", driver="pcieport", aer_correctable=0, aer_nonfatal=0, aer_fatal=0),
            PcieDevice(
                bdf="0000:3b:00.0",
                parent="0000:3a:00.0",
                driver="mlx5_core",
                aer_correctable=0,
                aer_nonfatal=nonfatal,
                aer_fatal=0,
            ),
        ],
    )


def os_saw_aer(signals: list[SignalValue]) -> list[bool]:
    return [bool(s.detail["os_saw_aer"]) for s in of(signals, "sel_critical_interrupt")]


def test_the_sysfs_counters_uncorrected_aer_explains_an_entry_of_the_same_report() -> None:
    run = Deriver()
    run(report(at(0), sel=sel_state(count=0), pcie=pcie(0)))
    signals = run(report(at(1), sel=sel_state(serr(1, at(1)), count=1), pcie=pcie(1)))
    assert os_saw_aer(signals) == [True]  # feb6963: False (the counters were derived after the SEL)


def root_port_entry(record: int, bus: str) -> Any:
    return serr(record, at(1), f"Bus Uncorrectable error at bus {bus} device 0x00 function 0x0")


def test_an_endpoints_aer_explains_the_entry_naming_its_root_port() -> None:
    run = Deriver()
    run(report(at(0), sel=sel_state(count=0), pcie=pcie()))
    klog = kernel_log(event("pcie_aer_uncorrected", 1, at(1), "0000:3b:00.0"), last_seq=1)
    signals = run(report(at(1), kernel_log=klog, sel=sel_state(root_port_entry(1, "0x3a"), count=1), pcie=pcie()))
    assert os_saw_aer(signals) == [True]  # feb6963: False ("another device")


def test_an_aer_does_not_explain_an_entry_naming_an_unrelated_port() -> None:
    run = Deriver()
    run(report(at(0), sel=sel_state(count=0), pcie=pcie()))
    klog = kernel_log(event("pcie_aer_uncorrected", 1, at(1), "0000:3b:00.0"), last_seq=1)
    signals = run(report(at(1), kernel_log=klog, sel=sel_state(root_port_entry(1, "0x5d"), count=1), pcie=pcie()))
    assert os_saw_aer(signals) == [False]


def test_the_functions_kept_of_an_aer_are_the_ones_it_names_not_the_lowest() -> None:
    kept = remember_aers(
        [], [["0000:5e:00.0", "0000:01:00.0", "0000:02:00.0", "0000:03:00.0", "0000:04:00.0"]], at(0), None
    )
    assert "0000:5e:00.0" in kept[0][1]  # feb6963 kept the four lowest
    # a subject that is no PCI function (a long one would not fit the memory) is not kept
    assert remember_aers([], [["x" * 40, "0000:3b:00.0"]], at(0), None)[0][1] == ["0000:3b:00.0"]


def test_a_long_aer_subject_does_not_fail_the_derive() -> None:
    run = Deriver()
    run(report(at(0), sel=sel_state(count=0)))
    klog = kernel_log(event("pcie_aer_uncorrected", 1, at(1), "pcie-device-with-a-very-long-name-0000"), last_seq=1)
    signals = run(report(at(1), kernel_log=klog, sel=sel_state(serr(1, at(1)), count=1)))
    assert os_saw_aer(signals) == [True]  # feb6963: a ValidationError from SelMemory
