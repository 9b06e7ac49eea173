"""Memory tiers: NUMA nodes (cpus, memory; CPU-less nodes with memory are CXL/far memory), page
demotion, the NUMA balancing mode and the weighted-interleave weights and mode (auto, Linux 6.16 on)."""

from __future__ import annotations

import re

from checker.collectors.context import Context, Unavailable
from checker.parsers.memory_tiers import parse_memory_tiers

NODES = "/sys/devices/system/node"
DEMOTION = "/sys/kernel/mm/numa/demotion_enabled"
NUMA_BALANCING = "/proc/sys/kernel/numa_balancing"
INTERLEAVE = "/sys/kernel/mm/mempolicy/weighted_interleave"
_NODE = re.compile(r"node\d{1,6}")


def collect(ctx: Context) -> None:
    entries = ctx.host.list_dir(NODES)
    if entries is None:
        raise Unavailable(f"{NODES} does not exist (a kernel without NUMA)")
    node_files: dict[str, str] = {}
    for node in (e for e in entries if _NODE.fullmatch(e)):
        for name in ("cpulist", "meminfo"):
            content = ctx.host.read_text(f"{NODES}/{node}/{name}")
            if content is not None:
                node_files[f"{node}/{name}"] = content
    weights: dict[str, str] = {}
    for node in (e for e in ctx.host.list_dir(INTERLEAVE) or [] if _NODE.fullmatch(e)):
        content = ctx.host.read_text(f"{INTERLEAVE}/{node}")
        if content is not None:
            weights[node] = content
    auto = ctx.host.read_text(f"{INTERLEAVE}/auto")  # Linux 6.16 on
    parsed = parse_memory_tiers(
        node_files, ctx.host.read_text(DEMOTION), ctx.host.read_text(NUMA_BALANCING), weights, auto
    )
    ctx.observations.memory_tiers = ctx.take(parsed, "memory tiers", repr(node_files)[:2000])
