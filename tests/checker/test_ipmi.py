"""IPMI: SEL listings (ipmitool list/elist/CSV, FreeIPMI), sel info, sdr and mc info."""

from __future__ import annotations

import datetime as dt

from bench.samples import sample
from checker.parsers.ipmi import parse_mc_info, parse_sdr, parse_sel_info
from checker.parsers.ipmi_sel import component_of, parse_freeipmi_sel, parse_ipmitool_sel, parse_sel, split_sensor
from checker.schemas import MAX_SEL_ENTRIES

UTC = dt.UTC


def test_sel_list_correctable_ecc_names_cpu0_dimm8() -> None:
    parsed = parse_sel(sample("ipmi-sel/ipmitool-sel-list-correctable-ecc-cpu0-dimm8-chassis-intrusion.txt"))
    entries = parsed.value
    assert [e.record_id for e in entries] == [0x17, 0x18, 0x19, 0x1A, 0x1B, 0x1C, 0x1D, 0x1E, 0x1F, 0x20, 0x3E]
    ecc = [e for e in entries if e.event == "Correctable ECC"]
    assert len(ecc) == 8
    assert {(e.sensor_type, e.direction, e.component) for e in ecc} == {("Memory", "asserted", "CPU 0 DIMM 8")}
    assert ecc[0].timestamp == dt.datetime(2015, 1, 27, 11, 41, 8, tzinfo=UTC)
    intrusion = entries[2]
    assert (intrusion.sensor_type, intrusion.sensor_name, intrusion.event) == (
        "Physical Security",
        "#0x51",
        "General Chassis intrusion",
    )
    assert (entries[0].sensor_type, entries[0].event) == ("OS Boot", "C: boot completed")
    # The odd threshold-style last line is kept (readable) and flagged.
    assert entries[-1].record_id == 0x3E
    assert entries[-1].direction is None
    assert "2.54 Volts" in entries[-1].event
    assert len(parsed.problems) == 1
    assert "VBAT" in parsed.problems[0]


def test_sel_elist_fan_redundancy_bmc_fw_psu_intrusion() -> None:
    parsed = parse_ipmitool_sel(
        sample("ipmi-sel/ipmitool-sel-elist-intel-s2600-fan-redundancy-bmcfw-psu-intrusion.txt")
    )
    assert parsed.problems == []
    entries = {e.record_id: e for e in parsed.value}
    assert len(entries) == 49 + 6
    first = entries[1]
    assert (first.sensor_type, first.sensor_name, first.event, first.direction) == (
        "Event Logging Disabled",
        "System Event Log",
        "Log area reset/cleared",
        "asserted",
    )
    assert (entries[4].sensor_type, entries[4].event, entries[4].component) == ("Fan", "Redundancy Lost", "Fan #0x0c")
    assert (entries[0xC].event, entries[0xC].direction) == ("Lower Critical going low", "asserted")  # double space
    assert (entries[0x1A].event, entries[0x1A].direction) == ("Lower Critical going low", "deasserted")
    bmc = entries[0xD]
    assert (bmc.sensor_type, bmc.sensor_name, bmc.event) == (
        "Management Subsystem Health",
        "BMC FW Health",
        "Sensor failure",
    )
    fw = entries[0x12]
    assert (fw.sensor_type, fw.sensor_name, fw.event, fw.direction) == (
        "Version Change",
        "FW Update Status",
        "",
        "asserted",
    )
    sps = entries[0x13]
    assert (sps.sensor_type, sps.sensor_name) == ("Unknown", "SPS FW Health")
    psu = entries[0x29]
    assert (psu.sensor_type, psu.sensor_name, psu.event, psu.component) == (
        "Power Supply",
        "PS1 Status",
        "Power Supply AC lost",
        "PS1",
    )
    assert (entries[0x1F].sensor_name, entries[0x1F].event) == ("BIOS Evt Sensor", "OEM System boot event")
    assert [entries[n].direction for n in (0x63, 0x66, 0x67)] == ["asserted", "deasserted", "asserted"]
    assert entries[0x67].event == "General Chassis intrusion"
    assert entries[0x67].timestamp == dt.datetime(2014, 6, 11, 11, 23, 2, tzinfo=UTC)


def test_sel_elist_uncorrectable_ecc_and_threshold_readings() -> None:
    parsed = parse_ipmitool_sel(
        sample("ipmi-sel/ipmitool-sel-elist-intel-s2600-uncorrectable-ecc-temp-readings-pcie.txt")
    )
    assert parsed.problems == []
    entries = {e.record_id: e for e in parsed.value}
    assert min(entries) == 0x2BD
    assert max(entries) == 0x2EF
    ue = entries[0x2CD]
    assert (ue.sensor_type, ue.sensor_name, ue.event, ue.direction) == (
        "Memory",
        "Mmry ECC Sensor",
        "Uncorrectable ECC",
        "asserted",
    )
    temp = entries[0x2BE]
    assert (temp.sensor_type, temp.sensor_name, temp.event) == ("Temperature", "SSB Temp", "Lower Critical going low")
    assert "Reading 0 < Threshold 0 degrees C" in temp.raw
    pcie = [e for e in parsed.value if e.sensor_name == "PCIe Cor Sensor"]
    assert len(pcie) == 5
    assert {(e.sensor_type, e.event) for e in pcie} == {("Critical Interrupt", "")}
    assert (entries[0x2E6].component, entries[0x2E6].direction) == ("PS1", "asserted")
    assert (entries[0x2E8].component, entries[0x2E8].direction) == ("PS1", "deasserted")
    # Non-monotonic timestamps are kept as the BMC wrote them.
    assert entries[0x2EE].timestamp is not None
    assert entries[0x2ED].timestamp is not None
    assert entries[0x2EE].timestamp < entries[0x2ED].timestamp


def test_sel_csv_power_supply_ac_lost_and_redundancy() -> None:
    parsed = parse_sel(sample("ipmi-sel/ipmitool-c-sel-list-intel-psu-ac-lost-redundancy.csv"))
    assert parsed.problems == []
    entries = parsed.value
    assert [e.record_id for e in entries] == list(range(1, 9))
    ac = entries[4]
    assert (ac.sensor_type, ac.sensor_name, ac.event, ac.direction, ac.component) == (
        "Power Supply",
        "#0x51",
        "Power Supply AC lost",
        "asserted",
        "Power Supply #0x51",
    )
    assert ac.timestamp == dt.datetime(2014, 5, 27, 21, 23, 24, tzinfo=UTC)
    assert (entries[5].event, entries[5].direction) == ("Fully Redundant", "deasserted")
    assert (entries[6].sensor_type, entries[6].event) == ("Power Unit", "Redundancy Lost")


def test_sel_openbmc_undetermined_failure_and_unknown_type() -> None:
    entries = parse_sel(sample("ipmi-sel/ipmitool-sel-list-openbmc-everest-undetermined-hw-failure.txt")).value
    assert len(entries) == 13
    failures = [e for e in entries if e.event == "Undetermined system hardware failure"]
    assert len(failures) == 9
    assert {(e.sensor_type, e.sensor_name) for e in failures} == {("System Event", "#0x4a")}
    unknown = entries[7]
    assert (unknown.record_id, unknown.sensor_type, unknown.sensor_name, unknown.event, unknown.direction) == (
        8,
        "Unknown",
        "#0x49",
        "State Deasserted",
        "asserted",
    )


def test_freeipmi_postinit_and_psu_failure() -> None:
    parsed = parse_sel(sample("ipmi-sel/ipmi-sel-freeipmi-psu-failure-os-stop-postinit.txt"))
    assert parsed.problems == []
    entries = parsed.value
    assert [e.record_id for e in entries] == [1, 2, 3, 4, 5, 6]
    assert [e.timestamp for e in entries[:3]] == [None, None, None]
    assert entries[3].timestamp == dt.datetime(2017, 7, 20, 10, 29, 49, tzinfo=UTC)
    psu = entries[1]
    assert (psu.sensor_type, psu.sensor_name, psu.event, psu.component) == (
        "Power Supply",
        "Power Supply PS2 Status",
        "Power Supply Failure detected",
        "PS2",
    )
    assert sum(e.event == "Power Supply Failure detected" for e in entries) == 4
    assert (entries[5].sensor_type, entries[5].event) == ("OS Critical Stop", "OS Graceful Shutdown")


def test_freeipmi_zone_and_missing_header() -> None:
    text = sample("ipmi-sel/ipmi-sel-freeipmi-psu-failure-os-stop-postinit.txt")
    cest = dt.timezone(dt.timedelta(hours=2))
    assert parse_freeipmi_sel(text, tz=cest).value[3].timestamp == dt.datetime(2017, 7, 20, 8, 29, 49, tzinfo=UTC)
    headless = parse_freeipmi_sel("\n".join(text.splitlines()[1:]))
    assert headless.value == []
    assert headless.problems


def test_pre_init_timestamp_is_none() -> None:
    (entry,) = parse_ipmitool_sel(
        "   1 | Pre-Init  |  0000000001 | System Event #0x83 | Timestamp Clock Sync | Asserted"
    ).value
    assert entry.timestamp is None
    assert entry.sensor_type == "System Event"


def test_sel_is_bounded_to_newest_entries() -> None:
    text = "\n".join(f"{n:x} | 01/01/2020 | 00:00:00 | Fan #0x01 | Fully Redundant | Asserted" for n in range(1, 1201))
    parsed = parse_ipmitool_sel(text)
    assert len(parsed.value) == MAX_SEL_ENTRIES
    assert parsed.value[-1].record_id == 1200
    assert parsed.problems


def test_sensor_split_and_components() -> None:
    assert split_sensor("Power Supply PS1 Status") == ("Power Supply", "PS1 Status")
    assert split_sensor("Drive Slot (Bay) HDD 3") == ("Drive Slot (Bay)", "HDD 3")
    assert split_sensor("VBAT") == ("VBAT", "")
    assert component_of("Fan", "Fan 2") == "Fan 2"
    assert component_of("Fan", "System Fan 1") == "System Fan 1"
    assert component_of("Memory", "", "CPU 0 DIMM 8") == "CPU 0 DIMM 8"
    assert component_of("Memory", "P1-DIMMA1 ECC") == "P1-DIMMA1"
    assert component_of("Power Supply", "PSU 2") == "PSU2"
    assert component_of("Processor", "CPU1 Status") is None


def test_sel_info_545_entries() -> None:
    parsed = parse_sel_info(sample("ipmi-sel/ipmitool-sel-info-545-entries.txt"))
    assert parsed.problems == []
    assert (parsed.value.entry_count, parsed.value.percent_used, parsed.value.overflow) == (545, 57.0, False)


def test_sel_info_garbage() -> None:
    parsed = parse_sel_info("Percent Used : 250%\nOverflow : maybe\n")
    assert parsed.value.percent_used is None
    assert parsed.value.overflow is None
    assert len(parsed.problems) == 2


def test_sdr_list_s2600_kinds_and_readings() -> None:
    parsed = parse_sdr(sample("ipmi-sdr/ipmitool-sdr-list-intel-s2600-healthy.txt"))
    assert parsed.problems == []
    by_name = {r.name: r for r in parsed.value}
    assert (by_name["System Fan 1"].kind, by_name["System Fan 1"].reading, by_name["System Fan 1"].unit) == (
        "fan",
        1330.0,
        "RPM",
    )
    assert (by_name["SSB Temp"].kind, by_name["SSB Temp"].reading) == ("temperature", 43.0)
    assert by_name["P1 Therm Margin"].reading == -65.0
    assert (by_name["PS1 Power In"].kind, by_name["PS1 Power In"].reading, by_name["PS1 Power In"].unit) == (
        "psu",
        120.0,
        "Watts",
    )
    assert (by_name["PS1 Status"].kind, by_name["PS1 Status"].reading, by_name["PS1 Status"].status) == (
        "psu",
        None,
        "ok",
    )
    assert (by_name["BB +12.0V"].kind, by_name["BB +12.0V"].reading) == ("voltage", 11.88)
    assert (by_name["MIC Status 1"].status, by_name["MIC Status 1"].reading) == ("ns", None)
    assert (by_name["MIC Margin 1"].status, by_name["MIC Margin 1"].reading) == ("ns", None)
    assert all(r.status in ("ok", "ns") for r in parsed.value)


def test_sdr_type_voltage_five_columns() -> None:
    parsed = parse_sdr(sample("ipmi-sdr/ipmitool-sdr-type-voltage-list-supermicro-style.txt"))
    assert parsed.problems == []
    by_name = {r.name: r for r in parsed.value}
    assert len(by_name) == 15
    assert (by_name["VTT"].kind, by_name["VTT"].status, by_name["VTT"].reading) == ("voltage", "ok", 0.99)
    assert (by_name["CPU2 Vcore"].status, by_name["CPU2 Vcore"].reading) == ("ns", None)
    assert (by_name["12V"].reading, by_name["12V"].unit) == (12.3, "Volt")
    assert by_name["VBAT"].reading == 3.22


def test_mc_info_firmware_revision() -> None:
    assert parse_mc_info(sample("ipmi-mc/ipmitool-mc-info-intel-bmc-fw-1.17.txt")).value == "1.17"
    missing = parse_mc_info("Device ID : 33\n")
    assert missing.value is None
    assert missing.problems
