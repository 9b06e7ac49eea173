"""Identity, interrupts and memory-tier collectors, fed from the real samples through snapshots."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.samples import NUMA_CXL, SnapshotBuilder, read_ttar, sample, sample_names
from checker.collectors import identity, interrupts, memory_tiers
from checker.collectors.base import CommandResult, SnapshotHost
from checker.collectors.context import CollectorState
from checker.cycle import run_cycle
from checker.parsers.identity import parse_cpuinfo
from checker.parsers.interrupts import parse_interrupts
from checker.schemas import Identity, Report

ONLY_IDENTITY = {"identity": identity.collect}
ONLY_IRQ = {"interrupts": interrupts.collect}
ONLY_TIERS = {"memory_tiers": memory_tiers.collect}
DMIDECODE_FULL = "dmi/dmidecode-full-supermicro-ami-3.0b.txt"


def identity_of(report: Report) -> Identity:
    assert report.observations.identity is not None, report.collectors["identity"]
    return report.observations.identity


CPU_FACTS = {
    "cpuinfo/intel-i7-8650u-8thread-microcode-0xb4.txt": ("GenuineIntel", 6, 142, 10, 0xB4, 8),
    "cpuinfo/amd-opteron-2380-family16-partial.txt": ("AuthenticAMD", 16, 4, 2, 0x1000086, 1),
    "cpuinfo/amd-opteron-2356-rhel4-i686-no-microcode.txt": ("AuthenticAMD", 15, 33, 0, None, 1),
}


@pytest.mark.parametrize("name", sample_names("cpuinfo"))
def test_every_cpuinfo_sample_through_the_identity_collector(name: str, tmp_path: Path) -> None:
    text = sample(name)
    snap = SnapshotBuilder(tmp_path).file("/proc/cpuinfo", text).file("/proc/sys/kernel/osrelease", "2.6.9-78\n")
    report = snap.cycle(collectors=ONLY_IDENTITY)
    assert report.collectors["identity"].status == "ok"
    ident = identity_of(report)
    assert ident.cpus == parse_cpuinfo(text).value
    (cpu,) = ident.cpus
    assert (cpu.vendor, cpu.family, cpu.model, cpu.stepping, cpu.microcode, cpu.logical_cpus) == CPU_FACTS[name]
    # No dmidecode, ipmitool or ethtool in this snapshot: named, never a failure.
    assert any(p.startswith("DIMM inventory: dmidecode") for p in report.collectors["identity"].problems)


def test_dimm_inventory_and_firmware_from_dmidecode(tmp_path: Path) -> None:
    full = sample(DMIDECODE_FULL)
    snap = SnapshotBuilder(tmp_path).file("/proc/cmdline", "isolcpus=4-7 nohz_full=4-7 quiet\n")
    snap.command(identity.DMI_MEMORY, full).command(identity.DMI_FIRMWARE, full)
    snap.command(identity.MC_INFO, sample("ipmi-mc/ipmitool-mc-info-intel-bmc-fw-1.17.txt"))
    ident = identity_of(snap.cycle(collectors=ONLY_IDENTITY))
    assert (ident.isolated_cpus, ident.nohz_full_cpus) == ([4, 5, 6, 7], [4, 5, 6, 7])
    assert ident.dimms
    assert all(d.locator and d.size_mb for d in ident.dimms)  # empty slots are not inventory
    first = ident.dimms[0]
    assert (first.locator, first.size_mb, first.mem_type) == ("P1-DIMMA1", 32768, "DDR3")
    fw = ident.firmware
    assert (fw.bios_vendor, fw.bios_version, fw.bios_date) == ("American Megatrends Inc.", "3.0b", "05/06/2014")
    assert (fw.system_manufacturer, fw.system_product, fw.bmc_firmware) == ("Supermicro", "X9DRT-P", "1.17")


def test_dell_bios_only_output(tmp_path: Path) -> None:
    snap = SnapshotBuilder(tmp_path).file("/proc/cmdline", "quiet\n")
    snap.command(identity.DMI_FIRMWARE, sample("dmi/dmidecode-t-bios-dell-p1.00-spaces.txt"))
    fw = identity_of(snap.cycle(collectors=ONLY_IDENTITY)).firmware
    assert (fw.bios_vendor, fw.bios_version, fw.bios_date) == ("Dell Inc.", "P1.00", "02/09/2018")


def test_sys_class_dmi_id_when_dmidecode_is_missing(tmp_path: Path) -> None:
    files = read_ttar(sample("dmi/sys-class-dmi-id-dell-poweredge-r6515.ttar"), "fixtures/sys/class/dmi/id/")
    snap = SnapshotBuilder(tmp_path).file("/proc/cmdline", "quiet\n").files("/sys/class/dmi/id", files)
    report = snap.cycle(collectors=ONLY_IDENTITY)
    fw = identity_of(report).firmware
    assert (fw.bios_vendor, fw.bios_version, fw.system_product) == ("Dell Inc.", "2.2.4", "PowerEdge R6515")
    assert not any(p.startswith("BIOS and system") for p in report.collectors["identity"].problems)


def test_nic_driver_and_firmware_for_physical_interfaces_only(tmp_path: Path) -> None:
    snap = SnapshotBuilder(tmp_path).file("/proc/cmdline", "quiet\n")
    snap.file("/sys/class/net/eth0/device/uevent", "DRIVER=e1000e\n").directory_only("/sys/class/net/lo")
    snap.directory_only("/sys/class/net/br0")
    snap.command(identity.ethtool_argv("eth0"), sample("firmware/ethtool-i-eth0-e1000e.txt"))
    snap.file("/sys/class/nvme/nvme0/firmware_rev", "GXA7602Q\n")
    fw = identity_of(snap.cycle(collectors=ONLY_IDENTITY)).firmware
    (nic,) = fw.nics
    assert (nic.interface, nic.driver, nic.driver_version, nic.firmware, nic.bus_info) == (
        "eth0",
        "e1000e",
        "5.11.0-22-generic",
        "0.5-4",
        "0000:00:1f.6",
    )
    assert fw.nvme == {"nvme0": "GXA7602Q"}


class CountingHost(SnapshotHost):
    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.ran: list[list[str]] = []

    def run(self, argv: list[str], *, timeout_s: float) -> CommandResult:
        self.ran.append(argv)
        return super().run(argv, timeout_s=timeout_s)


def test_inventory_commands_are_reused_for_the_refresh_interval(tmp_path: Path) -> None:
    full = sample(DMIDECODE_FULL)
    snap = SnapshotBuilder(tmp_path).file("/proc/cmdline", "quiet\n")
    snap.command(identity.DMI_MEMORY, full).command(identity.DMI_FIRMWARE, full)
    host = CountingHost(tmp_path)
    state = CollectorState()
    first = run_cycle(host, hostname="h", collectors=ONLY_IDENTITY, state=state, memo_s=3600)
    runs = len(host.ran)
    second = run_cycle(host, hostname="h", collectors=ONLY_IDENTITY, state=state, memo_s=3600)
    assert len(host.ran) == runs + 1  # only `ipmitool mc info`, which is not installed, is tried again
    assert identity_of(second).dimms == identity_of(first).dimms
    run_cycle(host, hostname="h", collectors=ONLY_IDENTITY, state=state, memo_s=0)
    assert len(host.ran) == 2 * runs + 1


def test_identity_without_proc_is_unavailable(tmp_path: Path) -> None:
    run = SnapshotBuilder(tmp_path).cycle(collectors=ONLY_IDENTITY).collectors["identity"]
    assert run.status == "unavailable"
    assert "/proc/cpuinfo" in (run.reason or "")


IRQ_FACTS = {
    "proc-interrupts/kvm-guest-4cpu-dfr-mcp.txt": (4, "MCP", [1, 1, 1, 1]),
    "proc-interrupts/laptop-i7-4cpu-ir-ioapic-mcp2400.txt": (4, "MCP", [2406, 2399, 2399, 2399]),
    "proc-interrupts/aarch64-gic.txt": (8, "IPI0", [2768808080, 2844211768, 2878602432, 2730576120]),
}


@pytest.mark.parametrize("name", sample_names("proc-interrupts"))
def test_every_interrupts_sample_through_the_collector(name: str, tmp_path: Path) -> None:
    text = sample(name)
    snap = SnapshotBuilder(tmp_path).file("/proc/interrupts", text)
    snap.files("/proc/irq", {"1/smp_affinity_list": "0-3\n", "24/smp_affinity_list": "1\n"})
    snap.directory_only("/proc/irq/default_smp_affinity")
    report = snap.cycle(collectors=ONLY_IRQ)
    assert report.collectors["interrupts"].status == "ok"
    irq = report.observations.interrupts
    assert irq is not None
    assert irq.rows == parse_interrupts(text).value.rows
    cpus, row, first_counts = IRQ_FACTS[name]
    assert irq.cpu_count == cpus
    assert {r.name: r.per_cpu for r in irq.rows}[row][: len(first_counts)] == first_counts
    assert irq.irq_affinity == {"1": [0, 1, 2, 3], "24": [1]}


def test_interrupts_that_do_not_parse_are_an_error(tmp_path: Path) -> None:
    run = SnapshotBuilder(tmp_path).file("/proc/interrupts", "garbage\n").cycle(collectors=ONLY_IRQ)
    assert run.collectors["interrupts"].status == "error"
    assert run.collectors["interrupts"].excerpt == "garbage\n"


def test_memory_tiers_with_a_cpuless_cxl_node(tmp_path: Path) -> None:
    snap = SnapshotBuilder(tmp_path).files("/sys/devices/system/node", NUMA_CXL)
    snap.file("/sys/kernel/mm/numa/demotion_enabled", "true\n").file("/proc/sys/kernel/numa_balancing", "2\n")
    snap.files("/sys/kernel/mm/mempolicy/weighted_interleave", {"node0": "5\n", "node1": "1\n"})
    tiers = snap.cycle(collectors=ONLY_TIERS).observations.memory_tiers
    assert tiers is not None
    assert [(n.node, n.cpus, n.memory_mb) for n in tiers.nodes] == [(0, [0, 1, 2, 3], 64000), (1, [], 128000)]
    assert (tiers.demotion_enabled, tiers.numa_balancing, tiers.interleave_weights) == (True, 2, {"0": 5, "1": 1})


def test_memory_tiers_without_numa_is_unavailable(tmp_path: Path) -> None:
    run = SnapshotBuilder(tmp_path).cycle(collectors=ONLY_TIERS).collectors["memory_tiers"]
    assert run.status == "unavailable"
    assert "without NUMA" in (run.reason or "")
