"""Interrupts on isolated cores: device IRQ and TLB shootdown rates from counter deltas, and affinities."""

from __future__ import annotations

from checker.parsers.interrupts import parse_interrupts
from checker.schemas import Interrupts
from remediator.derive.interrupts import MAX_GAP_S, cpu_list
from tests.checker.helpers import sample
from tests.remediator.builders import Deriver, at, by_subject, identity, interrupts, of, report

ISOLATED = identity(isolated=[2, 3], nohz_full=[2, 3])


def counters(dev2: int, tlb2: int, dev3: int = 0, tlb3: int = 0, loc: int = 0) -> Interrupts:
    return interrupts(
        4,
        {"24": [500, 0, dev2, dev3], "TLB": [900, 900, tlb2, tlb3], "LOC": [10**6, 10**6, loc, loc]},
        {"24": [0]},
    )


def test_rates_on_isolated_cpus_from_deltas_and_loc_is_no_fault() -> None:
    run = Deriver()
    assert run(report(at(0), identity=ISOLATED, interrupts=counters(0, 0))) == []  # first sight: no interval yet
    signals = run(report(at(1), identity=ISOLATED, interrupts=counters(120, 360, loc=60)))
    irq = by_subject(signals, "isolated_cpu_irq_rate")
    tlb = by_subject(signals, "isolated_cpu_tlb_rate")
    assert set(irq) == set(tlb) == {"cpu2"}  # cpu3 stayed quiet; LOC at 1/s is expected
    assert irq["cpu2"].value == 2.0
    assert tlb["cpu2"].value == 6.0
    assert irq["cpu2"].detail["isolated_by"] == ["isolcpus", "nohz_full"]
    assert irq["cpu2"].detail["irqs"] == [{"irq": "24", "description": "", "count": 120}]
    assert run(report(at(2), identity=ISOLATED, interrupts=counters(120, 360, loc=120))) == []  # no change


def test_a_reboot_or_a_decrease_gives_no_rate() -> None:
    run = Deriver()
    run(report(at(0), identity=ISOLATED, interrupts=counters(5000, 5000)))
    assert run(report(at(1), boot="boot-2", identity=ISOLATED, interrupts=counters(9000, 9000))) == []
    assert run(report(at(2), boot="boot-2", identity=ISOLATED, interrupts=counters(10, 10))) == []
    assert of(
        run(report(at(3), boot="boot-2", identity=ISOLATED, interrupts=counters(70, 10))), "isolated_cpu_irq_rate"
    )


def test_a_long_gap_gives_no_rate() -> None:
    run = Deriver()
    run(report(at(0), identity=ISOLATED, interrupts=counters(0, 0)))
    assert run(report(at(MAX_GAP_S / 60 + 1), identity=ISOLATED, interrupts=counters(10, 10))) == []


def test_hosts_without_isolated_cpus_keep_no_interrupt_memory() -> None:
    run = Deriver()
    assert run(report(at(0), identity=identity(), interrupts=counters(0, 0))) == []
    assert run(report(at(1), identity=identity(), interrupts=counters(99, 99))) == []
    assert "irq" not in run.memory


def test_cpus_newly_isolated_start_from_a_baseline() -> None:
    run = Deriver()
    run(report(at(0), identity=identity(isolated=[2]), interrupts=counters(0, 0, 0, 0)))
    signals = run(report(at(1), identity=identity(isolated=[2, 3]), interrupts=counters(0, 0, 60, 60)))
    assert signals == []


def test_affinity_that_could_exclude_isolated_cpus() -> None:
    rows = {"24": [0, 0, 0, 0], "25": [0, 0, 0, 0], "26": [0, 0, 0, 0], "27": [0, 0, 0, 0]}
    affinity = {
        "24": [0, 1],  # housekeeping only: fine
        "25": [0, 1, 2, 3],  # everywhere, isolated cores included: could be kept off them
        "26": [3],  # a managed per-CPU queue pinned on purpose: left alone
        "27": [1, 2],
    }
    signals = Deriver()(report(at(0), identity=ISOLATED, interrupts=interrupts(4, rows, affinity)))
    found = by_subject(signals, "irq_affinity_isolated")
    assert set(found) == {"irq 25", "irq 27"}
    assert found["irq 25"].detail["affinity"] == "0-3"
    assert found["irq 25"].detail["isolated_in_list"] == "2-3"


def test_real_proc_interrupts_with_isolated_cores() -> None:
    parsed = parse_interrupts(sample("proc-interrupts/laptop-i7-4cpu-ir-ioapic-mcp2400.txt")).value
    host = identity(isolated=[3], nohz_full=[3])
    run = Deriver()
    assert run(report(at(0), identity=host, interrupts=parsed)) == []
    grown = parsed.model_copy(deep=True)
    for row in grown.rows:
        if row.name in ("43", "TLB"):
            row.per_cpu[3] += 600
    signals = run(report(at(10), identity=host, interrupts=grown))
    assert by_subject(signals, "isolated_cpu_irq_rate")["cpu3"].value == 1.0
    assert by_subject(signals, "isolated_cpu_tlb_rate")["cpu3"].value == 1.0
    busiest = max((r for r in grown.rows if r.name.isdigit()), key=lambda r: r.per_cpu[3])
    assert by_subject(signals, "isolated_cpu_irq_rate")["cpu3"].detail["irqs"][0]["irq"] == busiest.name


def test_cpu_list_notation() -> None:
    assert cpu_list([0, 1, 2, 3, 8, 10, 11]) == "0-3,8,10-11"
    assert cpu_list([]) == ""
