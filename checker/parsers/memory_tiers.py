"""NUMA memory tiers: node cpus and memory, demotion, NUMA balancing mode, weighted interleave.

Sources (kernel ABI docs): /sys/devices/system/node/nodeN/{cpulist,meminfo},
/sys/kernel/mm/numa/demotion_enabled ('true'/'false'), /proc/sys/kernel/numa_balancing
(0 off, 1 normal, 2 memory tiering, 3 both), /sys/kernel/mm/mempolicy/weighted_interleave/nodeN
(a weight 1-255), /sys/kernel/mm/mempolicy/weighted_interleave/auto (Linux 6.16 on: 'true'/'false', 'Y'/'N'
in the first patches; true: the kernel sets the weights from bandwidth data). CPU-less nodes with memory
are the CXL/far-memory tier.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from checker.parsers.common import Parsed, guarded, parse_cpu_list, problem, to_int
from checker.schemas import MemoryTiers, NumaNode

_NODE_FILE = re.compile(r"(?:^|/)node(\d{1,18})/(cpulist|meminfo)$")
_MEMTOTAL = re.compile(r"^Node\s+\d{1,18}\s+MemTotal:\s+(\d{1,18})\s*kB", re.MULTILINE)
_WEIGHT_FILE = re.compile(r"(?:^|/)node(\d{1,18})$")
MAX_NODES = 64


@guarded(MemoryTiers)
def parse_memory_tiers(
    node_files: Mapping[str, str],
    demotion_enabled: str | None = None,
    numa_balancing: str | None = None,
    interleave_files: Mapping[str, str] | None = None,
    interleave_auto: str | None = None,
) -> Parsed[MemoryTiers]:
    """node_files: paths relative to /sys/devices/system/node ('node0/cpulist', 'node0/meminfo').
    interleave_files: paths relative to /sys/kernel/mm/mempolicy/weighted_interleave ('node0').
    A file the collector could not read is simply absent (None for the scalars)."""
    problems: list[str] = []
    nodes: dict[int, NumaNode] = {}
    for path, content in node_files.items():
        m = _NODE_FILE.search(path)
        if m is None:
            continue
        number = int(m.group(1))
        node = nodes.setdefault(number, NumaNode(node=number))
        if m.group(2) == "cpulist":
            cpus = parse_cpu_list(content)
            node.cpus = cpus.value
            problems.extend(f"node{number}/cpulist: {p}" for p in cpus.problems)
        else:
            total = _MEMTOTAL.search(content)
            if total is None:
                problems.append(problem(f"node{number}/meminfo without MemTotal", content))
            else:
                node.memory_mb = int(total.group(1)) // 1024
    if len(nodes) > MAX_NODES:
        problems.append(f"{len(nodes)} NUMA nodes, only {MAX_NODES} kept")
    tiers = MemoryTiers(nodes=[nodes[n] for n in sorted(nodes)][:MAX_NODES])

    if demotion_enabled is not None:
        value = demotion_enabled.strip().lower()
        if value in ("true", "1"):
            tiers.demotion_enabled = True
        elif value in ("false", "0"):
            tiers.demotion_enabled = False
        else:
            problems.append(problem("demotion_enabled is not true/false", demotion_enabled))
    if numa_balancing is not None:
        mode = to_int(numa_balancing)
        if mode is None:
            problems.append(problem("numa_balancing is not an integer", numa_balancing))
        else:
            tiers.numa_balancing = mode
    if interleave_auto is not None:
        value = interleave_auto.strip().lower()
        if value in ("true", "1", "y"):
            tiers.interleave_auto = True
        elif value in ("false", "0", "n"):
            tiers.interleave_auto = False
        else:
            problems.append(problem("weighted_interleave/auto is not true/false", interleave_auto))
    for path, content in (interleave_files or {}).items():
        m = _WEIGHT_FILE.search(path.rstrip("/"))
        if m is None:
            continue
        weight = to_int(content)
        if weight is None or not 0 <= weight <= 255:
            problems.append(problem(f"node{m.group(1)} interleave weight is not 0-255", content))
            continue
        tiers.interleave_weights[m.group(1)] = weight
    tiers.interleave_weights = dict(sorted(tiers.interleave_weights.items(), key=lambda kv: int(kv[0])))
    return Parsed(tiers, problems)


def cpuless_memory_nodes(tiers: MemoryTiers) -> list[int]:
    """Nodes with memory and no cpus: the far (CXL) tier that demotion and interleave should use."""
    return [n.node for n in tiers.nodes if not n.cpus and n.memory_mb > 0]
