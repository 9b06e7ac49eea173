"""CXL memory tiers set up as TPP needs them (seed 003): demotion on, NUMA balancing in its memory-tiering
mode (promotion of hot pages from the slow tier), and the weighted-interleave weights the hardware class
is configured for. Emitted on every report while the condition holds.

NUMA balancing is a bit mask (Documentation/admin-guide/sysctl/kernel.rst, numa_balancing): 1
NUMA_BALANCING_NORMAL, 2 NUMA_BALANCING_MEMORY_TIERING ("to optimize page placement among different
types of memory ... to place the hot pages in the fast memory"), added in Linux 5.18 ("NUMA balancing:
optimize page placement for memory tiering system", Huang Ying). Without bit 2 nothing promotes a page
that was demoted to CXL and turned hot again: demotion alone only ever moves pages down. Only a host in
the normal mode (1) is a candidate for the bit: 0 is balancing turned off, someone's decision (`balancing`
says which: normal, off, absent) that a ticket asks about.

Weighted interleave: from Linux 6.16 `weighted_interleave/auto` true means the kernel sets the weights from
the tiers' bandwidth (HMAT/CDAT) and writing a nodeN weight switches it to manual mode (kernel ABI doc
sysfs-kernel-mm-mempolicy-weighted-interleave). A host in auto mode is left alone: no mismatch, no default.
The weights are per node: with two DRAM nodes and one CXL node, 5/5/1 sends 1/11 (about 9 %) of the pages
to CXL where the seed's 5:1 sent 1/6 (about 17 %); docs/rules.md, "Interleave weights".
"""

from __future__ import annotations

import re
from typing import Any

from checker.schemas import MemoryTiers
from remediator.baselines import ClassBaseline
from remediator.signals import SignalValue

MEMORY_TIERING = 2  # NUMA_BALANCING_MEMORY_TIERING
TIERING_SINCE = (5, 18)
_RELEASE = re.compile(r"^(\d+)\.(\d+)")


def cpuless_nodes(tiers: MemoryTiers) -> list[int]:
    """NUMA nodes with memory and no CPUs: the far (CXL) tier."""
    return [n.node for n in tiers.nodes if not n.cpus and n.memory_mb > 0]


def kernel_has_tiering_mode(kernel: str | None) -> bool | None:
    """Whether the running kernel knows numa_balancing=2 (5.18 on); None when its release cannot be read.
    A distribution may backport it to an older release: the ticket then says so, the rule acts on none."""
    found = _RELEASE.match(kernel or "")
    if not found:
        return None
    return (int(found[1]), int(found[2])) >= TIERING_SINCE


def configured_weights(tiers: MemoryTiers, baseline: ClassBaseline | None) -> dict[str, int] | None:
    """The class's weights per node of this host (DRAM nodes `dram`, CPU-less nodes `cxl`); None: no policy."""
    policy = baseline.tiering.interleave if baseline is not None and baseline.tiering is not None else None
    if policy is None:
        return None
    return {str(n.node): (policy.dram if n.cpus else policy.cxl) for n in tiers.nodes if n.memory_mb > 0}


def cxl_share(weights: dict[str, int], far: list[int]) -> float | None:
    """The share of interleaved pages the weights send to the CPU-less nodes, in per cent."""
    total = sum(weights.values())
    return round(100 * sum(w for n, w in weights.items() if int(n) in far) / total, 1) if total else None


def tier_signals(
    tiers: MemoryTiers | None, kernel: str | None, baseline: ClassBaseline | None, hardware_class: str
) -> list[SignalValue]:
    if tiers is None or not (far := cpuless_nodes(tiers)):
        return []
    signals: list[SignalValue] = []
    memory = {n.node: n.memory_mb for n in tiers.nodes}
    if tiers.demotion_enabled is False:
        signals.extend(
            SignalValue(
                "cxl_demotion_disabled",
                f"node{node}",
                1.0,
                {"memory_mb": memory[node], "numa_balancing": tiers.numa_balancing},
            )
            for node in far
        )
    mode = tiers.numa_balancing
    if mode is None or not mode & MEMORY_TIERING:
        balancing = "absent" if mode is None else "off" if mode == 0 else "normal"
        supported = kernel_has_tiering_mode(kernel)
        if mode is None:  # no /proc/sys/kernel/numa_balancing: a kernel built without NUMA balancing
            supported = False
        detail: dict[str, Any] = {
            "current": mode,
            "balancing": balancing,
            "wanted": (mode or 0) | MEMORY_TIERING,
            "kernel": kernel,
            "supported": supported,
            "cpuless_nodes": far,
            "demotion_enabled": tiers.demotion_enabled,
        }
        signals.append(SignalValue("numa_balancing_tiering_off", "numa_balancing", 1.0, detail))
    if tiers.interleave_auto:  # the kernel's own weights from bandwidth data: writing one would end that
        return signals
    weights = {node: w for node, w in tiers.interleave_weights.items() if node.isdigit() and int(node) in memory}
    wanted = configured_weights(tiers, baseline)
    if weights and wanted is not None:
        if {k: v for k, v in weights.items() if k in wanted} != wanted:
            policy = baseline.tiering if baseline is not None else None
            detail = {
                "current": weights,
                "configured": wanted,
                "meaning": "per-node weights: each DRAM node gets dram, each CPU-less node cxl",
                "cxl_share_pct": cxl_share(wanted, far),
                "hardware_class": hardware_class,
                "cpuless_nodes": far,
                "source": policy.source if policy is not None else None,
            }
            signals.append(SignalValue("interleave_weights_mismatch", "weighted_interleave", 1.0, detail))
    elif len(weights) >= 2 and len(set(weights.values())) == 1:
        # No weights configured for the class: 1:1 is known to be bad (-44% on the measured platform), but
        # the right N:M depends on this platform's tier bandwidths, so this is a person's to set.
        detail = {"weights": weights, "cpuless_nodes": far, "hardware_class": hardware_class, "configured": False}
        signals.append(SignalValue("interleave_weights_default", "weighted_interleave", 1.0, detail))
    return signals
