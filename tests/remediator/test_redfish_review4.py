"""The fourth sceptical review of the Redfish/SEL/bond rule fixes (review r6 of 26e21c2): each finding through
derive() or the function it names, on the reviewer's scenarios (the missing negatives of its note 9), with the
case that must not change beside it."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy.orm import Session

from checker.parsers.ipmi_sel import parse_ipmitool_sel
from checker.parsers.redfish_log import parse_log_entry
from checker.schemas import EdacState, SelEntry
from remediator.derive.sel import _offset
from remediator.models import Signal
from remediator.signals import SignalValue
from remediator.unreachable import network_suspect
from tests.builders.observations import Deriver, at, of, report, sel_entry, sel_state
from tests.remediator.test_redfish_review2 import LACP, edac, flaps_of, nic
from tests.remediator.test_redfish_review3 import carrier_rule, fires, lagging_one_report, sel_rule_fires
from tests.remediator.test_unreachable_network import located

# -- finding 1: EDAC counting a little, or another DIMM, is no count of what only the BMC sees --------------

OTHER = "CPU_SrcID#0_Ha#0_Chan#1_DIMM#0"  # the kernel's default labels name no slot: host scope
THIS = "CPU_SrcID#0_Ha#0_Chan#0_DIMM#0"


def trickle_elsewhere(every: int) -> Any:
    """EDAC counts 1 CE on another DIMM every `every` minutes and none of DIMM_A1's (the BMC's 0.1 CE/s)."""

    def section(minute: int, errors: list[float]) -> EdacState:
        return edac(**{OTHER: (minute // every + 1, 0), THIS: (0, 0)})

    return section


def test_edac_counting_another_dimm_now_and_then_does_not_silence_the_log_in_host_scope() -> None:
    # 26e21c2: any rise of the host's total within the 30-minute window was EDAC counting: 0 and 1 tickets;
    # EDAC's own rules see 0.0008 CE/s and never judge DIMM_A1
    for every in (20, 30):
        fired = sel_rule_fires(trickle_elsewhere(every), 120)
        assert len(fired) >= 40, (every, fired)
        assert fired[0] == 28
    # the same DIMM's errors counted by EDAC under a default label (host scope), one report late: EDAC judges
    assert sel_rule_fires(lambda minute, errors: edac(**{THIS: (sum(t <= (minute - 1) * 60 for t in errors), 0)})) == []


def test_edac_counting_a_small_share_of_the_dimms_errors_is_silence() -> None:
    # DIMM scope: EDAC names DIMM_A1 and counts 1 of its errors every 20 minutes (firmware-first passing few)
    fired = sel_rule_fires(lambda minute, errors: edac(DIMM_A1=(minute // 20 + 1, 0), DIMM_B1=(0, 0)), 80)
    assert len(fired) >= 20  # 26e21c2: 0 (a rise in the window was counting)
    # the negative: EDAC counting nearly all of them, one report late
    assert sel_rule_fires(lagging_one_report) == []


def ce(record: int, when: dt.datetime, dimm: str = "DIMM_A1") -> SelEntry:
    return sel_entry(record, "Memory", "Correctable ECC", component=dimm, when=when)


# -- note 7: no stale rises: a report without EDAC, or another boot ------------------------------------------


def test_a_report_without_edac_does_not_read_a_kept_rise_as_counting() -> None:
    run = Deriver()
    run(report(at(0), sel=sel_state(count=0), edac=edac(DIMM_A1=(1, 0))))
    run(report(at(1), sel=sel_state(count=0), edac=edac(DIMM_A1=(2, 0))))  # EDAC's count rose here
    (ecc,) = of(run(report(at(2), sel=sel_state(ce(1, at(2)), count=1))), "sel_memory_ecc")  # no EDAC section
    assert (ecc.detail["edac_rose_at"], ecc.detail["edac_silent"]) == (None, True)  # 26e21c2: at(1), False
    # with the section the same rise counts
    run = Deriver()
    run(report(at(0), sel=sel_state(count=0), edac=edac(DIMM_A1=(1, 0))))
    run(report(at(1), sel=sel_state(count=0), edac=edac(DIMM_A1=(2, 0))))
    (ecc,) = of(run(report(at(2), sel=sel_state(ce(1, at(2)), count=1), edac=edac(DIMM_A1=(2, 0)))), "sel_memory_ecc")
    assert (ecc.detail["edac_rose_at"], ecc.detail["edac_silent"]) == (at(1).isoformat(), False)


def test_a_rise_of_the_previous_boot_is_dropped() -> None:
    run = Deriver()
    run(report(at(0), sel=sel_state(count=0), edac=edac(DIMM_A1=(1, 0))))
    run(report(at(1), sel=sel_state(count=0), edac=edac(DIMM_A1=(2, 0))))
    rebooted = report(at(3), boot="boot-2", sel=sel_state(ce(1, at(3)), count=1), edac=edac(DIMM_A1=(0, 0)))
    (ecc,) = of(run(rebooted), "sel_memory_ecc")
    assert (ecc.detail["edac_rose_at"], ecc.detail["edac_silent"]) == (None, True)  # 26e21c2: at(1), False
    assert run.memory["edac"]["rose"] == {}
    assert [m["boot"] for m in run.memory["edac"]["marks"]] == ["boot-2"]


# -- finding 2: a protocol switch counts by time alone, the clock's zone offset only -------------------------


def psu_failures(signals: list[SignalValue]) -> list[tuple[str, float]]:
    return [(s.subject, s.value) for s in of(signals, "psu_failure")]


def ipmi_psu(record: str = "1a", clock: str = "12:00:30") -> SelEntry:
    line = f"   {record} | 03/01/2026 | {clock} | Power Supply PS1 Status | Failure detected | Asserted\n"
    return parse_ipmitool_sel(line).value[0]


def redfish_psu(record: str = "26", created: str = "2026-03-01T12:00:30+00:00") -> SelEntry:
    entry = {
        "Id": record,
        "Created": created,
        "EntryType": "SEL",
        "SensorType": "Power Supply",
        "SensorNumber": 96,
        "EntryCode": "Assert",
        "Message": "Power supply PS1 failure detected.",
        "Severity": "Critical",
    }
    found = parse_log_entry(entry)
    assert found is not None
    return found


def test_a_repaired_psu_is_not_ticketed_again_when_redfish_takes_over() -> None:
    assert at(0) == dt.datetime(2026, 3, 1, 12, tzinfo=dt.UTC)
    run = Deriver()
    run(report(at(0), sel=sel_state(count=25, source="redfish", last_record_id=25)))  # Redfish read once
    run(report(at(0.5), sel=sel_state(count=25, source="ipmi", last_record_id=0x19)))
    assert psu_failures(run(report(at(1), sel=sel_state(ipmi_psu(), count=26, source="ipmi")))) == [("PS1", 1.0)]
    for minute in range(2, 60 * 48, 60):  # the PSU replaced, the log quiet for two days
        run(report(at(minute), sel=sel_state(count=26, source="ipmi", last_record_id=0x1A)))
    switched = run(report(at(60 * 48 + 5), sel=sel_state(redfish_psu(), count=26, source="redfish")))
    assert psu_failures(switched) == []  # 26e21c2: PS1 again (its text never matches ipmitool's)
    # a failure logged after the newest entry seen is new
    later = redfish_psu("27", "2026-03-03T12:04:00+00:00")
    found = run(report(at(60 * 48 + 6), sel=sel_state(redfish_psu(), later, count=27, source="redfish")))
    assert psu_failures(found) == [("PS1", 1.0)]


def serr(record: int, when: dt.datetime, text: str = "PCI SERR", name: str = "PCI #0x2a") -> SelEntry:
    return sel_entry(record, "Critical Interrupt", text, name=name, when=when)


def serrs(signals: list[SignalValue]) -> float:
    return sum(s.value for s in of(signals, "sel_critical_interrupt"))


def test_redfish_text_at_a_switch_counts_only_the_entry_after_the_newest_seen() -> None:
    redfish_text = "PCI SERR: A fatal PCIe error was detected on bus 59."
    run = Deriver()
    run(report(at(0), sel=sel_state(count=0, source="ipmi")))
    for minute in range(1, 11):
        run(report(at(minute), sel=sel_state(serr(minute, at(minute - 0.5)), count=minute, source="ipmi")))
    listed = [serr(100 + m, at(m - 0.5), redfish_text, "#0x2a") for m in range(1, 12)]
    assert serrs(run(report(at(11), sel=sel_state(*listed, count=11, source="redfish")))) == 1  # 26e21c2: 6


def test_a_bmc_on_local_time_switching_with_entries_near_the_reads_recounts_nothing() -> None:
    behind = dt.timedelta(hours=-6)  # ipmitool prints the BMC's local time (UTC-6) as if UTC
    for phase in (0.2, 0.5, 0.8):  # entries 12, 30 and 48 s before each report
        run = Deriver()
        run(report(at(0), sel=sel_state(count=0, source="ipmi")))
        for minute in range(1, 31):
            run(
                report(
                    at(minute), sel=sel_state(serr(minute, at(minute - phase) + behind), count=minute, source="ipmi")
                )
            )
        listed = [serr(100 + m, at(m - phase)) for m in range(1, 31)]
        newer = serr(131, at(30 - phase) + dt.timedelta(seconds=10))
        found = run(report(at(31), sel=sel_state(*listed, newer, count=31, source="redfish")))
        assert serrs(found) == 1, phase  # 26e21c2 at 0.2: 7 (bounds 18 s off the zone: 6 recounted)


def test_the_offset_is_the_one_zone_inside_the_bounds() -> None:
    assert _offset((-21612.0, -21552.0)) == -21600.0
    assert _offset((-30.0, 30.0)) == 0.0
    assert _offset((-210.0, -150.0)) == 0.0  # no zone inside: one clock assumed
    assert _offset((-1000.0, 10.0)) == 0.0  # two zones inside: not known
    assert _offset((20640.0, 20720.0)) == 20700.0  # Nepal, +5:45
    assert _offset(None) == 0.0


# -- finding 3: two ports on one reloading switch do not keep their aggregator up -------------------------


def test_a_switch_reload_taking_both_ports_of_the_active_aggregator_leaves_the_host_in_service() -> None:
    states = [
        [
            nic("p0", "0000:3b:00.0", downs=i, **LACP, bond_state="active", bond_aggregator=1),
            nic("p1", "0000:3b:00.1", **LACP, bond_state="backup", bond_aggregator=2),
            nic("p2", "0000:3c:00.0", downs=i, **LACP, bond_state="active", bond_aggregator=1),
            nic("p3", "0000:3c:00.1", **LACP, bond_state="backup", bond_aggregator=2),
        ]
        for i in range(4)
    ]
    found = flaps_of(states)
    for name in ("p0", "p2"):
        assert (found[name].detail["redundant"], found[name].detail["failover"]) == (True, "aggregator_reselection")
        assert carrier_rule(found[name]) == "nic-carrier-flapping-redundant"  # 26e21c2: held, both


# -- finding 5: Open vSwitch's ports are no bond partners; an unshown backup is a network suspect ---------


def test_an_unreported_or_unknown_backup_is_a_network_suspect(session: Session) -> None:
    for redundant, suspect in (("unreported", True), ("unknown", True), (True, False)):
        host = located(session)
        assert host.last_report_at is not None
        row = Signal(
            host_id=host.id,
            kind="nic_link_flaps",
            subject=f"br-ex-{redundant}",
            value=3.0,
            detail={"redundant": redundant},
            observed_at=host.last_report_at,
        )
        session.add(row)
        session.flush()
        why = network_suspect(session, host)
        assert (why is not None) == suspect, redundant  # 26e21c2: None for "unreported"
        if why is not None:
            assert "no port shown to carry its traffic" in why
        session.delete(row)
        session.flush()


def test_ovs_ports_are_not_called_bond_partners() -> None:
    states = [
        [
            nic("br-up", "0000:3b:00.0", downs=i).model_copy(update={"master": "ovs-system"}),
            nic("storage", "0000:3c:00.0").model_copy(update={"master": "ovs-system"}),
        ]
        for i in range(4)
    ]
    flaps = flaps_of(states)["br-up"]
    assert flaps.detail["redundant"] == "unreported"
    backup = str(flaps.detail["backup"])
    assert backup.startswith("another port under Open vSwitch is linked (storage)")
    assert "bond partner" not in backup
    assert fires("nic-carrier-flapping-redundant", flaps)


# -- finding 6: a BMC on local time has its memory entries judged in UTC ----------------------------------


def test_a_bmc_on_local_time_west_of_utc_has_its_ce_rate_judged() -> None:
    errors = [m * 60 - 6 + k * 0.5 for m in range(2, 60, 2) for k in range(12)]
    fired: dict[int, list[int]] = {}
    for hours in (0, -6):  # ipmitool prints the BMC's local time as if UTC
        run, fired[hours] = Deriver(), []
        for minute in range(60):
            listed = [t for t in errors if t <= minute * 60]
            entries = [ce(i + 1, at(t / 60) + dt.timedelta(hours=hours)) for i, t in enumerate(listed)]
            state = sel_state(*entries, count=len(listed), source="ipmi")
            for signal in of(run(report(at(minute), sel=state)), "sel_memory_ce_rate"):
                if fires("sel-memory-correctable", signal):
                    fired[hours].append(minute)
    assert len(fired[0]) >= 10
    assert len(fired[-6]) >= len(fired[0]) - 3  # 26e21c2: never (its entries hours out of the hour's buckets)
    assert fired[-6] == fired[0][-len(fired[-6]) :]  # the same reports, once the offset is learned
