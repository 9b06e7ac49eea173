"""/proc/interrupts and /proc/irq/N/smp_affinity_list.

Every row is kept: numbered device IRQs, the x86 rows (NMI, LOC, CAL, TLB, TRM, THR, DFR, MCE,
MCP …), arm64 IPIn rows, and the single-number rows (ERR, MIS, Err) whose per_cpu list has one
total. per_cpu[i] belongs to the i-th CPUn column of the header, and `cpus` keeps the header's CPU
numbers: offline CPUs have no column (nosmt, hotplug), so column i is not always CPU i.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from checker.parsers.common import MAX_CPUS, Parsed, clip, guarded, parse_cpu_list, problem
from checker.schemas import InterruptRow, Interrupts

_ROW = re.compile(r"^\s*([^\s:]+):\s*(.*)$")
MAX_ROWS = 2048


@guarded(lambda: Interrupts(cpu_count=0))
def parse_interrupts(text: str) -> Parsed[Interrupts]:
    problems: list[str] = []
    lines = text.splitlines()
    header_index = next((i for i, line in enumerate(lines) if line.strip().startswith("CPU")), None)
    if header_index is None:
        return Parsed(Interrupts(cpu_count=0), [problem("no CPU header line in /proc/interrupts", text)])
    cpu_columns = [c for c in lines[header_index].split() if c.startswith("CPU")]
    cpu_count = min(len(cpu_columns), MAX_CPUS)
    cpus = _header_cpus(cpu_columns[:cpu_count])
    if cpus is None:
        cpus = []
        problems.append(
            problem("header CPU columns are not distinct CPUn names; column i taken as CPU i", lines[header_index])
        )
    rows: list[InterruptRow] = []
    for line in lines[header_index + 1 :]:
        if not line.strip():
            continue
        m = _ROW.match(line)
        if m is None:
            problems.append(problem("not an interrupts row", line))
            continue
        name, rest = m.group(1), m.group(2)
        tokens = rest.split()
        counts: list[int] = []
        for token in tokens[:cpu_count]:
            if not token.isdecimal() or len(token) > 18:
                break
            counts.append(int(token))
        if not counts:
            problems.append(problem(f"interrupt row {name} without counters", line))
            continue
        description = " ".join(tokens[len(counts) :])
        if len(rows) >= MAX_ROWS:
            problems.append(f"more than {MAX_ROWS} interrupt rows; the rest dropped")
            break
        rows.append(InterruptRow(name=clip(name, 32), per_cpu=counts, description=clip(description, 256)))
    return Parsed(Interrupts(cpu_count=cpu_count, rows=rows, cpus=cpus), problems)


def _header_cpus(columns: list[str]) -> list[int] | None:
    """'CPU0 CPU1 CPU3' -> [0, 1, 3]; None when a column is not CPUn or a number repeats."""
    numbers = [int(c[3:]) for c in columns if c[3:].isdecimal() and len(c) <= 9]
    if len(numbers) != len(columns) or len(set(numbers)) != len(numbers):
        return None
    return numbers


@guarded(list)
def parse_affinity_list(text: str) -> Parsed[list[int]]:
    """/proc/irq/N/smp_affinity_list: a cpu list such as '0-3,8'."""
    return parse_cpu_list(text)


@guarded(dict)
def parse_irq_affinities(files: Mapping[str, str]) -> Parsed[dict[str, list[int]]]:
    """Paths like '42/smp_affinity_list' (relative to /proc/irq) -> {'42': [cpus]}, for Interrupts.irq_affinity."""
    result: dict[str, list[int]] = {}
    problems: list[str] = []
    for path, content in files.items():
        m = re.search(r"(?:^|/)(\d{1,20})/smp_affinity_list$", path)
        if m is None:
            continue
        parsed = parse_cpu_list(content)
        result[m.group(1)] = parsed.value
        problems.extend(f"irq {m.group(1)}: {p}" for p in parsed.problems)
    return Parsed(dict(sorted(result.items(), key=lambda kv: int(kv[0]))), problems)
