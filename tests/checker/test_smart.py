"""SMART: smartctl JSON (ATA, NVMe, SCSI, old 0.1 format, errors), exit status, scan, text and nvme-cli."""

from __future__ import annotations

import json

import pytest

from bench.samples import sample
from checker.parsers.smart import decode_exit_status, parse_scan_open_json, parse_scan_open_text, parse_smartctl_json
from checker.parsers.smart_text import parse_nvme_smart_log, parse_smartctl_text
from checker.schemas import DiskHealth


def disk(name: str) -> DiskHealth:
    parsed = parse_smartctl_json(sample(f"smartctl-json/{name}"))
    assert parsed.value is not None
    return parsed.value


def text_disk(name: str) -> DiskHealth:
    parsed = parse_smartctl_text(sample(f"smartctl-text/{name}"), device="/dev/test")
    assert parsed.problems == []
    assert parsed.value is not None
    return parsed.value


def test_exit_status_bits() -> None:
    assert decode_exit_status(0) == []
    assert decode_exit_status(4) == ["command_failed"]
    assert decode_exit_status(64) == ["error_log_has_errors"]
    assert decode_exit_status(0b10001010) == ["device_open_failed", "disk_failing", "self_test_log_has_errors"]
    assert len(decode_exit_status(255)) == 8


def test_ata_304_reallocated_sectors_but_passed() -> None:
    d = disk("sata-hdd-seagate-st3500418as-304-reallocated.json")
    assert (d.device, d.protocol, d.model, d.smart_passed) == ("/dev/sda", "ATA", "ST3500418AS", True)
    assert (d.reallocated_sectors, d.pending_sectors, d.offline_uncorrectable, d.udma_crc_errors) == (304, 0, 0, 0)
    assert (d.temperature_c, d.power_on_hours, d.exit_status, d.exit_flags) == (33.0, 44668, 0, [])


def test_ata_error_log_exit_64_is_not_failure() -> None:
    d = disk("sata-hdd-seagate-st3200820as-errorlog-98.json")
    assert d.smart_passed is True
    assert (d.exit_status, d.exit_flags) == (64, ["error_log_has_errors"])
    assert d.power_on_hours == 100161


def test_megaraid_attribute_check_exit_4() -> None:
    d = disk("megaraid-sat-wd4000fyyx-attrcheck-warning.json")
    assert (d.model, d.smart_passed, d.exit_status, d.exit_flags) == ("WD4000FYYX", True, 4, ["command_failed"])
    assert (d.reallocated_sectors, d.temperature_c, d.power_on_hours) == (0, 36.0, 37787)


def test_kingston_sa400_exit_4_without_realloc_attribute() -> None:
    d = disk("sata-ssd-kingston-sa400-exit4.json")
    assert (d.exit_flags, d.smart_passed, d.reallocated_sectors, d.udma_crc_errors) == (
        ["command_failed"],
        True,
        None,
        0,
    )


def test_kingston_kc400_retired_block_is_attribute_5() -> None:
    d = disk("sata-ssd-kingston-kc400-retired-block.json")
    assert (d.reallocated_sectors, d.power_on_hours, d.temperature_c) == (1, 54450, 31.0)


@pytest.mark.parametrize(
    ("name", "model", "hours", "temperature"),
    [
        ("sata-hdd-seagate-exos-x16-healthy.json", "ST16000NM001G-2KK103", 13114, 26.0),
        ("sata-hdd-wd140edfz-healthy.json", "WDC WD140EDFZ-11A0VA0", 1730, 32.0),
        ("sata-ssd-dell-intel-s3520-healthy.json", "SSDSCKJB240G7R", 21213, 47.0),
        ("sata-ssd-samsung860evo-healthy.json", "Samsung SSD 860 EVO 500GB", 14551, 36.0),
    ],
)
def test_healthy_ata(name: str, model: str, hours: int, temperature: float) -> None:
    d = disk(name)
    assert (d.protocol, d.model, d.smart_passed, d.exit_status) == ("ATA", model, True, 0)
    assert (d.power_on_hours, d.temperature_c) == (hours, temperature)
    assert d.reallocated_sectors == 0
    assert d.udma_crc_errors == 0


def test_nvme_media_errors_7() -> None:
    d = disk("nvme-samsung970evo-media-errors.json")
    assert (d.protocol, d.model, d.smart_passed) == ("NVMe", "Samsung SSD 970 EVO 500GB", True)
    assert (d.media_errors, d.nvme_critical_warning, d.percentage_used) == (7, 0, 3)
    assert (d.available_spare, d.available_spare_threshold, d.power_on_hours) == (99, 10, 12798)


@pytest.mark.parametrize(
    ("name", "device", "spare_threshold", "used", "hours"),
    [
        ("nvme-corsair-mp510-errlog-entries.json", "/dev/nvme0", 5, 1, 6487),
        ("nvme-intel660p-healthy.json", "/dev/testfoobarpass", 10, 0, 2401),
        ("nvme-micron7450-healthy.json", "/dev/nvme6", 10, 0, 150),
    ],
)
def test_healthy_nvme(name: str, device: str, spare_threshold: int, used: int, hours: int) -> None:
    d = disk(name)
    assert (d.device, d.protocol, d.smart_passed, d.nvme_critical_warning, d.media_errors) == (
        device,
        "NVMe",
        True,
        0,
        0,
    )
    assert (d.available_spare, d.available_spare_threshold, d.percentage_used, d.power_on_hours) == (
        100,
        spare_threshold,
        used,
        hours,
    )


def test_scsi_260_grown_defects() -> None:
    d = disk("scsi-seagate-st373453lc-260-grown-defects.json")
    assert (d.protocol, d.model, d.firmware, d.smart_passed) == ("SCSI", "SEAGATE ST373453LC", "DX10", True)
    assert (d.grown_defects, d.temperature_c, d.power_on_hours) == (260, 33.0, 102880)


def test_scsi_hp_healthy_without_power_on_time() -> None:
    d = disk("scsi-hp-mas3735nc-healthy.json")
    assert (d.model, d.firmware, d.grown_defects, d.temperature_c, d.power_on_hours) == (
        "HP 73.4G MAS3735NC",
        "HPC3",
        0,
        28.0,
        None,
    )


def test_old_json_format_0_1_sas() -> None:
    parsed = parse_smartctl_json(sample("smartctl-json/sas-seagate-st1200mm0088-healthy-smartctl67.json"))
    assert parsed.problems == []
    d = parsed.value
    assert d is not None
    assert (d.device, d.protocol, d.model, d.firmware, d.serial) == (
        "/dev/sdb",
        "SCSI",
        "SEAGATE ST1200MM0088",
        "N004",
        "Z4028VRY0000C810BZXB",
    )
    assert (d.smart_passed, d.grown_defects, d.temperature_c, d.power_on_hours) == (True, 0, 31.0, 5675)


def test_open_failure_has_no_verdict_and_a_problem() -> None:
    parsed = parse_smartctl_json(sample("smartctl-json/smartctl-error-no-device.json"))
    d = parsed.value
    assert d is not None
    assert (d.device, d.protocol, d.smart_passed, d.exit_status, d.exit_flags) == (
        "/dev/sda",
        "unknown",
        None,
        2,
        ["device_open_failed"],
    )
    assert len(parsed.problems) == 1
    assert "Open failed" in parsed.problems[0]


def test_raid_volume_without_smart() -> None:
    d = disk("windows-intel-raid-volume-nosmart.json")
    assert (d.model, d.smart_passed, d.exit_flags, d.temperature_c) == (
        "Intel Raid 1 Volume",
        None,
        ["command_failed"],
        None,
    )


def test_not_json() -> None:
    parsed = parse_smartctl_json("smartctl 7.1 ...")
    assert parsed.value is None
    assert parsed.problems


def test_scan_open_json_and_text() -> None:
    doc = {
        "json_format_version": [1, 0],
        "devices": [
            {"name": "/dev/sda", "info_name": "/dev/sda [SAT]", "type": "sat", "protocol": "ATA"},
            {
                "name": "/dev/bus/0",
                "info_name": "/dev/bus/0 [megaraid_disk_00]",
                "type": "megaraid,0",
                "protocol": "SCSI",
            },
            {"name": "/dev/nvme0", "info_name": "/dev/nvme0", "type": "nvme", "protocol": "NVMe"},
        ],
    }
    parsed = parse_scan_open_json(json.dumps(doc))
    assert parsed.problems == []
    assert [(d.name, d.type, d.protocol) for d in parsed.value] == [
        ("/dev/sda", "sat", "ATA"),
        ("/dev/bus/0", "megaraid,0", "SCSI"),
        ("/dev/nvme0", "nvme", "NVMe"),
    ]
    text = "/dev/sda -d sat # /dev/sda [SAT], ATA device\n/dev/nvme0 -d nvme # /dev/nvme0, NVMe device\n"
    assert [(d.name, d.type, d.protocol) for d in parse_scan_open_text(text).value] == [
        ("/dev/sda", "sat", "ATA"),
        ("/dev/nvme0", "nvme", "NVMe"),
    ]


def test_scan_json_of_a_machine_without_disks_is_no_devices_not_a_problem() -> None:
    """smartctl 7.3 on a machine with nothing to open (a container, a VM without disks) leaves the `devices`
    list out and exits 0 (seen on the development machine, smartmontools 7.3-1+b1); the collector then says
    unavailable instead of failing. A document that says nothing of a clean exit is still a problem."""
    doc = {"json_format_version": [1, 0], "smartctl": {"version": [7, 3], "argv": ["smartctl", "--scan-open", "-j"],
           "exit_status": 0}}  # fmt: skip
    parsed = parse_scan_open_json(json.dumps(doc))
    assert (parsed.value, parsed.problems) == ([], [])
    doc["smartctl"]["exit_status"] = 2  # type: ignore[index]
    assert parse_scan_open_json(json.dumps(doc)).problems
    assert parse_scan_open_json(json.dumps({"json_format_version": [1, 0]})).problems


# -- smartctl -a text --------------------------------------------------------------------------


def test_text_failed_disk_4049_reallocated() -> None:
    d = text_disk("sata-hdd-seagate-st3250318as-FAILED-reallocated.txt")
    assert (d.protocol, d.model, d.serial, d.firmware, d.smart_passed) == (
        "ATA",
        "ST3250318AS",
        "9VY1LMLV",
        "CC35",
        False,
    )
    assert (d.reallocated_sectors, d.pending_sectors, d.offline_uncorrectable, d.udma_crc_errors) == (4049, 0, 0, 0)
    assert (d.temperature_c, d.power_on_hours) == (38.0, 4804)


def test_text_ata_healthy_behind_megaraid() -> None:
    d = text_disk("megaraid-sata-hgst-hus724040ale640.txt")
    assert (d.protocol, d.model, d.smart_passed, d.reallocated_sectors, d.power_on_hours, d.temperature_c) == (
        "ATA",
        "HGST HUS724040ALE640",
        True,
        0,
        47396,
        33.0,
    )


def test_text_ata_seagate_oem_healthy() -> None:
    d = text_disk("sata-hdd-seagate-oos12000g-healthy.txt")
    assert (d.model, d.smart_passed, d.reallocated_sectors, d.pending_sectors, d.power_on_hours, d.temperature_c) == (
        "OOS12000G",
        True,
        0,
        0,
        252,
        38.0,
    )


@pytest.mark.parametrize(
    ("name", "model", "firmware", "temperature"),
    [
        ("megaraid-sas-hgst-hus726040al5210.txt", "HGST HUS726040AL5210", "A907", 40.0),
        ("sas-hgst-huh721212al4204-healthy.txt", "HGST HUH721212AL4204", "C3D0", 32.0),
    ],
)
def test_text_sas_healthy(name: str, model: str, firmware: str, temperature: float) -> None:
    d = text_disk(name)
    assert (d.protocol, d.model, d.firmware, d.smart_passed, d.grown_defects, d.temperature_c) == (
        "SCSI",
        model,
        firmware,
        True,
        0,
        temperature,
    )


def test_text_sas_ssd_endurance_and_power_on() -> None:
    d = text_disk("sas-ssd-smartctl-x.txt")
    assert (d.model, d.serial, d.smart_passed, d.percentage_used, d.grown_defects) == (
        "SAMSUNG MZILT7T6HALA/007",
        "S5DDNE0R801692",
        True,
        0,
        0,
    )
    assert (d.temperature_c, d.power_on_hours) == (25.0, 146)


def test_text_virtual_disk_without_smart() -> None:
    d = text_disk("megaraid-virtual-disk-unsupported.txt")
    assert (d.protocol, d.model, d.smart_passed, d.temperature_c) == ("SCSI", "AVAGO MR9361-16i", None, None)


@pytest.mark.parametrize(
    ("name", "model", "spare_threshold", "hours", "temperature"),
    [
        ("nvme-samsung970evoplus-pve-healthy.txt", "Samsung SSD 970 EVO Plus 500GB", 10, 15, 41.0),
        ("nvme-twsc-smartctl75.txt", "TWSC TSC3AN1T0-F2T60S", 1, 396, 43.0),
        ("usb-nvme-asmedia-samsung-t7.txt", "Samsung Portable SSD T7", 10, 9, 29.0),
    ],
)
def test_text_nvme_healthy(name: str, model: str, spare_threshold: int, hours: int, temperature: float) -> None:
    d = text_disk(name)
    assert (d.protocol, d.model, d.smart_passed, d.nvme_critical_warning, d.media_errors) == ("NVMe", model, True, 0, 0)
    assert (d.available_spare, d.available_spare_threshold, d.percentage_used) == (100, spare_threshold, 0)
    assert (d.power_on_hours, d.temperature_c) == (hours, temperature)


def test_text_not_smartctl() -> None:
    parsed = parse_smartctl_text("hello\n")
    assert parsed.value is None
    assert parsed.problems


# -- nvme-cli smart-log --------------------------------------------------------------------------


def test_nvme_cli_1x_spaces() -> None:
    parsed = parse_nvme_smart_log(sample("nvme-cli/nvme-smart-log-nvmecli1-spaces-errlog-598.txt"))
    assert parsed.problems == []
    d = parsed.value
    assert d is not None
    assert (d.device, d.nvme_critical_warning, d.media_errors, d.percentage_used) == ("/dev/nvme0", 0, 0, 0)
    assert (d.available_spare, d.available_spare_threshold, d.power_on_hours, d.temperature_c) == (100, 10, 1016, 38.0)


def test_nvme_cli_2x_tabs_and_kelvin() -> None:
    parsed = parse_nvme_smart_log(sample("nvme-cli/nvme-smart-log-nvmecli2-tabs-celsius-tb.txt"), device="/dev/nvme0n1")
    d = parsed.value
    assert d is not None
    assert (d.device, d.nvme_critical_warning, d.media_errors, d.percentage_used) == ("/dev/nvme0n1", 0, 0, 1)
    assert (d.available_spare, d.available_spare_threshold, d.power_on_hours, d.temperature_c) == (100, 50, 6494, 43.0)


def test_nvme_cli_kelvin_only_and_garbage() -> None:
    d = parse_nvme_smart_log("critical_warning : 0x4\ntemperature : 310 K\n").value
    assert d is not None
    assert (d.nvme_critical_warning, d.temperature_c) == (4, 37.0)
    assert parse_nvme_smart_log("nothing").value is None
