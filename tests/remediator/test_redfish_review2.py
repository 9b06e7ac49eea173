"""The second sceptical review of the Redfish rules (issue 19): each finding through derive(), on the real
samples where the finding is about them."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from bench.samples import sample
from checker.parsers.redfish_inventory import firmware_from_collection_id, parse_collection_links, parse_memory
from checker.parsers.redfish_sensors import parse_power, psu_name
from checker.schemas import (
    EdacController,
    EdacDimm,
    EdacState,
    NetworkState,
    NicPort,
    RedfishMemoryModule,
    RedfishState,
)
from remediator.derive.network import network_signals
from remediator.derive.network_ports import note_link_redundancy
from remediator.recount import held_by_repair, recount_range
from remediator.rules import load_ruleset
from remediator.signals import SignalValue
from tests.builders.observations import (
    Deriver,
    at,
    event,
    identity,
    kernel_log,
    of,
    report,
    sel_entry,
    sel_state,
)

SERVICE = "https://bmc.example"
RULES = {rule.id: rule for rule in load_ruleset([]).rules}


def fires(rule_id: str, signal: SignalValue) -> bool:
    rule = RULES[rule_id]
    return rule.when.matches(signal) and rule.when.holds(signal.value)


def doc(name: str) -> Any:
    return json.loads(sample(f"redfish/{name}"))


def dell_dimm(**trips: bool) -> RedfishMemoryModule:
    """The R650's DIMM A1 as served (alarm flags only), with the flags the scenario sets."""
    metrics = doc("dell-idrac9-r650-memorymetrics-dimm-a1-alarmtrips-only-no-counts.json")
    metrics["HealthData"]["AlarmTrips"].update(trips)
    module = parse_memory(doc("dell-idrac9-r650-memory-dimm-socket-a1-no-memorylocation.json"), metrics).value
    assert module is not None
    return module


def supermicro_dimm(**counts: Any) -> RedfishMemoryModule:
    module = parse_memory(doc("supermicro-x10sdv-memory-dimmb1-health-ok.json")).value
    assert module is not None
    return module.model_copy(update={"metrics_read": True, **counts})


def inventory(*modules: RedfishMemoryModule) -> RedfishState:
    return RedfishState(service=SERVICE, memory=list(modules))


def edac(**dimms: tuple[int, int]) -> EdacState:
    """One controller whose DIMMs carry board labels (label -> (CE, UE)); `host` is an unlabelled DIMM."""
    rows = [
        EdacDimm(mc=0, name=f"dimm{n}", layout="dimm", label="" if label == "host" else label, ce_count=ce, ue_count=ue)
        for n, (label, (ce, ue)) in enumerate(dimms.items())
    ]
    return EdacState(controllers=[EdacController(mc=0, dimms=rows)])


def one(signals: list[SignalValue], kind: str) -> SignalValue:
    (found,) = of(signals, kind)
    return found


# -- finding 1: EDAC compared over the BMC's interval, on the same DIMM -----------------------------------


def test_an_earlier_ue_on_another_dimm_does_not_silence_the_bmc_ue_alarm() -> None:
    run = Deriver()
    # EDAC counted one UE on DIMM_B2 before the first read; the BMC's DIMM A1 is fine then
    run(report(at(0), redfish=inventory(dell_dimm()), edac=edac(DIMM_B2=(0, 1), DIMM_A1=(0, 0))))
    ue = one(
        run(
            report(
                at(60),
                redfish=inventory(dell_dimm(UncorrectableECCError=True)),
                edac=edac(DIMM_B2=(0, 1), DIMM_A1=(0, 0)),
            )
        ),
        "bmc_dimm_uncorrectable",
    )
    assert (ue.detail["edac_silent"], ue.detail["edac_counted"], ue.detail["edac_scope"]) == (True, 0, "dimm")
    assert ue.detail["edac_since"] == at(0).isoformat()


def test_a_ue_edac_counted_on_the_same_dimm_in_the_interval_silences_it() -> None:
    run = Deriver()
    run(report(at(0), redfish=inventory(dell_dimm()), edac=edac(DIMM_B2=(0, 1))))
    both = edac(DIMM_B2=(0, 1), DIMM_A1=(0, 1))  # 'DIMM_A1' is the BMC's 'DIMM A1' on letters and digits
    ue = one(
        run(report(at(60), redfish=inventory(dell_dimm(UncorrectableECCError=True)), edac=both)),
        "bmc_dimm_uncorrectable",
    )
    assert (ue.detail["edac_silent"], ue.detail["edac_counted"], ue.detail["edac_scope"]) == (False, 1, "dimm")


def test_where_edac_names_no_slot_the_host_counts_over_the_interval() -> None:
    # EDAC's default labels name no slot the BMC uses: the host's count over the same interval
    run = Deriver()
    run(report(at(0), redfish=inventory(dell_dimm()), edac=edac(host=(0, 1))))
    quiet = one(
        run(report(at(60), redfish=inventory(dell_dimm(UncorrectableECCError=True)), edac=edac(host=(0, 1)))),
        "bmc_dimm_uncorrectable",
    )
    assert (quiet.detail["edac_silent"], quiet.detail["edac_scope"]) == (True, "host")
    other = Deriver()
    other(report(at(0), redfish=inventory(dell_dimm()), edac=edac(host=(0, 0))))
    seen = one(
        other(report(at(60), redfish=inventory(dell_dimm(UncorrectableECCError=True)), edac=edac(host=(0, 1)))),
        "bmc_dimm_uncorrectable",
    )
    assert (seen.detail["edac_silent"], seen.detail["edac_counted"], seen.detail["edac_scope"]) == (False, 1, "host")


def test_a_first_read_or_a_read_after_a_restart_compares_since_boot() -> None:
    run = Deriver()
    first = one(
        run(report(at(0), redfish=inventory(dell_dimm(UncorrectableECCError=True)), edac=edac(host=(0, 1)))),
        "bmc_dimm_uncorrectable",
    )
    assert (first.detail["edac_silent"], first.detail["edac_since"]) == (False, "boot")
    after = one(
        run(
            report(
                at(60),
                boot="boot-2",
                redfish=inventory(dell_dimm(UncorrectableECCError=True)),
                edac=edac(host=(0, 0)),
            )
        ),
        "bmc_dimm_uncorrectable",
    )
    assert (after.detail["edac_silent"], after.detail["edac_since"]) == (True, "boot")


def test_a_rising_ue_count_compares_the_dimms_edac_count_between_the_two_reads() -> None:
    run = Deriver()
    run(report(at(0), redfish=inventory(supermicro_dimm(ce_lifetime=0, ue_lifetime=0)), edac=edac(DIMMB2=(0, 1))))
    grown = inventory(supermicro_dimm(ce_lifetime=0, ue_lifetime=1))
    ue = one(run(report(at(60), redfish=grown, edac=edac(DIMMB2=(0, 1)))), "bmc_dimm_uncorrectable")
    assert (ue.detail["edac_silent"], ue.detail["edac_scope"]) == (True, "host")  # DIMMB1 has no EDAC entry
    again = inventory(supermicro_dimm(ce_lifetime=0, ue_lifetime=2))
    ue = one(run(report(at(120), redfish=again, edac=edac(DIMMB2=(0, 1), DIMMB1=(0, 1)))), "bmc_dimm_uncorrectable")
    assert (ue.detail["edac_silent"], ue.detail["edac_counted"], ue.detail["edac_scope"]) == (False, 1, "dimm")


def ce_stream(first: int, when: dt.datetime, n: int = 200) -> list[Any]:
    return [
        sel_entry(first + k, "Memory", "Correctable ECC", component="DIMM_A1", when=when - dt.timedelta(seconds=9 * k))
        for k in range(n)
    ]


def test_an_earlier_ce_on_another_dimm_does_not_silence_the_logs_ce_rate() -> None:
    run = Deriver()
    run(report(at(0), sel=sel_state(count=0), edac=edac(DIMM_B2=(5, 0), DIMM_A1=(0, 0))))  # EDAC counted CEs before
    rate = one(
        run(
            report(at(31), sel=sel_state(*ce_stream(10, at(31)), count=200), edac=edac(DIMM_B2=(5, 0), DIMM_A1=(0, 0)))
        ),
        "sel_memory_ce_rate",
    )
    assert (rate.detail["held"], rate.detail["edac_silent"], rate.detail["edac_scope"]) == (True, True, "dimm")
    assert rate.detail["edac_since"] == at(0).isoformat()
    ecc = one(
        run(
            report(
                at(32), sel=sel_state(*ce_stream(300, at(32), 1), count=201), edac=edac(DIMM_B2=(9, 0), DIMM_A1=(0, 0))
            )
        ),
        "sel_memory_ecc",
    )
    assert (ecc.detail["edac_silent"], ecc.detail["edac_counted"]) == (True, 0)  # DIMM_B2's CEs are not DIMM_A1's


def test_edac_counting_the_same_dimm_in_the_interval_silences_the_log() -> None:
    run = Deriver()
    run(report(at(0), sel=sel_state(count=0), edac=edac(DIMM_A1=(5, 0))))
    counting = edac(DIMM_A1=(4000, 0))
    rate = one(
        run(report(at(31), sel=sel_state(*ce_stream(10, at(31)), count=200), edac=counting)), "sel_memory_ce_rate"
    )
    assert (rate.detail["edac_silent"], rate.detail["edac_counted"], rate.detail["edac_scope"]) == (False, 3995, "dimm")
    # unlabelled EDAC: the host's count over the interval, judged against the BMC's entries (fourth review,
    # finding 1: one error EDAC counted anywhere on the host is no count of the 200 the BMC logged)
    for host_now, silent in ((6, True), (4000, False)):
        host = Deriver()
        host(report(at(0), sel=sel_state(count=0), edac=edac(host=(5, 0))))
        rate = one(
            host(report(at(31), sel=sel_state(*ce_stream(10, at(31)), count=200), edac=edac(host=(host_now, 0)))),
            "sel_memory_ce_rate",
        )
        assert (rate.detail["edac_silent"], rate.detail["edac_counted"], rate.detail["edac_scope"]) == (
            silent,
            host_now - 5,
            "host",
        )


# -- finding 2: a failed IPMI read does not switch the firmware source to Redfish ------------------------


def dell_firmware() -> RedfishState:
    links = parse_collection_links(doc("dell-idrac9-r650-firmwareinventory-collection-installed-current-previous.json"))
    return RedfishState(
        service=SERVICE, firmware=[f for f in (firmware_from_collection_id(u) for u in links.value) if f is not None]
    )


def firmware_below(signals: list[SignalValue]) -> dict[str, str]:
    return {s.subject: s.detail["source"] for s in of(signals, "firmware_below_baseline")}


def test_a_failed_ipmi_read_leaves_the_version_unknown_not_the_bmcs() -> None:
    run = Deriver()  # class compute-skx-2s: BIOS 2.10.2, BMC 4.40.40.40; the R650 serves BIOS 1.2.4, BMC 5.10
    own = identity()
    own.firmware.bios_version = "1.0.0"  # dmidecode: below; ipmitool mc info answers the BMC's
    own.firmware.bmc_firmware = "4.40.40.40"
    assert firmware_below(run(report(at(0), redfish=dell_firmware(), identity=own))) == {"bios": "host"}
    # mid-reflash: dmidecode and mc info answer nothing; the BMC's inventory still says BIOS 1.2.4
    failed = identity()
    assert (failed.firmware.bios_version, failed.firmware.bmc_firmware) == (None, None)
    assert firmware_below(run(report(at(10), redfish=dell_firmware(), identity=failed))) == {}
    assert firmware_below(run(report(at(20), redfish=RedfishState(service=SERVICE), identity=None))) == {}
    # the host's reading back: its own source, as before
    assert firmware_below(run(report(at(30), redfish=dell_firmware(), identity=own))) == {"bios": "host"}


def test_a_host_that_never_read_it_or_stopped_for_a_day_uses_the_bmcs() -> None:
    run = Deriver()
    assert firmware_below(run(report(at(0), redfish=dell_firmware(), identity=identity()))) == {"bios": "redfish"}
    own = identity()
    own.firmware.bios_version = "1.0.0"
    other = Deriver()
    assert firmware_below(other(report(at(0), redfish=dell_firmware(), identity=own))) == {"bios": "host"}
    after = 24 * 60 + 1  # minutes: past OWN_FIRMWARE_S without the host's own reading
    assert firmware_below(other(report(at(after), redfish=dell_firmware(), identity=identity()))) == {"bios": "redfish"}


# -- finding 3: a bond partner flapping too, or outside the active aggregator, is no backup ---------------


def nic(name: str, bus: str, *, downs: int = 0, **bond: Any) -> NicPort:
    return NicPort(
        interface=name,
        physical=True,
        operstate="up",
        carrier=True,
        speed_mbps=25000,
        driver="mlx5_core",
        bus_info=bus,
        carrier_changes=2 * downs,
        carrier_down_count=downs,
        master="bond0",
        statistics={"rx_crc_errors": 0},
        **bond,
    )


LACP = {"bond_mode": "802.3ad", "bond_active_aggregator": 1}


def flaps_of(states: list[list[NicPort]]) -> dict[str, SignalValue]:
    memory = None
    found: list[SignalValue] = []
    for minute, ports in enumerate(states):
        now = at(10 * minute)
        found, memory = network_signals(NetworkState(ports=ports), None, memory, now=now, boot_id="boot-1")
    return {s.subject: s for s in found if s.kind == "nic_link_flaps"}


def carrier_rule(signal: SignalValue) -> str:
    held = [r for r in ("nic-carrier-flapping", "nic-carrier-flapping-redundant") if fires(r, signal)]
    assert len(held) == 1, held
    return held[0]


def test_two_flapping_bond_members_are_no_backup_for_each_other() -> None:
    both = [
        [
            nic("p0", "0000:3b:00.0", downs=i, **LACP, bond_state="active", bond_aggregator=1),
            nic("p1", "0000:3b:00.1", downs=i, **LACP, bond_state="active", bond_aggregator=1),
        ]
        for i in range(4)
    ]
    found = flaps_of(both)
    assert {n: s.detail["redundant"] for n, s in found.items()} == {"p0": False, "p1": False}
    assert found["p0"].detail["flapping_linked"] == ["p1"]
    assert carrier_rule(found["p0"]) == "nic-carrier-flapping"  # held: every down may be both
    # the partner steady: it carries the traffic
    one = [
        [
            nic("p0", "0000:3b:00.0", downs=i, **LACP, bond_state="active", bond_aggregator=1),
            nic("p1", "0000:3b:00.1", **LACP, bond_state="active", bond_aggregator=1),
        ]
        for i in range(4)
    ]
    (flaps,) = flaps_of(one).values()
    assert (flaps.detail["redundant"], flaps.detail["bond_partners_counted"]) == (True, ["p1"])
    assert carrier_rule(flaps) == "nic-carrier-flapping-redundant"


def test_a_partner_outside_the_active_aggregator_backs_up_only_a_port_whose_aggregator_goes_down() -> None:
    # p2 flaps with p0 (one switch reloading): aggregator 1 goes down whole and bonding reselects p1's (fourth
    # review, finding 3; 26e21c2 held the host here: p2 was counted as keeping aggregator 1 up)
    states = [
        [
            nic("p0", "0000:3b:00.0", downs=i, **LACP, bond_state="active", bond_aggregator=1),
            nic("p1", "0000:3b:00.1", **LACP, bond_state="backup", bond_aggregator=2),
            nic("p2", "0000:3c:00.0", downs=i, **LACP, bond_state="active", bond_aggregator=1),
        ]
        for i in range(4)
    ]
    flaps = flaps_of(states)["p0"]
    assert (flaps.detail["redundant"], flaps.detail["bond_partners_linked"]) == (True, ["p1", "p2"])
    assert flaps.detail["failover"] == "aggregator_reselection"
    assert carrier_rule(flaps) == "nic-carrier-flapping-redundant"
    # p2 steady in aggregator 1 but not carrying (LACP-individual): it keeps aggregator 1 selected, so bonding
    # does not reselect p1's, and nothing carries p0's traffic
    individual = [
        [
            nic("p0", "0000:3b:00.0", downs=i, **LACP, bond_state="active", bond_aggregator=1),
            nic("p1", "0000:3b:00.1", **LACP, bond_state="backup", bond_aggregator=2),
            nic("p2", "0000:3c:00.0", **LACP, bond_state="backup", bond_aggregator=1),
        ]
        for i in range(4)
    ]
    flaps = flaps_of(individual)["p0"]
    assert (flaps.detail["redundant"], flaps.detail["bond_partners_linked"]) == (False, ["p1", "p2"])
    assert carrier_rule(flaps) == "nic-carrier-flapping"
    # active-backup: the backup member is the backup
    backup = [
        [
            nic("p0", "0000:3b:00.0", downs=i, bond_mode="active-backup", bond_state="active"),
            nic("p1", "0000:3b:00.1", bond_mode="active-backup", bond_state="backup"),
        ]
        for i in range(4)
    ]
    (flaps,) = flaps_of(backup).values()
    assert flaps.detail["redundant"] is True


def test_redundant_unreported_when_the_report_does_not_say_and_the_host_stays_in_service() -> None:
    """An agent from before bond_mode (or a bridge): a linked partner whose place in the bond is not known
    keeps the in-service ticket it had before the bond state was read (third review, finding 2)."""
    states = [[nic("p0", "0000:3b:00.0", downs=i), nic("p1", "0000:3b:00.1")] for i in range(4)]
    (flaps,) = flaps_of(states).values()
    assert flaps.detail["redundant"] == "unreported"
    assert carrier_rule(flaps) == "nic-carrier-flapping-redundant"
    # the kernel log's link downs take the same answer
    down = SignalValue("device_event_count", "p0", 3.0, {"kind": "nic_link_down"})
    note_link_redundancy([down], NetworkState(ports=states[-1]))
    assert down.detail["redundant"] == "unreported"
    assert not fires("nic-link-flapping", down)
    assert fires("nic-link-flapping-redundant", down)
    # and a flapping partner seen only in this report's signals is no backup on the log's side either
    told = [
        nic("p0", "0000:3b:00.0", **LACP, bond_state="active", bond_aggregator=1),
        nic("p1", "0000:3b:00.1", **LACP, bond_state="active", bond_aggregator=1),
    ]
    mine = SignalValue("device_event_count", "p0", 3.0, {"kind": "nic_link_down"})
    theirs = SignalValue("nic_link_flaps", "p1", 4.0, {})
    note_link_redundancy([mine, theirs], NetworkState(ports=told))
    assert mine.detail["redundant"] is False


# -- finding 4: an AER explains only critical-interrupt entries near it, on its device ---------------------


def serr(record: int, when: dt.datetime, text: str = "PCI SERR") -> Any:
    return sel_entry(record, "Critical Interrupt", text, name="SERR", when=when)


def saw_aer(signals: list[SignalValue]) -> bool:
    return bool(one(signals, "sel_critical_interrupt").detail["os_saw_aer"])


def aer(seq: int, when: dt.datetime, device: str = "0000:3a:00.1") -> Any:
    return kernel_log(event("pcie_aer_uncorrected", seq=seq, when=when, subject=device))


def test_an_aer_on_another_device_does_not_explain_an_entry_naming_its_function() -> None:
    run = Deriver()
    run(report(at(0), sel=sel_state(count=0)))
    other = serr(1, at(1), "Bus Uncorrectable error at bus 0x5e device 0x00 function 0x0")
    assert saw_aer(run(report(at(1), kernel_log=aer(1, at(1)), sel=sel_state(other, count=1)))) is False
    same = serr(2, at(2), "Bus Uncorrectable error at bus 0x3a device 0x00 function 0x1")
    assert saw_aer(run(report(at(2), sel=sel_state(same, count=2)))) is True  # the AER remembered, its device
    # Dell's bare numbers: bus 58 is 0x3a read as decimal
    dell = serr(3, at(3), "A fatal error was detected on a component at bus 58 device 0 function 1.")
    assert saw_aer(run(report(at(3), sel=sel_state(dell, count=3)))) is True
    # an entry naming no function: any AER near in time may be it
    bare = serr(4, at(4))
    assert saw_aer(run(report(at(4), sel=sel_state(bare, count=4)))) is True


def test_an_aer_explains_entries_within_the_window_on_both_sides_only() -> None:
    run = Deriver()
    run(report(at(0), sel=sel_state(count=0)))
    # the BMC logged it 40 minutes before the kernel's AER, read in the same report: near, explained
    assert saw_aer(run(report(at(100), kernel_log=aer(1, at(100)), sel=sel_state(serr(1, at(60)), count=1))))
    # 90 minutes before it: not near
    late_read = serr(2, at(10))
    assert saw_aer(run(report(at(101), sel=sel_state(late_read, count=2)))) is False
    # an hour and a half after it: the AER explains nothing any more
    assert saw_aer(run(report(at(190), sel=sel_state(serr(3, at(190)), count=3)))) is False


# -- finding 5: a PSU's status reading is named as the log and the section name the PSU --------------------


def test_a_dell_psus_status_reading_is_not_named_twice() -> None:
    """Dell names its PSU 'PS2 Status' with MemberId 'PSU.Slot.2' (the R650's FirmwareInventory lists
    PSU.Slot.1/2): the shared Intel power document served with Dell's names. Before: 'PS2 Status PSU.Slot.2
    Status', a sensor no log entry or ticket names."""
    served = doc("intel-s2600bpb-power-psu-lineinputvoltage-572-and-13.json")
    for n, member in enumerate(served["PowerSupplies"], start=1):
        member.update(MemberId=f"PSU.Slot.{n}", Name=f"PS{n} Status")
    parsed = parse_power(served).value
    assert parsed is not None
    assert [r.name for r in parsed.readings if r.kind == "psu"] == ["PS1 Status", "PS2 Status"]
    assert [psu_name(p.member_id, p.bay, p.name) for p in parsed.psus] == ["PS1", "PS2"]


def test_every_psu_reading_of_the_shared_samples_is_its_psus_name_and_status() -> None:
    for name in (
        "intel-s2600bpb-power-psu-lineinputvoltage-572-and-13.json",
        "hpe-ilo5-xl675d-gen10plus-a40-power-empty-bays-absent-warning.json",
    ):
        parsed = parse_power(doc(name)).value
        assert parsed is not None
        present = [p for p in parsed.psus if p.present is not False]
        readings = [r.name for r in parsed.readings if r.kind == "psu"]
        assert readings == [f"{psu_name(p.member_id, p.bay, p.name)} Status" for p in present], name


# -- finding 6: the SEL read by the other protocol for a while: nothing counted twice, nothing lost -------


def serrs(signals: list[SignalValue]) -> float:
    return sum(s.value for s in of(signals, "sel_critical_interrupt"))


def test_a_host_switching_between_ipmi_and_redfish_counts_each_entry_once() -> None:
    def logged(ids: list[int], minutes: list[int]) -> list[Any]:
        return [serr(i, at(m)) for i, m in zip(ids, minutes, strict=True)]

    run = Deriver()
    run(report(at(0), sel=sel_state(count=0, source="ipmi")))
    assert serrs(run(report(at(3), sel=sel_state(*logged([1, 2, 3], [1, 2, 3]), count=3, source="ipmi")))) == 3
    # ipmitool fails; Redfish lists the same three events under its own ids, and one new
    redfish = sel_state(*logged([101, 102, 103, 104], [1, 2, 3, 4]), count=4, source="redfish")
    signals = run(report(at(5), sel=redfish))
    assert serrs(signals) == 1
    assert of(signals, "sel_cleared") == []
    # ipmitool back: event 4 (Redfish's 104) was counted; 5 is new
    ipmi = sel_state(*logged([1, 2, 3, 4, 5], [1, 2, 3, 4, 6]), count=5, source="ipmi")
    signals = run(report(at(7), sel=ipmi))
    assert serrs(signals) == 1
    assert of(signals, "sel_cleared") == []
    # and Redfish again, past its own cursor: 105 (ipmi's 5) counted, 106 new
    again = sel_state(*logged([104, 105, 106], [4, 6, 8]), count=6, source="redfish")
    assert serrs(run(report(at(9), sel=again))) == 1
    assert set(run.memory["sel"]["cursors"]) == {"ipmi"}
    assert run.memory["sel"]["source"] == "redfish"


def test_one_source_alone_still_sees_a_cleared_log() -> None:
    run = Deriver()
    run(report(at(0), sel=sel_state(serr(5, at(0)), count=5, source="redfish")))
    signals = run(report(at(2), sel=sel_state(serr(1, at(1)), count=1, source="redfish")))
    assert [s.detail["reason"] for s in of(signals, "sel_cleared")] == ["record_ids_backwards"]
    assert serrs(signals) == 1


# -- finding 7: the BMC's CE rate carries its interval, so a repair's resolve within it is recounted -------


def test_the_bmc_rate_straddling_a_repair_is_recounted_not_reopened() -> None:
    run = Deriver()
    run(report(at(0), redfish=inventory(supermicro_dimm(ce_lifetime=0))))
    (rate,) = of(run(report(at(60), redfish=inventory(supermicro_dimm(ce_lifetime=7200)))), "bmc_dimm_ce_rate")
    assert (rate.value, rate.detail["since"], rate.detail["counted"]) == (
        2.0,
        at(0).isoformat(),
        [[int(at(0).timestamp()), 7200]],
    )
    assert fires("bmc-dimm-ce-rate", rate)
    # a reseat resolved at minute 30: the hour's count straddles it, 0 to all of it came after
    found = recount_range(rate, at(30))
    assert found is not None
    low, high = found
    assert (low.value, high.value, low.detail["delta"], high.detail["delta"]) == (0.0, 2.0, 0, 7200)
    held = held_by_repair(rate, at(30), lambda s: fires("bmc-dimm-ce-rate", s))
    assert held is not None  # never a reopen on the old count alone; the ticket gets both numbers
    # resolved before the interval began: the whole count is after it, the rule judges it as it is
    assert recount_range(rate, at(-5)) is None
    assert held_by_repair(rate, at(-5), lambda s: fires("bmc-dimm-ce-rate", s)) is None
