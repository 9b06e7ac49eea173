"""Interrupts on isolated cores: device IRQs and TLB shootdowns landing where they should not,
and IRQs whose affinity still lets them.

Cores isolated with isolcpus or nohz_full should see no device IRQs (irqbalance with
IRQBALANCE_BANNED_CPUS keeps them off) and no TLB shootdown IPIs; the local timer (LOC)
still fires about once a second and is not a fault. Rates come from /proc/interrupts
counters of the isolated CPUs only (kept in memory). Column i of a row is CPU `cpus[i]`, the
header's number (offline CPUs have no column); a report without `cpus` (older agents) means
column i is CPU i. A new boot id, a counter that went down, a first sight, a change between
those two ways of numbering, or a gap longer than MAX_GAP_S gives no rate.

TLB shootdowns come from munmap/mprotect in sibling threads of the process that runs on the
core: no affinity moves them, its owner must. Their signal names the processes whose threads
last ran on that CPU (the report's isolated_workload section), for a ticket to that owner.
"""

from __future__ import annotations

import datetime as dt

from checker.schemas import Identity, InterruptRow, Interrupts, IsolatedProcess, IsolatedWorkload
from remediator.derive.memory import IrqMemory
from remediator.signals import MAX_GAP_S, SignalValue

MAX_TRACKED_CPUS = 64
MAX_AFFINITY_SIGNALS = 32
TOP_IRQS = 3
MAX_TLB_PROCESSES = 5  # processes named in one isolated_cpu_tlb_rate signal
MAX_CPU_LIST_CHARS = 128


def isolated_cpus(identity: Identity) -> list[int]:
    return sorted(set(identity.isolated_cpus) | set(identity.nohz_full_cpus))


def cpu_list(cpus: list[int]) -> str:
    """[0, 1, 2, 3, 8] -> '0-3,8', the kernel's own notation."""
    ranges: list[str] = []
    for cpu in sorted(set(cpus)):
        if ranges and cpu == int(ranges[-1].rsplit("-", 1)[-1]) + 1:
            ranges[-1] = f"{ranges[-1].split('-')[0]}-{cpu}"
        else:
            ranges.append(str(cpu))
    return ",".join(ranges)


def _isolated_by(identity: Identity, cpu: int) -> list[str]:
    lists = (("isolcpus", identity.isolated_cpus), ("nohz_full", identity.nohz_full_cpus))
    return [name for name, cpus in lists if cpu in cpus]


def cpu_columns(interrupts: Interrupts) -> dict[int, int]:
    """CPU number -> its column in every row's per_cpu: the header's numbers when the report has
    them (CPU0 CPU1 CPU3 -> {0: 0, 1: 1, 3: 2}), else column i is CPU i."""
    if interrupts.cpus:
        return {cpu: column for column, cpu in enumerate(interrupts.cpus)}
    return {cpu: cpu for cpu in range(interrupts.cpu_count)}


def _at(row: InterruptRow, column: int) -> int:
    return row.per_cpu[column] if column < len(row.per_cpu) else 0


def _rate_signal(kind: str, cpu: int, delta: int, elapsed: float, detail: dict[str, object]) -> SignalValue:
    return SignalValue(
        kind, f"cpu{cpu}", delta / elapsed, {"cpu": cpu, "delta": delta, "elapsed_s": round(elapsed, 3), **detail}
    )


def irq_signals(
    interrupts: Interrupts | None,
    identity: Identity | None,
    previous: IrqMemory | None,
    *,
    now: dt.datetime,
    boot_id: str | None,
    workload: IsolatedWorkload | None = None,
) -> tuple[list[SignalValue], IrqMemory | None]:
    if interrupts is None or identity is None:
        return [], previous
    isolated = isolated_cpus(identity)
    if not isolated:
        return [], None
    signals = _affinity_signals(interrupts, set(isolated))
    devices = [row for row in interrupts.rows if row.name.isdigit()]
    tlb = next((row for row in interrupts.rows if row.name == "TLB"), None)
    columns = cpu_columns(interrupts)
    tracked = [cpu for cpu in isolated if cpu in columns][:MAX_TRACKED_CPUS]
    counts = {
        str(cpu): (sum(_at(r, columns[cpu]) for r in devices), _at(tlb, columns[cpu]) if tlb else 0) for cpu in tracked
    }
    by_header = bool(interrupts.cpus)

    usable = previous is not None and not (boot_id and previous.boot and boot_id != previous.boot)
    # Counts kept by column position cannot be compared with counts kept by CPU number.
    usable = usable and previous is not None and previous.header_cpus == by_header
    elapsed = (now - previous.at).total_seconds() if previous is not None else 0.0
    if usable and previous is not None and 0 < elapsed <= MAX_GAP_S:
        for cpu in tracked:
            before = previous.cpus.get(str(cpu))
            if before is None:
                continue
            (dev_now, tlb_now), (dev_was, tlb_was) = counts[str(cpu)], before
            via = _isolated_by(identity, cpu)
            if dev_now > dev_was:
                column = columns[cpu]
                busy = ((_at(r, column), r) for r in devices if _at(r, column))
                top = sorted(busy, key=lambda x: -x[0])[:TOP_IRQS]
                irqs = [{"irq": r.name, "description": r.description, "count": n} for n, r in top]
                detail: dict[str, object] = {"isolated_by": via, "irqs": irqs}
                signals.append(_rate_signal("isolated_cpu_irq_rate", cpu, dev_now - dev_was, elapsed, detail))
            if tlb_now > tlb_was:
                detail = {"isolated_by": via, **workload_detail(workload, cpu)}
                signals.append(_rate_signal("isolated_cpu_tlb_rate", cpu, tlb_now - tlb_was, elapsed, detail))
    return signals, IrqMemory(at=now, boot=boot_id, cpus=counts, header_cpus=by_header)


def _threads_on(process: IsolatedProcess, cpu: int) -> int:
    return process.threads_by_cpu.get(str(cpu), 0)


def _clipped_cpu_list(cpus: list[int]) -> str:
    text = cpu_list(cpus)
    return text if len(text) <= MAX_CPU_LIST_CHARS else text[: MAX_CPU_LIST_CHARS - 1] + "…"


def workload_detail(workload: IsolatedWorkload | None, cpu: int) -> dict[str, object]:
    """Who the TLB shootdowns on `cpu` are about: the processes whose threads last ran there (most
    threads first), a one-line `workload` naming them for a ticket, and whether the agent's list
    was whole (no section, processes it dropped or did not scan: one may be missing)."""
    if workload is None:
        return {"processes": [], "workload": "unknown", "processes_complete": False}
    here = sorted((p for p in workload.processes if _threads_on(p, cpu)), key=lambda p: (-_threads_on(p, cpu), p.pid))
    listed = here[:MAX_TLB_PROCESSES]
    processes = [
        {
            "pid": p.pid,
            "comm": p.comm,
            "threads": _threads_on(p, cpu),
            "isolated_cpus": _clipped_cpu_list([int(c) for c in p.threads_by_cpu if c.isdigit()]),
        }
        for p in listed
    ]
    names = ", ".join(f"{p.comm} (pid {p.pid})" for p in listed)
    if len(here) > len(listed):
        names += f" and {len(here) - len(listed)} more"
    return {
        "processes": processes,
        "workload": names or "unknown",
        "processes_complete": workload.dropped == 0 and workload.unscanned == 0,
    }


def _affinity_signals(interrupts: Interrupts, isolated: set[int]) -> list[SignalValue]:
    """An IRQ allowed on an isolated CPU while its list also names a housekeeping CPU could be kept off
    the isolated ones. A list of isolated CPUs only is left alone: that is a per-CPU (managed) queue
    the kernel pins on purpose and irqbalance cannot move."""
    descriptions = {row.name: row.description for row in interrupts.rows}
    signals = []
    for irq, cpus in sorted(interrupts.irq_affinity.items(), key=lambda kv: int(kv[0]) if kv[0].isdigit() else -1):
        allowed = set(cpus)
        on_isolated = allowed & isolated
        if not irq.isdigit() or not on_isolated or not (allowed - isolated):
            continue
        detail = {
            "affinity": cpu_list(cpus),
            "isolated_in_list": cpu_list(sorted(on_isolated)),
            "description": descriptions.get(irq, ""),
        }
        signals.append(SignalValue("irq_affinity_isolated", f"irq {irq}", 1.0, detail))
        if len(signals) >= MAX_AFFINITY_SIGNALS:
            break
    return signals
