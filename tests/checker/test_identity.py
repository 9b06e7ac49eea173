"""Identity: /proc/cpuinfo, /proc/cmdline, dmidecode, /sys/class/dmi/id, ethtool -i, fwupd."""

from __future__ import annotations

import pytest

from bench.samples import read_ttar, sample
from checker.parsers.common import parse_cpu_list
from checker.parsers.dmi import (
    parse_dmi_id,
    parse_dmidecode_firmware,
    parse_dmidecode_memory,
    parse_dmidecode_structures,
)
from checker.parsers.firmware import cpu_microcode_from_fwupd, parse_ethtool_driver, parse_fwupd_devices
from checker.parsers.identity import parse_cmdline, parse_cpuinfo


def test_cpuinfo_i7_8650u_microcode_0xb4() -> None:
    parsed = parse_cpuinfo(sample("cpuinfo/intel-i7-8650u-8thread-microcode-0xb4.txt"))
    assert parsed.problems == []
    (cpu,) = parsed.value
    assert (cpu.socket, cpu.vendor, cpu.family, cpu.model, cpu.stepping) == (0, "GenuineIntel", 6, 142, 10)
    assert cpu.microcode == 0xB4
    assert cpu.logical_cpus == 8
    assert cpu.model_name == "Intel(R) Core(TM) i7-8650U CPU @ 1.90GHz"


def test_cpuinfo_opteron_2380_partial_family_16() -> None:
    (cpu,) = parse_cpuinfo(sample("cpuinfo/amd-opteron-2380-family16-partial.txt")).value
    assert (cpu.vendor, cpu.family, cpu.model, cpu.stepping, cpu.microcode) == ("AuthenticAMD", 16, 4, 2, 0x1000086)
    assert cpu.logical_cpus == 1


def test_cpuinfo_opteron_2356_wrapped_flags_no_microcode_no_physical_id() -> None:
    parsed = parse_cpuinfo(sample("cpuinfo/amd-opteron-2356-rhel4-i686-no-microcode.txt"))
    assert parsed.problems == []
    (cpu,) = parsed.value
    assert (cpu.socket, cpu.family, cpu.model, cpu.stepping, cpu.microcode) == (0, 15, 33, 0, None)
    assert cpu.model_name == "Quad-Core AMD Opteron(tm) Processor 2356"


def test_cpuinfo_two_sockets_decimal_microcode_and_arm64() -> None:
    block = (
        "processor : {n}\nvendor_id : GenuineIntel\ncpu family : 6\nmodel : 85\nstepping : 4\n"
        "microcode : {mc}\nphysical id : {s}\n\n"
    )
    text = "".join(block.format(n=n, s=n % 2, mc="28" if n % 2 else "0x2000065") for n in range(4))
    sockets = parse_cpuinfo(text).value
    assert [(c.socket, c.logical_cpus, c.microcode) for c in sockets] == [(0, 2, 0x2000065), (1, 2, 28)]
    arm = (
        "processor : 0\nBogoMIPS : 50.00\nCPU implementer : 0x48\nCPU architecture: 8\n"
        "CPU variant : 0x1\nCPU part : 0xd01\nCPU revision : 0\n"
    )
    (cpu,) = parse_cpuinfo(arm).value
    assert (cpu.vendor, cpu.family, cpu.model, cpu.stepping) == ("HiSilicon", 8, 0xD01, 0)


def test_cpuinfo_garbage_block_is_a_problem() -> None:
    parsed = parse_cpuinfo("processor : 0\nvendor_id : GenuineIntel\ncpu family : six\n")
    assert parsed.value == []
    assert parsed.problems


@pytest.mark.parametrize(
    ("text", "cpus"),
    [
        ("1-3,5,7-9", [1, 2, 3, 5, 7, 8, 9]),
        ("0", [0]),
        ("", []),
        ("0-15:2/4", [0, 1, 4, 5, 8, 9, 12, 13]),
        ("3,1,1-2\n", [1, 2, 3]),
    ],
)
def test_cpu_list(text: str, cpus: list[int]) -> None:
    parsed = parse_cpu_list(text)
    assert parsed.value == cpus
    assert parsed.problems == []


def test_cpu_list_bad_items() -> None:
    parsed = parse_cpu_list("1,x,5-3,2")
    assert parsed.value == [1, 2]
    assert len(parsed.problems) == 2


def test_cmdline_isolcpus_flags_and_nohz_full() -> None:
    text = (
        "BOOT_IMAGE=/vmlinuz-6.8.0 root=UUID=abc ro isolcpus=managed_irq,domain,2-5 nohz_full=2-5,7 "
        "rcu_nocbs=2-5 quiet\n"
    )
    parsed = parse_cmdline(text)
    assert parsed.problems == []
    c = parsed.value
    assert c.isolated_cpus == [2, 3, 4, 5]
    assert c.isolcpus_flags == ["managed_irq", "domain"]
    assert c.nohz_full_cpus == [2, 3, 4, 5, 7]
    assert c.parameters["rcu_nocbs"] == "2-5"
    assert c.cmdline.endswith("quiet")


def test_cmdline_without_isolation_and_bad_list() -> None:
    assert parse_cmdline("ro quiet").value.isolated_cpus == []
    bad = parse_cmdline("isolcpus=nohz,abc")
    assert bad.value.isolcpus_flags == ["nohz"]
    assert bad.problems


# -- dmidecode ---------------------------------------------------------------------------------------


def test_dmidecode_supermicro_sixteen_populated_dimms() -> None:
    parsed = parse_dmidecode_memory(sample("dmi/dmidecode-full-supermicro-ami-3.0b.txt"))
    assert parsed.problems == []
    dimms = parsed.value
    assert len(dimms) == 16
    assert {(d.size_mb, d.mem_type, d.speed_mts, d.manufacturer, d.part_number) for d in dimms} == {
        (32768, "DDR3", 1600, "Micron", "72KSZS4G72L1G6E2A")
    }
    first = dimms[0]
    assert (first.locator, first.bank_locator, first.serial) == ("P1-DIMMA1", "P0_Node0_Channel0_Dimm0", "45402C1A")
    assert dimms[-1].locator == "P2-DIMMH2"
    assert dimms[-1].serial == "45402C69"


def test_dmidecode_empty_slots_are_skipped() -> None:
    text = (
        "Handle 0x0040, DMI type 17, 40 bytes\nMemory Device\n\tSize: No Module Installed\n\tLocator: DIMM_B2\n"
        "\tManufacturer: NO DIMM\n\nHandle 0x0041, DMI type 17, 40 bytes\nMemory Device\n\tSize: 16384 MB\n"
        "\tLocator: DIMM_A1\n\tType: DDR4\n\tSpeed: 2666 MT/s\n\tManufacturer: Samsung\n\tSerial Number: 1234ABCD\n"
        "\tPart Number: M393A2K43BB1-CTD    \n\nHandle 0x0042, DMI type 17, 40 bytes\nMemory Device\n\tSize: 0 MB\n"
        "\tLocator: DIMM_C1\n"
    )
    (dimm,) = parse_dmidecode_memory(text).value
    assert (dimm.locator, dimm.size_mb, dimm.speed_mts, dimm.part_number) == (
        "DIMM_A1",
        16384,
        2666,
        "M393A2K43BB1-CTD",
    )


def test_dmidecode_supermicro_bios_and_system() -> None:
    parsed = parse_dmidecode_firmware(sample("dmi/dmidecode-full-supermicro-ami-3.0b.txt"))
    assert parsed.problems == []
    fw = parsed.value
    assert (fw.bios_vendor, fw.bios_version, fw.bios_date) == ("American Megatrends Inc.", "3.0b", "05/06/2014")
    assert (fw.system_manufacturer, fw.system_product, fw.system_serial) == ("Supermicro", "X9DRT-P", "0123456789")


def test_dmidecode_t_bios_with_space_indentation() -> None:
    text = sample("dmi/dmidecode-t-bios-dell-p1.00-spaces.txt")
    parsed = parse_dmidecode_firmware(text)
    assert parsed.problems == []
    assert (parsed.value.bios_vendor, parsed.value.bios_version, parsed.value.bios_date) == (
        "Dell Inc.",
        "P1.00",
        "02/09/2018",
    )
    (bios,) = parse_dmidecode_structures(text).value
    assert bios.properties["BIOS Revision"] == "5.13"
    assert "PCI is supported" not in bios.properties


def test_sys_class_dmi_id_poweredge() -> None:
    files = read_ttar(sample("dmi/sys-class-dmi-id-dell-poweredge-r6515.ttar"), "fixtures/sys/class/dmi/id/")
    parsed = parse_dmi_id(files)
    assert parsed.problems == []
    fw = parsed.value
    assert (fw.bios_vendor, fw.bios_version, fw.bios_date) == ("Dell Inc.", "2.2.4", "04/12/2021")
    assert (fw.system_manufacturer, fw.system_product, fw.system_serial) == ("Dell Inc.", "PowerEdge R6515", "7N62AI2")


# -- NIC and fwupd ---------------------------------------------------------------------------------


def test_ethtool_i_e1000e() -> None:
    parsed = parse_ethtool_driver(sample("firmware/ethtool-i-eth0-e1000e.txt"), "eth0")
    nic = parsed.value
    assert nic is not None
    assert (nic.interface, nic.driver, nic.driver_version, nic.firmware, nic.bus_info) == (
        "eth0",
        "e1000e",
        "5.11.0-22-generic",
        "0.5-4",
        "0000:00:1f.6",
    )


def test_ethtool_link_settings_is_not_driver_info() -> None:
    parsed = parse_ethtool_driver(sample("firmware/ethtool-eth0-settings-link.txt"), "eth0")
    assert parsed.value is None
    assert parsed.problems


def test_fwupd_devices_and_cpu_microcode() -> None:
    parsed = parse_fwupd_devices(sample("firmware/fwupdmgr-get-devices-json-colorhug-optionrom-cpu-microcode.json"))
    assert parsed.problems == []
    devices = parsed.value
    assert [(d.name, d.plugin, d.version) for d in devices] == [
        ("ColorHug2", "hughski_colorhug", "2.0.6"),
        ("Display controller", "optionrom", "02"),
        ("Intel(R) Core™ i7-7700HQ CPU @ 2.80GHz", "cpu", "0x000000de"),
    ]
    assert devices[0].updatable
    assert not devices[2].updatable
    assert cpu_microcode_from_fwupd(devices) == 222
