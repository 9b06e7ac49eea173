"""Interrupts: /proc/interrupts per-CPU counters (MCE, MCP, THR, TRM, DFR, LOC, CAL, TLB, NMI and
device IRQs) for per-core rates on isolated cores, and each IRQ's /proc/irq/N/smp_affinity_list."""

from __future__ import annotations

from checker.collectors.context import Context, Unavailable
from checker.parsers.interrupts import parse_interrupts, parse_irq_affinities

PROC_INTERRUPTS = "/proc/interrupts"
PROC_IRQ = "/proc/irq"


def collect(ctx: Context) -> None:
    text = ctx.host.read_text(PROC_INTERRUPTS)
    if text is None:
        raise Unavailable(f"{PROC_INTERRUPTS} cannot be read")
    interrupts = ctx.take(parse_interrupts(text), PROC_INTERRUPTS, text, empty=lambda i: not i.rows)
    files: dict[str, str] = {}
    for irq in ctx.host.list_dir(PROC_IRQ) or []:
        if irq.isdecimal():
            content = ctx.host.read_text(f"{PROC_IRQ}/{irq}/smp_affinity_list")
            if content is not None:
                files[f"{irq}/smp_affinity_list"] = content
    interrupts.irq_affinity = ctx.take(parse_irq_affinities(files), PROC_IRQ, repr(files)[:2000])
    ctx.observations.interrupts = interrupts
