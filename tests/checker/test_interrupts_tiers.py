"""/proc/interrupts, smp_affinity_list, and NUMA memory tiers."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from bench.samples import ours, sample, sample_names
from checker.parsers.interrupts import parse_affinity_list, parse_interrupts, parse_irq_affinities
from checker.parsers.memory_tiers import cpuless_memory_nodes, parse_memory_tiers
from checker.schemas import Interrupts


def rows_of(name: str) -> tuple[int, dict[str, tuple[list[int], str]]]:
    parsed = parse_interrupts(sample(f"proc-interrupts/{name}"))
    assert parsed.problems == []
    return parsed.value.cpu_count, {r.name: (r.per_cpu, r.description) for r in parsed.value.rows}


def test_kvm_guest_rows_including_dfr_and_mcp() -> None:
    cpus, rows = rows_of("kvm-guest-4cpu-dfr-mcp.txt")
    assert cpus == 4
    assert rows["MCP"] == ([1, 1, 1, 1], "Machine check polls")
    assert rows["MCE"] == ([0, 0, 0, 0], "Machine check exceptions")
    assert rows["DFR"] == ([0, 0, 0, 0], "Deferred Error APIC interrupts")
    assert rows["TLB"] == ([212, 137, 158, 231], "TLB shootdowns")
    assert rows["LOC"][0] == [10196, 7429, 8542, 8229]
    assert rows["CAL"][0] == [2761, 2485, 1787, 2367]
    assert rows["ERR"] == ([0], "")
    assert rows["MIS"] == ([0], "")
    assert rows["PIW"][1] == "Posted-interrupt wakeup event"
    assert rows["4"] == ([0, 1443, 0, 0], "IO-APIC 4-edge ttyS0")
    assert rows["29"] == ([1362, 0, 0, 934], "PCI-MSI 512000-edge ahci[0000:00:1f.2]")


def test_laptop_mcp_polls_and_tlb() -> None:
    cpus, rows = rows_of("laptop-i7-4cpu-ir-ioapic-mcp2400.txt")
    assert cpus == 4
    assert rows["MCP"][0] == [2406, 2399, 2399, 2399]
    assert rows["MCE"][0] == [0, 0, 0, 0]
    assert rows["TRM"][0] == rows["THR"][0] == [0, 0, 0, 0]
    assert rows["TLB"][0] == [10460334, 9918429, 10494258, 10345022]
    assert rows["NMI"][0] == [47, 5031, 6211, 4968]
    assert rows["16"] == ([328511, 322879, 293782, 351412], "IR-IO-APIC-fasteoi ehci_hcd:usb1, mmc0")


def test_aarch64_ipi_rows_and_no_x86_rows() -> None:
    cpus, rows = rows_of("aarch64-gic.txt")
    assert cpus == 8
    assert rows["IPI0"] == (
        [2768808080, 2844211768, 2878602432, 2730576120, 2723524623, 3349096412, 2717389879, 2154252810],
        "Rescheduling interrupts",
    )
    assert rows["IPI1"][1] == "Function call interrupts"
    assert rows["Err"] == ([0], "")
    assert rows["10"][1] == "GICv3 27 Level arch_timer"
    assert rows["53"][0][0] == 129969327
    assert "MCE" not in rows
    assert "TLB" not in rows


def test_interrupts_garbage() -> None:
    parsed = parse_interrupts("no header here")
    assert parsed.value.cpu_count == 0
    assert parsed.problems
    odd = parse_interrupts("  CPU0 CPU1\n  5: x y desc\nLOC: 1 2 Local timer interrupts\n")
    assert [r.name for r in odd.value.rows] == ["LOC"]
    assert len(odd.problems) == 1


def test_affinity_lists() -> None:
    assert parse_affinity_list("0-3,8\n").value == [0, 1, 2, 3, 8]
    parsed = parse_irq_affinities(
        {"42/smp_affinity_list": "2-3\n", "7/smp_affinity_list": "0\n", "default_smp_affinity": "ff"}
    )
    assert parsed.value == {"7": [0], "42": [2, 3]}


@pytest.mark.parametrize("name", sample_names("proc-interrupts"))
def test_every_real_sample_keeps_its_header_cpu_numbers(name: str) -> None:
    parsed = parse_interrupts(sample(name)).value
    header = next(line for line in sample(name).splitlines() if line.strip().startswith("CPU"))
    assert parsed.cpus == [int(c.removeprefix("CPU")) for c in header.split()]
    assert parsed.cpus == list(range(parsed.cpu_count))  # every CPU of the corpus's hosts is online


def test_offline_cpus_leave_gaps_in_the_header_and_the_columns_follow_it() -> None:
    parsed = parse_interrupts(ours("proc-interrupts-offline-cpus.txt"))  # ours: CPUs 2 and 4 offline
    assert parsed.problems == []
    irq = parsed.value
    assert (irq.cpu_count, irq.cpus) == (6, [0, 1, 3, 5, 6, 7])
    rows = {r.name: r.per_cpu for r in irq.rows}
    # the sixth column is CPU 7: its NIC queue and its TLB shootdowns
    assert rows["124"][irq.cpus.index(7)] == 2212345
    assert rows["TLB"] == [221345, 219876, 201234, 3, 2, 918273]
    assert rows["ERR"] == [0]


def test_a_header_that_does_not_name_distinct_cpus_falls_back_to_column_order() -> None:
    for header in ("  CPU0 CPU1 CPU1\n", "  CPU0 CPUx CPU2\n"):
        parsed = parse_interrupts(header + "LOC: 1 2 3 Local timer interrupts\n")
        assert (parsed.value.cpu_count, parsed.value.cpus) == (3, [])
        assert len(parsed.problems) == 1
        assert parsed.value.rows[0].per_cpu == [1, 2, 3]


def test_cpus_must_name_one_cpu_per_column() -> None:
    assert Interrupts(cpu_count=2, cpus=[0, 3]).cpus == [0, 3]
    assert Interrupts(cpu_count=2).cpus == []  # older agents: column i is CPU i
    for cpus in ([0], [0, 1, 2], [3, 3]):
        with pytest.raises(ValidationError, match="one distinct CPU per column"):
            Interrupts(cpu_count=2, cpus=cpus)


# -- memory tiers: no public samples; fixtures follow the kernel's documented formats -------------

NODE0_MEMINFO = """Node 0 MemTotal:       65536000 kB
Node 0 MemFree:        12345678 kB
Node 0 MemUsed:        53190322 kB
"""
NODE2_MEMINFO = """Node 2 MemTotal:      134217728 kB
Node 2 MemFree:       134000000 kB
"""


def test_memory_tiers_with_cxl_node() -> None:
    nodes = {
        "node0/cpulist": "0-31\n",
        "node0/meminfo": NODE0_MEMINFO,
        "node1/cpulist": "32-63\n",
        "node1/meminfo": NODE0_MEMINFO.replace("Node 0", "Node 1"),
        "node2/cpulist": "\n",
        "node2/meminfo": NODE2_MEMINFO,
    }
    parsed = parse_memory_tiers(
        nodes,
        demotion_enabled="true\n",
        numa_balancing="2\n",
        interleave_files={"node0": "5\n", "node1": "5\n", "node2": "1\n"},
    )
    assert parsed.problems == []
    tiers = parsed.value
    assert [(n.node, len(n.cpus), n.memory_mb) for n in tiers.nodes] == [(0, 32, 64000), (1, 32, 64000), (2, 0, 131072)]
    assert tiers.demotion_enabled is True
    assert tiers.numa_balancing == 2
    assert tiers.interleave_weights == {"0": 5, "1": 5, "2": 1}
    assert cpuless_memory_nodes(tiers) == [2]


def test_memory_tiers_misconfigured_and_missing_files() -> None:
    parsed = parse_memory_tiers({"node0/cpulist": "0-3"}, demotion_enabled="false", numa_balancing="0")
    assert parsed.value.demotion_enabled is False
    assert parsed.value.numa_balancing == 0
    assert parsed.value.interleave_weights == {}
    assert parse_memory_tiers({}).value.demotion_enabled is None


def test_memory_tiers_garbage_values_are_problems() -> None:
    parsed = parse_memory_tiers(
        {"node0/meminfo": "garbage"}, demotion_enabled="maybe", numa_balancing="on", interleave_files={"node0": "999"}
    )
    assert len(parsed.problems) == 4
    tiers = parsed.value
    assert (tiers.demotion_enabled, tiers.numa_balancing, tiers.interleave_weights) == (None, None, {})


def test_weighted_interleave_auto_mode() -> None:
    """weighted_interleave/auto (Linux 6.16 on) prints true/false; the first patches' Y/N read too."""
    for text, value in (("true\n", True), ("false\n", False), ("Y\n", True), ("N", False)):
        parsed = parse_memory_tiers({"node0/cpulist": "0-3"}, interleave_auto=text)
        assert (parsed.value.interleave_auto, parsed.problems) == (value, [])
    assert parse_memory_tiers({"node0/cpulist": "0-3"}).value.interleave_auto is None  # before 6.16
    garbage = parse_memory_tiers({"node0/cpulist": "0-3"}, interleave_auto="maybe\n")
    assert garbage.value.interleave_auto is None
    assert "weighted_interleave/auto is not true/false" in garbage.problems[0]
