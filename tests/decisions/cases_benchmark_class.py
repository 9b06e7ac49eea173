"""Decision scenarios for the class-level benchmark check (seed 001's own case: a whole class slow, which no
comparison within the class sees), scores taken on another clock source, and CXL hosts whose owner or
kernel made a choice the pack must leave alone. Registered in tests/decisions/cases.py's CASES.

The class's scores are the simulated fleet's Opteron figures (checker/sim/benchmark.py: 3.65 expected, the
middle of seed 001's 3.4-3.9; 1.66 with the BIOS's erratum-298 workaround). The host under judgement is
registered first, so it is the class's lowest host id: the one its class's signal and ticket go on.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from checker.schemas import BenchmarkResult, Report
from checker.sim.benchmark import CLASS_SCORE, TLB_DISABLED
from remediator.models import Remediation
from tests.decisions.cases import case, cxl_host, opteron
from tests.decisions.cases_performance import AGENT_BENCHMARK, benchmarked, with_class
from tests.decisions.harness import Expect, SnapHost
from ticketing.models import Ticket

EXPECTED = CLASS_SCORE["legacy-opteron-8356"][0]  # 3.65
SLOW_CLASS = [1.66, 1.68, 1.70, 1.73, 1.66]  # seed 001, Tabella 1: 1.660 and 1.733 for the 8356 (16,2,2) class
EXPECTING_CLASS = f"""version: 1
classes:
  x9drt-lab:
    performance:
      expected: {{{AGENT_BENCHMARK}: {EXPECTED}}}
      source: "simulated fleet (seed 001: 3.4-3.9)"
"""


@case(
    "a whole class at 1.66-1.73 where 3.65 is expected (seed 001): one ticket for the class, no outlier",
    "benchmark-class-below-expected",
)
def slow_class(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    host.baselines = EXPECTING_CLASS
    with_class(host, SLOW_CLASS)

    def one_for_the_class(session: Session, remediation: Remediation | None, ticket: Ticket | None) -> None:
        assert remediation is not None
        assert remediation.signal is not None
        detail = remediation.signal["detail"]
        assert (detail["class_median"], detail["expected"], detail["n"], detail["errata"]) == (1.67, 3.65, 6, False)
        assert remediation.signal["value"] == round(100 * (3.65 - 1.67) / 3.65, 1)  # 54 % below
        rules = session.scalars(select(Remediation.rule_id)).all()
        assert rules.count("benchmark-class-below-expected") == 1  # the peers carry no signal of their own
        assert "benchmark-outlier" not in rules  # the median moved with the class: nobody stands out

    return (
        host,
        [benchmarked(host, TLB_DISABLED)],
        Expect(
            "benchmark-class-below-expected",
            "ticket",
            title=r"x9drt-lab: median fleetfix-cpumem-v1 score 1\.67 is 54% below the expected 3\.65 \(6 hosts\)",
            part_type="hardware_class",
            part="x9drt-lab",
            never=frozenset({"benchmark-outlier"}),
            also=one_for_the_class,
        ),
    )


@case("a class at its expected score, one host 5 % under: nothing for the class", None)
def class_as_expected(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    host.baselines = EXPECTING_CLASS
    with_class(host, [3.45, 3.55, 3.62, 3.7, 3.78])
    return host, [benchmarked(host, 3.47)], Expect(None, never=frozenset({"benchmark-class-below-expected"}))


@case("a slow class with no expected score configured: nothing (no figure from outside the class)", None)
def class_without_expected(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    with_class(host, SLOW_CLASS)
    return host, [benchmarked(host, TLB_DISABLED)], Expect(None)


@case(
    "a whole Opteron rev B2 class at 1.66 on the stock kernel: the errata path, carrying the class figure",
    "errata-unpatched-kernel",
)
def slow_errata_class(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = opteron(tmp, "2.6.16.60-0.21-smp", "legacy-opteron-8356")  # the shipped baselines expect 3.65
    with_class(host, SLOW_CLASS)

    def carries_the_class(session: Session, remediation: Remediation | None, ticket: Ticket | None) -> None:
        assert remediation is not None
        assert remediation.signal is not None
        (figure,) = remediation.signal["detail"]["class_benchmark"]
        assert (figure["class_median"], figure["expected"], figure["errata"]) == (1.67, 3.65, True)

    return (
        host,
        [benchmarked(host, TLB_DISABLED)],
        Expect(
            "errata-unpatched-kernel",
            "install_kernel",
            never=frozenset({"benchmark-class-below-expected", "benchmark-outlier"}),
            also=carries_the_class,
        ),
    )


@case("a slow host whose score was divided by another clock than its class's: not compared", None)
def other_clock_source(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    with_class(host, [78.0, 79.5, 80.0, 80.5, 81.0, 82.0])  # clock_source "x"
    report = benchmarked(host, 48.0)
    bench = report.observations.benchmark
    assert isinstance(bench, BenchmarkResult)
    report.observations.benchmark = bench.model_copy(update={"clock_source": "cpuinfo cpu MHz"})
    return host, [report], Expect(None, never=frozenset({"benchmark-outlier"}))


@case("a slow host whose class ran an older method version: not compared", None)
def other_method_version(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    with_class(host, [78.0, 79.5, 80.0, 80.5, 81.0, 82.0])  # method_version 1
    report = benchmarked(host, 48.0)
    bench = report.observations.benchmark
    assert isinstance(bench, BenchmarkResult)
    report.observations.benchmark = bench.model_copy(update={"method_version": 2})
    return host, [report], Expect(None, never=frozenset({"benchmark-outlier"}))


# -- memory tiers: the owner's and the kernel's choices ---------------------------------------------------


@case(
    "a CXL host whose NUMA balancing is turned off (0): a ticket, nothing written or persisted",
    "cxl-numa-balancing-off",
)
def numa_balancing_off(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = cxl_host(tmp, demotion="true\n", weights=("5\n", "1\n"))
    host.file("/proc/sys/kernel/numa_balancing", "0\n")
    return (
        host,
        [host.cycle(0)],
        Expect(
            "cxl-numa-balancing-off",
            "ticket",
            title=r"NUMA balancing is off \(numa_balancing=0\)",
            never=frozenset({"cxl-numa-balancing-tiering"}),
            never_actions=frozenset({"set_numa_balancing"}),
        ),
    )


TIERED_CLASS = """version: 1
classes:
  x9drt-lab:
    tiering:
      interleave: {dram: 3, cxl: 1}
"""


@case("CXL weights 1:1 but the kernel sets them from bandwidth data (auto, 6.16+): nothing written", None)
def interleave_auto(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = cxl_host(tmp, demotion="true\n", weights=("1\n", "1\n"))
    host.file("/sys/kernel/mm/mempolicy/weighted_interleave/auto", "true\n")
    host.baselines = TIERED_CLASS
    never = frozenset({"cxl-interleave-mismatch", "cxl-interleave-default"})
    return host, [host.cycle(0)], Expect(None, never=never, never_actions=frozenset({"set_interleave_weights"}))


@case("CXL weights 1:1 in manual mode (auto false) where the class configures 3:1: written", "cxl-interleave-mismatch")
def interleave_manual(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = cxl_host(tmp, demotion="true\n", weights=("1\n", "1\n"))
    host.file("/sys/kernel/mm/mempolicy/weighted_interleave/auto", "false\n")
    host.baselines = TIERED_CLASS
    return host, [host.cycle(0)], Expect("cxl-interleave-mismatch", "set_interleave_weights")
