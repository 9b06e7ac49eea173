"""Interrupts on isolated cores: device IRQ and TLB shootdown rates from counter deltas, and affinities."""

from __future__ import annotations

import json
from pathlib import Path

from bench.samples import SnapshotBuilder, listing_to_files, ours, sample
from checker.collectors.identity import collect as collectors_identity
from checker.collectors.interrupts import collect as collectors_irq
from checker.collectors.isolated_workload import collect as workload_collect
from checker.parsers.interrupts import parse_interrupts
from checker.schemas import MAX_ISOLATED_PROCESSES, Interrupts, IsolatedProcess, IsolatedWorkload
from remediator.derive.interrupts import MAX_CPU_LIST_CHARS, MAX_GAP_S, MAX_TLB_PROCESSES, cpu_columns, cpu_list
from remediator.signals import SignalValue
from tests.builders.observations import Deriver, at, by_subject, identity, interrupts, of, report

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


# -- the header's CPU numbers: column i is not always CPU i --------------------------------------

OFFLINE = "proc-interrupts-offline-cpus.txt"  # ours: CPUs 2 and 4 offline, header CPU0 CPU1 CPU3 CPU5 CPU6 CPU7
ISOLATED_5_7 = identity(isolated=[5, 6, 7], nohz_full=[5, 6, 7])


def grown(irq: Interrupts, cpu: int, more: dict[str, int]) -> Interrupts:
    """The same counters later, with some rows grown on one CPU (its column found by the header's numbers)."""
    later = irq.model_copy(deep=True)
    column = later.cpus.index(cpu) if later.cpus else cpu
    for row in later.rows:
        if row.name in more:
            row.per_cpu[column] += more[row.name]
    return later


def test_with_offline_cpus_the_core_that_took_the_interrupts_is_blamed() -> None:
    parsed = parse_interrupts(ours(OFFLINE)).value
    run = Deriver()
    assert run(report(at(0), identity=ISOLATED_5_7, interrupts=parsed)) == []
    signals = run(report(at(10), identity=ISOLATED_5_7, interrupts=grown(parsed, 7, {"124": 1200, "TLB": 600})))
    irq = by_subject(signals, "isolated_cpu_irq_rate")
    tlb = by_subject(signals, "isolated_cpu_tlb_rate")
    # The sixth column is CPU 7; read as CPU 5 it would blame a quiet core and never watch CPU 7.
    assert set(irq) == set(tlb) == {"cpu7"}
    assert (irq["cpu7"].value, tlb["cpu7"].value) == (2.0, 1.0)
    assert irq["cpu7"].detail["irqs"][0] == {
        "irq": "124",
        "description": "IR-PCI-MSIX-0000:3b:00.0 4-edge mlx5_comp3@pci:0000:3b:00.0",
        "count": 2212345 + 1200,
    }
    assert run.memory["irq"]["cpus"] == {"5": [0, 3], "6": [0, 2], "7": [2212345 + 1200, 918273 + 600]}
    assert run.memory["irq"]["header_cpus"] is True


def test_isolated_cpus_that_are_offline_are_not_watched() -> None:
    parsed = parse_interrupts(ours(OFFLINE)).value
    host = identity(isolated=[2, 4, 7], nohz_full=[2, 4, 7])  # 2 and 4 have no column
    run = Deriver()
    run(report(at(0), identity=host, interrupts=parsed))
    assert set(run.memory["irq"]["cpus"]) == {"7"}
    signals = run(report(at(10), identity=host, interrupts=grown(parsed, 7, {"TLB": 60})))
    assert set(by_subject(signals, "isolated_cpu_tlb_rate")) == {"cpu7"}


def test_cpu_columns_from_the_header_or_by_position() -> None:
    assert cpu_columns(parse_interrupts(ours(OFFLINE)).value) == {0: 0, 1: 1, 3: 2, 5: 3, 6: 4, 7: 5}
    assert cpu_columns(Interrupts(cpu_count=3)) == {0: 0, 1: 1, 2: 2}  # an older agent's report


def test_a_change_in_how_columns_are_numbered_gives_no_rate_once() -> None:
    """Memory kept by column position (older agents) is not compared with counts by CPU number."""
    parsed = parse_interrupts(sample("proc-interrupts/laptop-i7-4cpu-ir-ioapic-mcp2400.txt")).value
    old = parsed.model_copy(update={"cpus": []})
    host = identity(isolated=[3], nohz_full=[3])
    run = Deriver()
    run(report(at(0), identity=host, interrupts=old))
    assert run.memory["irq"]["header_cpus"] is False
    assert run(report(at(10), identity=host, interrupts=grown(parsed, 3, {"TLB": 600}))) == []
    assert run.memory["irq"]["header_cpus"] is True
    signals = run(report(at(20), identity=host, interrupts=grown(parsed, 3, {"TLB": 1200})))
    assert by_subject(signals, "isolated_cpu_tlb_rate")["cpu3"].value == 1.0


# -- who the TLB shootdowns are about: the processes on that core ---------------------------------


def process(pid: int, comm: str, by_cpu: dict[str, int], threads: int = 1) -> IsolatedProcess:
    return IsolatedProcess(
        pid=pid, comm=comm, threads=threads, isolated_threads=sum(by_cpu.values()), threads_by_cpu=by_cpu
    )


TRADING = IsolatedWorkload(
    isolated_cpus=[2, 3],
    processes=[process(4242, "trader", {"2": 2, "3": 1}, threads=5), process(5150, "feed) handler", {"3": 1})],
    processes_scanned=7,
    threads_read=7,
)


def tlb_and_irq(workload: IsolatedWorkload | None) -> list[SignalValue]:
    run = Deriver()
    run(report(at(0), identity=ISOLATED, interrupts=counters(0, 0), isolated_workload=workload))
    return run(report(at(1), identity=ISOLATED, interrupts=counters(60, 120, 60, 60), isolated_workload=workload))


def test_tlb_shootdowns_name_the_processes_whose_threads_ran_on_that_core() -> None:
    signals = tlb_and_irq(TRADING)
    tlb = by_subject(signals, "isolated_cpu_tlb_rate")
    assert tlb["cpu2"].detail == {
        "cpu": 2,
        "delta": 120,
        "elapsed_s": 60.0,
        "isolated_by": ["isolcpus", "nohz_full"],
        "processes": [{"pid": 4242, "comm": "trader", "threads": 2, "isolated_cpus": "2-3"}],
        "workload": "trader (pid 4242)",
        "processes_complete": True,
    }
    assert tlb["cpu3"].detail["processes"] == [
        {"pid": 4242, "comm": "trader", "threads": 1, "isolated_cpus": "2-3"},
        {"pid": 5150, "comm": "feed) handler", "threads": 1, "isolated_cpus": "3"},
    ]
    assert tlb["cpu3"].detail["workload"] == "trader (pid 4242), feed) handler (pid 5150)"
    # device IRQs are what affinity fixes: their detail stays as it was
    for signal in of(signals, "isolated_cpu_irq_rate"):
        assert set(signal.detail) == {"cpu", "delta", "elapsed_s", "isolated_by", "irqs"}


def test_without_the_workload_section_the_process_is_unknown() -> None:
    tlb = by_subject(tlb_and_irq(None), "isolated_cpu_tlb_rate")["cpu2"]
    assert (tlb.detail["processes"], tlb.detail["workload"], tlb.detail["processes_complete"]) == ([], "unknown", False)
    partial = TRADING.model_copy(update={"unscanned": 1})
    tlb = by_subject(tlb_and_irq(partial), "isolated_cpu_tlb_rate")["cpu2"]
    assert (tlb.detail["workload"], tlb.detail["processes_complete"]) == ("trader (pid 4242)", False)
    nobody = TRADING.model_copy(update={"processes": [process(5150, "feed) handler", {"3": 1})]})
    tlb = by_subject(tlb_and_irq(nobody), "isolated_cpu_tlb_rate")["cpu2"]
    assert (tlb.detail["processes"], tlb.detail["workload"], tlb.detail["processes_complete"]) == ([], "unknown", True)


def test_the_tlb_detail_is_bounded() -> None:
    everywhere = {str(cpu): 1 for cpu in range(0, 4096, 2)}  # a process spread over 2,048 isolated CPUs
    many = [process(100 + n, f"worker-{n}", {"2": 1}) for n in range(MAX_ISOLATED_PROCESSES - 1)]
    workload = IsolatedWorkload(
        isolated_cpus=list(range(4096)), processes=[process(99, "spread", everywhere), *many], dropped=9
    )
    run = Deriver()
    run(report(at(0), identity=ISOLATED, interrupts=counters(0, 0), isolated_workload=workload))
    signals = run(report(at(1), identity=ISOLATED, interrupts=counters(0, 60), isolated_workload=workload))
    detail = by_subject(signals, "isolated_cpu_tlb_rate")["cpu2"].detail
    assert len(detail["processes"]) == MAX_TLB_PROCESSES
    spread = detail["processes"][0]
    assert spread["pid"] == 99
    assert len(spread["isolated_cpus"]) <= MAX_CPU_LIST_CHARS
    assert spread["isolated_cpus"].startswith("0,2,4,")
    assert spread["isolated_cpus"].endswith("…")
    assert detail["workload"].endswith(f"and {MAX_ISOLATED_PROCESSES - MAX_TLB_PROCESSES} more")
    assert detail["processes_complete"] is False
    assert len(json.dumps(detail)) < 1000
    assert "isolated_workload" not in json.dumps(run.memory)  # the section is read, never remembered


def test_from_the_collector_to_the_signal_through_snapshots(tmp_path: Path) -> None:
    """The real laptop /proc/interrupts and our /proc fixture, through the collectors, then derived."""
    laptop = sample("proc-interrupts/laptop-i7-4cpu-ir-ioapic-mcp2400.txt")
    collectors = {"identity": collectors_identity, "interrupts": collectors_irq, "isolated_workload": workload_collect}
    reports = []
    for n, irq_text in enumerate((laptop, grown_text(laptop, "TLB", 2, 600))):
        snap = SnapshotBuilder(tmp_path / str(n)).files("/", listing_to_files(ours("proc-isolated-workload.txt"), "/"))
        snap.file("/proc/interrupts", irq_text)
        reports.append(snap.cycle(collectors=collectors).model_copy(update={"captured_at": at(10 * n)}))
    run = Deriver()
    assert run(reports[0]) == []
    tlb = by_subject(run(reports[1]), "isolated_cpu_tlb_rate")
    assert set(tlb) == {"cpu2"}
    assert tlb["cpu2"].value == 1.0
    assert tlb["cpu2"].detail["workload"] == "trader (pid 4242)"
    assert tlb["cpu2"].detail["processes"] == [{"pid": 4242, "comm": "trader", "threads": 2, "isolated_cpus": "2-3"}]


def grown_text(text: str, row: str, column: int, more: int) -> str:
    """/proc/interrupts text with one counter grown, the layout kept."""
    out = []
    for line in text.splitlines():
        name, colon, rest = line.partition(":")
        if colon and name.strip() == row:
            fields = rest.split()
            fields[column] = str(int(fields[column]) + more)
            line = f"{name}:" + "".join(f" {f:>10}" if f.isdigit() else f" {f}" for f in fields)
        out.append(line)
    return "\n".join(out) + "\n"


def test_the_scan_counts_do_not_make_a_stored_report_new() -> None:
    """Any process that starts or exits on the host moves them; which processes run on the isolated
    cores is what the stored body keeps."""
    from remediator.ingest import report_digest

    busier = TRADING.model_copy(update={"processes_scanned": 90, "threads_read": 40})
    moved = TRADING.model_copy(update={"processes": TRADING.processes[:1]})
    first, again, other = (report(at(n), isolated_workload=w) for n, w in enumerate((TRADING, busier, moved)))
    assert report_digest(first) == report_digest(again) != report_digest(other)
