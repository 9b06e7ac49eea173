"""The demo fleet speaks both BMC protocols (checker/sim/redfish.py): its Redfish classes (the Dell R650 class
compute-icx-2s, the Supermicro class storage-epyc-1s) report the `redfish` section and their SEL entries as the
vendor's Redfish log entries, read by the agent's own parser; the other classes stay IPMI. The centre reads both
the same way (every event classifies alike), a Redfish host's DIMM fault reaches a ticket through the real
ingest path, and a firmware update through the BMC changes the simulated host as the real one would."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from checker.schemas import Report, SelEntry
from checker.sim import SimulatedFleet, VirtualHost, logs
from checker.sim.redfish import VENDORS
from checker.sim.redfish_logs import as_redfish
from checker.sim.standalone import host_state, restore_host, standalone_host
from remediator import runner
from remediator.derive.capacity_sel import sel_kind
from remediator.derive.sel import classify
from remediator.ingest import ingest
from remediator.models import Host, Remediation
from tests.remediator.test_default_pack import RULES, START, STEP, register
from ticketing.models import Ticket

T0 = dt.datetime(2026, 6, 1, tzinfo=dt.UTC)
REDFISH_CLASSES = {"compute-icx-2s": "dell", "storage-epyc-1s": "supermicro"}


def reports_of(host: VirtualHost, minutes: range) -> list[Report]:
    return [host.report(T0 + dt.timedelta(minutes=m)) for m in minutes]


def fleet_host(hardware_class: str, kind: str | None = None, dimm: int = 1) -> VirtualHost:
    fleet = SimulatedFleet(14, seed=3, fault_fraction=0.0)
    host = next(h for h in fleet.hosts if h.hardware.name == hardware_class)
    if kind is not None:
        host.inject(fleet.fault(kind, dimm))  # type: ignore[arg-type]
    return host


def test_the_demo_fleet_shows_both_protocols() -> None:
    fleet = SimulatedFleet(14, seed=3, fault_fraction=0.0)
    first = {r.host.hostname: r for r in fleet.reports(T0)}
    later = {r.host.hostname: r for r in fleet.reports(T0 + dt.timedelta(minutes=1))}
    rows = {row["hostname"]: row for row in fleet.inventory()}
    speaking = set()
    for host in fleet.hosts:
        report, sel = first[host.hostname], first[host.hostname].observations.sel
        assert sel is not None
        assert sel.entries
        vendor = REDFISH_CLASSES.get(host.hardware.name)
        if vendor is None:  # IPMI: ipmitool read the SEL, no Redfish anywhere
            assert report.observations.redfish is None
            assert "redfish" not in report.collectors
            assert report.collectors["sel"].source == "ipmitool"
            assert all(e.log_service is None and e.entry_id is None for e in sel.entries)
            assert "labels" not in rows[host.hostname]
            continue
        speaking.add(host.hardware.name)
        service = VENDORS[vendor].log_entries
        state = report.observations.redfish
        assert state is not None
        assert state.vendor == VENDORS[vendor].root_vendor
        assert (report.collectors["redfish"].status, report.collectors["sel"].status) == ("ok", "unavailable")
        assert all(e.log_service == service and e.entry_id == str(e.record_id) for e in sel.entries)
        assert all(json.loads(e.raw)["Id"] == e.entry_id for e in sel.entries)  # the parser's record of the entry
        [log] = state.log_services
        assert (log.entries_uri, log.first_read, log.entry_count) == (service, True, sel.entry_count)
        assert log.newest_id == str(max(e.record_id for e in sel.entries))
        assert state.memory is not None
        assert len(state.memory) == len(host.dimms)
        assert {m.serial for m in state.memory} == {d.serial for d in host.dimms}
        assert state.firmware is not None
        versions = {f.component: f.version for f in state.firmware}
        assert versions == {"bios": host.bios_version, "bmc": host.bmc_firmware}
        assert [p.health for p in state.psus] == ["OK", "OK"]
        # inventory is the collector's hourly read: not in the next minute's report; the log cursor is kept
        again = later[host.hostname].observations.redfish
        assert again is not None
        assert (again.memory, again.firmware) == (None, None)
        assert again.log_services[0].first_read is False
        assert rows[host.hostname]["labels"] == "bmc_protocol=redfish"
    assert speaking == set(REDFISH_CLASSES)


def test_a_dell_dimm_uncorrectable_error_arrives_in_idracs_wording() -> None:
    host = fleet_host("compute-icx-2s", "dimm_ue")
    reports = reports_of(host, range(0, 3))
    slot = host.dimms[1].locator
    [entry] = [e for r in reports for e in r.observations.sel.entries if e.sensor_type == "Memory"]
    assert entry.event == (
        f"Uncorrectable ECC: Multi-bit memory errors detected on a memory device at location(s) DIMM_{slot}."
    )
    assert (entry.component, entry.direction) == (f"DIMM_{slot}", "asserted")
    assert classify(entry) == "sel_memory_ecc"
    memory = reports[0].observations.redfish.memory
    dimm = next(m for m in memory if m.device_locator == f"DIMM {slot}")
    # iDRAC keeps alarm flags, not counts: null, never 0
    assert (dimm.alarm_trips["UncorrectableECCError"], dimm.ce_lifetime, dimm.ue_lifetime) == (True, None, None)
    assert (dimm.health, dimm.location_source, dimm.socket) == ("Critical", "oem_hint", 1)


def test_supermicro_logs_correctable_ecc_and_counts_them_across_a_reboot() -> None:
    host = fleet_host("storage-epyc-1s", "dimm_ce_storm")
    locator = host.dimms[1].locator
    reports = reports_of(host, range(0, 3))
    entries = [e for r in reports for e in r.observations.sel.entries if e.sensor_type == "Memory"]
    assert [e.event for e in entries] == [f"[ OEM ] Correctable ECC @{locator}"]  # at most one an hour
    assert entries[0].component == locator
    hour = host.report(T0 + dt.timedelta(minutes=61))  # the collector's next inventory read
    first = next(m for m in hour.observations.redfish.memory if m.device_locator == locator)
    assert (first.socket, first.channel, first.location_base) == (0, 1, 0)  # MemoryLocation, as served (0-based)
    lifetime = first.ce_lifetime
    assert lifetime is not None
    assert lifetime > 0
    assert [e.event for e in hour.observations.sel.entries if e.sensor_type == "Memory"] == [entries[0].event]
    host.apply("reboot", {"kind": "cold"})  # EDAC's counters restart; the BMC's lifetime count does not
    after = host.report(T0 + dt.timedelta(minutes=125))
    edac = next(d for c in after.observations.edac.controllers for d in c.dimms if d.label == host.dimms[1].label)
    again = next(m for m in after.observations.redfish.memory if m.device_locator == locator)
    assert again.ce_lifetime > lifetime
    assert again.ce_lifetime > edac.ce_count > 0
    healthy = next(m for m in after.observations.redfish.memory if m.device_locator == host.dimms[0].locator)
    assert (healthy.ce_lifetime, healthy.health) == (0, "OK")


# Every kind of entry the simulation writes (checker/sim: events, capacity, actions), as ipmitool lists it.
SIM_SEL_LINES = [
    ("Memory #0x53", "Uncorrectable ECC", "Asserted", "A3"),
    ("Memory #0x53", "Correctable ECC", "Asserted", "P1-DIMMB1"),
    ("Memory #0x53", "Memory Device Disabled", "Asserted", "DIMM A3"),
    ("Power Supply PS1 Status", "Failure detected", "Asserted", ""),
    ("Power Supply PS2 Status", "Power Supply AC lost", "Asserted", ""),
    ("Power Unit PS Redundancy", "Redundancy Lost", "Asserted", ""),
    ("Fan System Fan 3", "Lower Non-critical going low ", "Asserted", "Reading 840 < Threshold 1200 RPM"),
    ("Fan System Fan 3", "Lower Critical going low ", "Asserted", "Reading 0 < Threshold 600 RPM"),
    ("Temperature CPU2 Temp", "Upper Non-critical going high ", "Asserted", "Reading 94 > Threshold 85 degrees C"),
    ("Temperature CPU2 Temp", "Upper Critical going high ", "Asserted", "Reading 94 > Threshold 90 degrees C"),
    ("Temperature CPU2 Temp", "Upper Critical going high ", "Deasserted", "Reading 55 > Threshold 90 degrees C"),
    ("Temperature Inlet Temp", "Upper Non-critical going high ", "Deasserted", "Reading 30 > Threshold 40 degrees C"),
    ("Fan Fan Redundancy", "Redundancy Lost", "Asserted", ""),
    ("Event Logging Disabled SEL Fullness", "Log area reset/cleared", "Asserted", ""),
    ("System Event BIOS Evt Sensor", "Timestamp Clock Sync", "Asserted", ""),
    ("System Event BIOS Evt Sensor", "OEM System boot event", "Asserted", ""),
    ("Critical Interrupt PCIe Cor Sensor", "", "Asserted", ""),
    ("OS Critical Stop OS Stop", "Run-time critical stop", "Asserted", ""),
    ("Version Change FW Update Status", "", "Asserted", ""),
    ("Power Unit Pwr Unit Status", "Power off/down", "Deasserted", ""),
]


def _ipmi(line: tuple[str, str, str, str]) -> SelEntry:
    [entry] = logs.sel_entries([logs.sel_line(7, T0, line[0], line[1], line[2], line[3])])
    return entry


@pytest.mark.parametrize("vendor", sorted(VENDORS))
@pytest.mark.parametrize("line", SIM_SEL_LINES, ids=lambda line: f"{line[0]}:{line[1].strip()}")
def test_the_centre_reads_each_simulated_event_alike_over_either_protocol(
    vendor: str, line: tuple[str, str, str, str]
) -> None:
    ipmi = _ipmi(line)
    redfish = as_redfish(ipmi, vendor, VENDORS[vendor].log_entries)
    assert (classify(redfish), sel_kind(redfish)) == (classify(ipmi), sel_kind(ipmi))
    assert (redfish.sensor_type, redfish.direction, redfish.timestamp) == (ipmi.sensor_type, ipmi.direction, T0)
    assert (redfish.record_id, redfish.entry_id, redfish.log_service) == (7, "7", VENDORS[vendor].log_entries)


def test_the_centre_would_not_read_a_redfish_entry_it_could_not_classify_as_the_same() -> None:
    """The equivalence above can fail: an entry whose wording the parser cannot place is another kind."""
    ipmi = _ipmi(("Power Supply PS1 Status", "Failure detected", "Asserted", ""))
    garbled = as_redfish(ipmi.model_copy(update={"event": "Presence detected"}), "dell", "/x")
    assert classify(garbled) != classify(ipmi)


# -- a firmware update through the BMC, on the simulated host ----------------------------------------


def test_a_bmc_image_runs_at_once_and_a_bios_waits_for_a_cold_boot() -> None:
    host = standalone_host("rf-1", hardware_class="compute-icx-2s", faults=["firmware_old_bios", "firmware_old_bmc"])
    old_bios, old_bmc = host.bios_version, host.bmc_firmware
    host.report(T0)
    done = host.apply("update_bmc_firmware", {"component": "bmc", "version": "7.00.00.00"})
    assert done["changed"]["pending_reboot"] is False
    assert (host.bmc_firmware, done["changed"]["previous"], done["changed"]["cleared"]) == (
        "7.00.00.00",
        old_bmc,
        ["firmware_old_bmc"],
    )
    staged = host.apply("update_bmc_firmware", {"component": "bios"})  # the class's current release
    assert staged["changed"]["pending_reboot"] is True
    assert (host.bios_version, host.bios_pending) == (old_bios, host.hardware.bios_version)
    host.apply("reboot", {"kind": "kexec"})  # no POST: the staged image does not run
    assert host.bios_version == old_bios
    assert host.has("firmware_old_bios")
    # the agent's state file keeps the staged image across an agent restart
    host.redfish.ce_lifetime[host.dimms[0].serial] += 42  # as a DIMM's errors would have counted it
    saved = json.loads(json.dumps(host_state(host)))
    fresh = standalone_host("rf-1", hardware_class="compute-icx-2s", faults=["firmware_old_bios", "firmware_old_bmc"])
    restore_host(fresh, saved)
    assert (fresh.bios_pending, fresh.bmc_firmware) == (host.hardware.bios_version, "7.00.00.00")
    assert fresh.redfish.ce_lifetime == host.redfish.ce_lifetime  # the BMC's count outlives the agent
    assert fresh.redfish.ce_lifetime[fresh.dimms[0].serial] == 42
    cycled = fresh.apply("power_cycle", {})
    assert cycled["changed"]["bios_applied"] == fresh.hardware.bios_version == fresh.bios_version
    assert fresh.bios_pending is None
    assert not fresh.has("firmware_old_bios")
    inventory = fresh.report(T0 + dt.timedelta(minutes=5)).observations.redfish
    assert {f.component: f.version for f in inventory.firmware} == {"bios": fresh.bios_version, "bmc": "7.00.00.00"}


def test_an_ipmi_hosts_bmc_updates_nothing() -> None:
    host = standalone_host("ipmi-1", hardware_class="compute-skx-2s")
    with pytest.raises(ValueError, match="speaks IPMI only"):
        host.apply("update_bmc_firmware", {"component": "bmc"})


def test_the_bmc_updates_a_host_that_is_off() -> None:
    host = standalone_host("rf-2", hardware_class="storage-epyc-1s", faults=["powered_off"])
    assert host.apply("update_bmc_firmware", {"component": "bmc", "version": "3.01"})["outcome"] == "done"
    assert host.apply("reboot", {})["outcome"] == "failed"  # the host itself does not answer


# -- end to end: a Redfish host's DIMM fault reaches a ticket ------------------------------------------


def test_a_redfish_hosts_dimm_fault_reaches_a_ticket_through_ingest(session: Session) -> None:
    fleet = SimulatedFleet(40, seed=5, fault_fraction=0.0)
    virtual = next(h for h in fleet.hosts if h.hardware.name == "compute-icx-2s")
    virtual.inject(fleet.fault("dimm_ue", 2))
    register(session, fleet)
    remediation = None
    for step in range(12):
        wire = [Report.model_validate_json(r.model_dump_json()) for r in fleet.reports(START + step * STEP)]
        ingest(session, wire, ruleset=RULES)
        host = session.scalars(select(Host).where(Host.hostname == virtual.hostname)).one()
        remediation = session.scalars(select(Remediation).where(Remediation.host_id == host.id)).first()
        if remediation is not None:
            break
    assert remediation is not None, "the DIMM's uncorrectable error planned nothing"
    assert host.labels == {"bmc_protocol": "redfish"}
    for _ in range(4):  # drain (no hook in a test: recorded), then the ticket
        runner.advance(session, remediation.id, ruleset=RULES)
    ticket = session.scalars(select(Ticket).where(Ticket.remediation_id == remediation.id)).one()
    assert ticket.part_type == "dimm"
    slot = virtual.dimms[2].locator
    evidence = json.dumps(ticket.evidence)
    assert f"location(s) DIMM_{slot}" in evidence  # the iDRAC's own words, from its Redfish SEL
    assert VENDORS["dell"].log_entries in evidence
