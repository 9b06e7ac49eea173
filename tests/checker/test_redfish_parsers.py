"""The Redfish parsers on every real sample (shared/fixtures/redfish, read in place), and what they must
never do: read a missing field as healthy, a 0 placeholder as a reading, or a Critical entry that is not a
hardware fault as one."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.samples import sample, sample_names
from checker.parsers.catalog import contract_violation
from checker.parsers.redfish_inventory import (
    firmware_from_collection_id,
    parse_collection_links,
    parse_firmware,
    parse_memory,
    parse_memory_metrics_alone,
)
from checker.parsers.redfish_log import is_log_cleared, page_info, parse_log_entries, parse_log_entry
from checker.parsers.redfish_sensors import parse_power, parse_sensor, parse_thermal
from checker.schemas import SelEntry
from remediator.derive.sel import classify, is_clear

UTC = dt.UTC


def load(name: str) -> Any:
    return json.loads(sample(f"redfish/{name}"))


def entries(name: str) -> list[SelEntry]:
    parsed = parse_log_entries(load(name))
    assert contract_violation(parsed) is None
    return parsed.value


def by_id(found: list[SelEntry]) -> dict[str, SelEntry]:
    return {e.entry_id or "": e for e in found}


# -- every sample goes through its parser ----------------------------------------------------------

PARSERS = {
    "entries": lambda doc: parse_log_entries(doc),
    "thermal": parse_thermal,
    "power": parse_power,
    "memorymetrics": parse_memory_metrics_alone,
    "memory-": parse_memory,
    "firmwareinventory-collection": parse_collection_links,
    "firmwareinventory-member": parse_firmware,
}


def parser_for(name: str) -> Any:
    return next(parser for marker, parser in PARSERS.items() if marker in name)


@pytest.mark.parametrize("name", sample_names("redfish"))
def test_every_redfish_sample_parses_cleanly(name: str) -> None:
    parsed = parser_for(name)(json.loads(sample(name)))
    assert contract_violation(parsed) is None
    assert parsed.value is not None
    assert parsed.value != []


# -- log entries ---------------------------------------------------------------------------------


def test_dell_sel_intrusion_cleared_log_and_offsets() -> None:
    found = by_id(entries("dell-idrac9-r650-sel-entries-chassis-intrusion-post-critical-log-cleared.json"))
    assert len(found) == 16
    opened, closed = found["15"], found["16"]
    assert (opened.sensor_type, opened.direction, opened.sensor_name) == ("Physical Security", "asserted", "#0x73")
    assert opened.event == "General Chassis intrusion: The chassis is open while the power is off."
    assert closed.direction == "deasserted"
    # -05:00 (summer) and -06:00 (winter) both land in UTC
    assert opened.timestamp == dt.datetime(2022, 8, 5, 22, 58, 52, tzinfo=UTC)
    assert found["3"].timestamp == dt.datetime(2022, 3, 5, 3, 1, 16, tzinfo=UTC)
    cleared = found["1"]
    assert cleared.sensor_type == "Event Logging Disabled"
    assert is_log_cleared(cleared)
    assert is_clear(cleared)
    assert not any(is_log_cleared(e) for k, e in found.items() if k != "1")
    # an asserted intrusion is recorded as chassis_intrusion (no rule: in a data center it is a technician);
    # its deassertion, POST progress and the LED panel are no SEL kind
    kinds = {k: classify(e) for k, e in found.items()}
    assert {k for k, kind in kinds.items() if kind is not None} == {"4", "9", "11", "13", "15"}
    assert {kinds[k] for k in ("4", "9", "11", "13", "15")} == {"chassis_intrusion"}
    assert opened.record_id == 15
    assert opened.log_service == "/redfish/v1/Managers/iDRAC.Embedded.1/LogServices/Sel/Entries"


def test_dell_lclog_critical_entries_that_are_not_hardware_faults_map_to_no_hardware_kind() -> None:
    found = entries("dell-idrac9-r650-lclog-entries-page1-of-4351-nextlink-false-critical.json")
    assert len(found) == 50
    critical = [e for e in found if '"Severity":"Critical"' in e.raw]
    assert len(critical) == 6
    assert all("SWC9005" in e.raw for e in critical)
    for entry in found:
        assert entry.sensor_type in ("Dell Audit", "Dell Configuration"), entry
        assert classify(entry) is None
        assert entry.component is None
        assert entry.direction is None
    repeat = next(e for e in found if "LOG007" in e.raw)
    assert "repeated" in repeat.event
    assert not is_log_cleared(repeat)
    assert page_info(load("dell-idrac9-r650-lclog-entries-page1-of-4351-nextlink-false-critical.json")) == (
        4351,
        "/redfish/v1/Managers/iDRAC.Embedded.1/LogServices/Lclog/Entries?$skip=50",
    )


def test_dell_message_ids_for_hardware_do_map() -> None:
    """The positive side of the table: a Dell MEM0701 / PSU0003 in the Lifecycle log is a hardware kind."""
    base = {"EntryType": "Oem", "OemRecordFormat": "Dell", "Created": "2024-01-02T03:04:05-05:00"}
    memory = parse_log_entry(
        {**base, "Id": "9", "MessageId": "MEM0701", "Message": "Correctable memory error rate exceeded for DIMM_A1."}
    )
    psu = parse_log_entry(
        {**base, "Id": "10", "MessageId": "IDRAC.2.8.PSU0003", "Message": "Power supply 2 has lost input."}
    )
    assert memory is not None
    assert psu is not None
    assert (memory.sensor_type, classify(memory), memory.component) == ("Memory", "sel_memory_ecc", "DIMM_A1")
    assert (psu.sensor_type, classify(psu), psu.component) == ("Power Supply", "psu_input_lost", "PS2")
    audit = parse_log_entry({**base, "Id": "11", "MessageId": "USR0030", "Message": "Successfully logged in."})
    assert audit is not None
    assert audit.sensor_type == "Dell Oem"
    assert classify(audit) is None


def test_openbmc_registry_and_hpe_memory_wording() -> None:
    """Entries in the shapes OpenBMC (bmcweb's registry) and HPE iLO write them: our own examples."""
    openbmc = parse_log_entry(
        {
            "Id": "1700000000_1",
            "EntryType": "Event",
            "Created": "2024-03-01T10:00:00+00:00",
            "MessageId": "OpenBMC.0.1.MemoryECCCorrectable",
            "Message": "Memory ECC correctable error. Socket=0 Channel=A DIMM=1 Rank=0.",
        }
    )
    assert openbmc is not None
    assert (openbmc.sensor_type, classify(openbmc), openbmc.record_id) == ("Memory", "sel_memory_ecc", 0)
    other = parse_log_entry({"Id": "2", "MessageId": "OpenBMC.0.1.BMCKernelPanic", "Message": "BMC rebooted."})
    assert other is not None
    assert (other.sensor_type, classify(other)) == ("Unknown", None)
    hpe = parse_log_entry(
        {
            "Id": "7",
            "Message": "Corrected Memory Error threshold exceeded (Processor 1, DIMM 3)",
            "Oem": {"Hpe": {"Class": 19, "ClassDescription": "Main Memory", "Repaired": False}},
        }
    )
    assert hpe is not None
    assert (hpe.sensor_type, hpe.direction, classify(hpe), hpe.component) == (
        "Memory",
        "asserted",
        "sel_memory_ecc",
        "PROC 1 DIMM 3",  # as HPE's Memory resources name it (DeviceLocator 'PROC 1 DIMM 1')
    )


def test_hpe_iml_psu_input_loss_redundancy_repaired_and_unset_clock() -> None:
    parsed = parse_log_entries(
        load("hpe-ilo5-dl325-gen10plus-iml-entries-psu-input-loss-nic-link-failure-trimmed.json")
    )
    found = by_id(parsed.value)
    assert len(found) == 25
    lost, redundancy = found["91"], found["92"]
    assert (lost.sensor_type, lost.direction, lost.component, classify(lost)) == (
        "Power Supply",
        "asserted",
        "PS1",
        "psu_input_lost",
    )
    assert (redundancy.sensor_type, classify(redundancy)) == ("Power Unit", "power_unit_fault")
    repaired = found["97"]  # the same message, Repaired true and Severity OK: the condition ended
    assert repaired.direction == "deasserted"
    assert classify(repaired) is None
    nic = found["99"]
    assert nic.sensor_type == "HPE Network"
    assert nic.direction == "asserted"
    assert classify(nic) is None
    assert found["77"].timestamp is None
    assert any("77" in p and "0000-00-00" in p for p in parsed.problems)


def test_supermicro_correctable_ecc_without_severity_names_the_dimm_from_the_message() -> None:
    found = entries("supermicro-x10sdv-log1-entries-correctable-ecc-dimmb1-x64-no-severity.json")
    ecc = [e for e in found if classify(e) == "sel_memory_ecc"]
    assert len(ecc) == 64
    assert {(e.sensor_type, e.component, e.direction) for e in ecc} == {("Memory", "DIMMB1", "asserted")}
    assert ecc[0].timestamp == dt.datetime(2018, 8, 12, 12, 46, 14, tzinfo=UTC)
    oob = by_id(found)["65"]
    assert oob.sensor_type == "OEM reserved"
    assert classify(oob) is None


def test_dmtf_mockup_threshold_entries() -> None:
    found = entries("dmtf-public-rackmount1-log1-entries-sel-temperature-upper-critical-mockup.json")
    assert [(e.sensor_type, e.direction, e.event) for e in found] == [
        ("Temperature", "asserted", "Upper Critical going high: Temperature threshold exceeded")
    ] * 2


@pytest.mark.parametrize(
    ("doc", "problem"),
    [
        ({"Members": "no"}, "without a Members list"),
        ({"Members": [1, {"Message": "no id"}]}, "not an object"),
        ([], "not a JSON object"),
    ],
)
def test_malformed_collections_are_problems(doc: object, problem: str) -> None:
    parsed = parse_log_entries(doc)
    assert parsed.value == []
    assert any(problem in p for p in parsed.problems)


def test_a_non_numeric_id_is_kept_as_served_with_record_id_zero() -> None:
    entry = parse_log_entry(
        {"Id": "ab-12", "Created": "2024-05-01T10:00:00+02:00", "Message": "x", "SensorType": "Fan"}
    )
    assert entry is not None
    assert (entry.entry_id, entry.record_id) == ("ab-12", 0)
    assert entry.timestamp == dt.datetime(2024, 5, 1, 8, tzinfo=UTC)
    assert parse_log_entry({"Message": "no id"}) is None
    naive = parse_log_entry({"Id": "1", "Created": "2024-05-01T10:00:00", "Message": "x"})
    assert naive is not None
    assert naive.timestamp is None


# -- sensors --------------------------------------------------------------------------------------


def test_supermicro_absent_sensors_are_not_readings() -> None:
    parsed = parse_thermal(load("supermicro-x10sdv-thermal-all-sensors-absent-zero-readings.json"))
    assert parsed.value.readings == []
    assert parsed.value.absent == 12


def test_an_enabled_fan_reading_zero_is_a_reading_not_a_placeholder() -> None:
    """Review r5 finding 11: a stopped fan whose BMC gives State Enabled and no Health or thresholds is a
    reading of 0 (status ns), not the Supermicro placeholder (0, all thresholds 0, no Health, no State)."""
    stopped = {"Name": "FAN1", "Reading": 0, "ReadingUnits": "RPM", "Status": {"State": "Enabled"}}
    got = parse_thermal({"@odata.id": "/redfish/v1/Chassis/1/Thermal", "Fans": [stopped]}).value
    assert [(r.name, r.reading, r.status) for r in got.readings] == [("FAN1", 0, "ns")]
    assert got.absent == 0
    placeholder = {"Name": "FAN1", "Reading": 0, "LowerThresholdCritical": 0}
    got = parse_thermal({"@odata.id": "/redfish/v1/Chassis/1/Thermal", "Fans": [placeholder]}).value
    assert (got.readings, got.absent) == ([], 1)


def test_dell_thermal_readings_thresholds_and_fan_redundancy() -> None:
    got = parse_thermal(load("dell-idrac9-r650-thermal-healthy-16-fans-redundancy.json")).value
    assert len(got.readings) == 20
    assert got.absent == 0
    names = {r.name: r for r in got.readings}
    inlet = names["System Board Inlet Temp"]
    assert (inlet.kind, inlet.status, inlet.reading, inlet.unit) == ("temperature", "ok", 18.0, "degrees C")
    assert inlet.thresholds == {"lcr": -7.0, "lnc": 3.0, "unc": 38.0, "ucr": 42.0}
    fan = names["System Board Fan1A"]
    assert (fan.kind, fan.unit, fan.thresholds) == ("fan", "RPM", {"lcr": 480.0, "lnc": 840.0})
    assert [(g.name, g.of, g.health) for g in got.redundancy] == [("System Board Fan Redundancy", "fan", "OK")]


def test_threshold_crossing_and_missing_health_statuses() -> None:
    base = {"Name": "T", "ReadingCelsius": 99, "UpperThresholdCritical": 95, "UpperThresholdFatal": 105}
    hot = parse_thermal({"Temperatures": [{**base, "Status": {"State": "Enabled", "Health": "OK"}}]}).value
    assert hot.readings[0].status == "ucr"
    silent = parse_thermal({"Temperatures": [{**base, "ReadingCelsius": 50, "Status": {"State": "Enabled"}}]}).value
    assert silent.readings[0].status == "ns"  # no Health served: not "ok"


def test_hpe_empty_bays_are_not_failed_psus() -> None:
    got = parse_power(load("hpe-ilo5-xl675d-gen10plus-a40-power-empty-bays-absent-warning.json")).value
    bays = {p.bay: p for p in got.psus}
    assert set(bays) == {1, 2, 3, 4, 5, 6}
    for empty in (1, 6):
        assert (bays[empty].present, bays[empty].health) == (False, None)
    assert bays[2].present
    assert bays[2].line_input_voltage == 206.0
    assert bays[2].model == "P24681-B21"
    psu_readings = [r for r in got.readings if r.kind == "psu"]
    assert sorted(r.name for r in psu_readings) == ["PS2 Status", "PS3 Status", "PS4 Status", "PS5 Status"]
    assert all(r.status == "ok" for r in psu_readings)
    assert got.absent == 2


def test_a_critical_psu_is_a_discrete_reading_and_no_sensor_past_a_threshold() -> None:
    """Its health goes to the redfish section's PSU (judged there); as a sensor it is present, as ipmitool's
    discrete 'PS2 Status' is, so sensor-critical-power does not open a second ticket for it."""
    from remediator.derive.sensors import sensor_signals

    doc = {"PowerSupplies": [{"MemberId": "1", "Name": "PS2", "LineInputVoltage": 0,
                              "Status": {"State": "Enabled", "Health": "Critical"}}]}  # fmt: skip
    got = parse_power(doc).value
    assert [p.health for p in got.psus] == ["Critical"]
    assert [r.status for r in got.readings if r.kind == "psu"] == ["ok"]
    assert not [s for s in sensor_signals(got.readings) if s.kind == "sensor_critical"]
    assert got.redundancy == []


def test_implausible_line_input_voltage_is_flagged_not_believed() -> None:
    parsed = parse_power(load("intel-s2600bpb-power-psu-lineinputvoltage-572-and-13.json"))
    psus = parsed.value.psus
    assert [(p.line_input_voltage, p.implausible_input_voltage) for p in psus] == [(None, 572.0), (None, 13.0)]
    assert len([p for p in parsed.problems if "not believed" in p]) == 2
    volts = {r.name: r for r in parsed.value.readings if r.kind == "voltage"}
    assert volts["BB +12.0V"].status == "ok"
    assert volts["BB +12.0V"].thresholds["ucr"] == pytest.approx(13.642, abs=1e-3)
    [group] = parsed.value.redundancy
    assert (group.of, group.mode, group.state, group.min_needed, group.members) == ("psu", "N+m", "Disabled", 1, 2)
    good = parse_power({"PowerSupplies": [{"MemberId": "0", "LineInputVoltage": 230, "Status": {"State": "Enabled"}}]})
    assert good.value.psus[0].line_input_voltage == 230.0
    assert not good.problems


def test_sensor_resource_of_the_newer_schema() -> None:
    """Sensor.v1_x (ThermalSubsystem/PowerSubsystem point at these): our own minimal example."""
    doc = {
        "Id": "CPU0Temp",
        "Name": "CPU 0 Temp",
        "ReadingType": "Temperature",
        "Reading": 101.0,
        "Thresholds": {"UpperCritical": {"Reading": 100.0}, "UpperFatal": {"Reading": 110.0}},
        "Status": {"State": "Enabled", "Health": "Critical"},
    }
    [reading] = parse_sensor(doc).value.readings
    assert (reading.kind, reading.unit, reading.status, reading.thresholds) == (
        "temperature",
        "degrees C",
        "ucr",
        {"ucr": 100.0, "unr": 110.0},
    )
    assert parse_sensor({**doc, "Status": {"State": "Absent"}}).value.readings == []


# -- inventory ------------------------------------------------------------------------------------


def test_dell_dimm_without_memory_location_and_alarm_trips_only() -> None:
    module = parse_memory(
        load("dell-idrac9-r650-memory-dimm-socket-a1-no-memorylocation.json"),
        load("dell-idrac9-r650-memorymetrics-dimm-a1-alarmtrips-only-no-counts.json"),
    ).value
    assert module is not None
    assert (module.kind, module.socket, module.slot, module.location_source, module.location_base) == (
        "dimm",
        1,
        None,
        "oem_hint",
        None,
    )
    assert (module.serial, module.part_number, module.bank_label) == ("19949A6B", "M393A1K43DB2-CWE", "A")
    assert module.metrics_read
    assert module.alarm_trips["CorrectableECCError"] is False
    # flags only: never "0 errors"
    assert (module.ce_current_period, module.ce_lifetime, module.ue_lifetime) == (None, None, None)


def test_memory_location_one_based_and_zero_based_as_served() -> None:
    hpe = parse_memory(load("hpe-ilo5-dl325-gen10plus-memory-proc1dimm1-memorylocation.json")).value
    smc = parse_memory(load("supermicro-x10sdv-memory-dimmb1-health-ok.json")).value
    assert hpe is not None
    assert smc is not None
    assert (hpe.socket, hpe.memory_controller, hpe.channel, hpe.slot, hpe.location_base) == (1, 3, 3, 1, 1)
    assert (smc.socket, smc.memory_controller, smc.channel, smc.slot, smc.location_base) == (0, 0, 1, 0, 0)
    assert hpe.metrics_read is False
    assert hpe.ce_lifetime is None
    assert smc.health == "OK"  # health carries no CE history: the log holds 64 CEs for this DIMM


def test_gpu_hbm_metrics_are_not_a_dimm() -> None:
    module = parse_memory_metrics_alone(
        load("supermicro-gb300-hgx-gpu0-hbm-memorymetrics-lifetime-ecc-row-remapping.json")
    ).value
    assert module is not None
    assert (module.kind, module.id, module.ce_lifetime, module.ue_lifetime) == ("gpu_hbm", "GPU_0_DRAM_0", 0, 0)
    dimm_counts = parse_memory(
        {"@odata.id": "/redfish/v1/Systems/1/Memory/d1", "Id": "d1", "MemoryDeviceType": "DDR5"},
        {"CurrentPeriod": {"CorrectableECCErrorCount": 12}, "LifeTime": {"CorrectableECCErrorCount": 3456}},
    ).value
    assert dimm_counts is not None
    assert (dimm_counts.kind, dimm_counts.ce_current_period, dimm_counts.ce_lifetime) == (
        "dimm",
        12,
        3456,
    )


def test_firmware_inventory_collection_and_member() -> None:
    links = parse_collection_links(
        load("dell-idrac9-r650-firmwareinventory-collection-installed-current-previous.json")
    )
    assert len(links.value) == 33
    assert not links.problems
    by_id_ = {f.id: f for uri in links.value if (f := firmware_from_collection_id(uri)) is not None}
    bios = by_id_["Installed-159-1.2.4__BIOS.Setup.1-1"]
    assert (bios.component, bios.version, bios.slot) == ("bios", "1.2.4", "installed")
    rollback = by_id_["Previous-25227-5.00.20.10__iDRAC.Embedded.1-1"]
    assert (rollback.component, rollback.version, rollback.slot) == ("bmc", "5.00.20.10", "previous")
    assert by_id_["Installed-0-NotAvailable__TPM.Integrated.1-1"].version is None
    assert by_id_["Installed-108024-00.17.28__PSU.Slot.1"].component == "psu"
    disk = parse_firmware(load("dell-idrac9-r650-firmwareinventory-member-disk-bay0-dd02.json")).value
    assert disk is not None
    assert (disk.component, disk.version, disk.device, disk.updateable) == (
        "disk",
        "DD02",
        "Disk.Bay.0:Enclosure.Internal.0-1:RAID.SL.3-1",
        True,
    )


# -- never raise ----------------------------------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=6),
    max_leaves=30,
)
KEYS = st.sampled_from(
    ["Members", "Id", "Created", "Status", "Temperatures", "Fans", "PowerSupplies", "MemoryLocation", "Oem"]
)


@pytest.mark.parametrize(
    "parser", [parse_log_entries, parse_thermal, parse_power, parse_sensor, parse_memory, parse_firmware]
)
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=st.dictionaries(KEYS, JSON, max_size=5) | JSON)
def test_arbitrary_json_never_raises(parser: Any, doc: object) -> None:
    assert contract_violation(parser(doc)) is None
