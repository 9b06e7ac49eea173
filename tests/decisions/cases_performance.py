"""Decision scenarios for performance outliers within a hardware class (seed 001) and CXL memory tiers set
up as TPP needs them (seed 003), registered in tests/decisions/cases.py's CASES.

The host under judgement is read from real tool output as every scenario's is; its benchmark section is
the agent's (checker/agent/benchmark.py), added to the report the cycle built, as the agent adds it. The
rest of its class are registered hosts whose agents' reports (a score and nothing else) went through
the same ingest first.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from sqlalchemy.orm import Session

from checker.schemas import BenchmarkResult, HostIdentity, Observations, Report
from cyborg.actions import ACTIONS as CYBORG_ACTIONS
from cyborg.central import resolve_params
from remediator import benchmarks
from remediator.ingest import ingest
from remediator.inventory import HostInventory, apply_inventory
from remediator.models import Remediation
from tests.decisions.cases import case, cxl_host, opteron
from tests.decisions.harness import RULES, T0, Expect, SnapHost
from ticketing.models import Ticket

AGENT_BENCHMARK = "fleetfix-cpumem-v1"
CLASS = [78.0, 79.5, 80.0, 80.5, 81.0, 82.0]  # the rest of the class: a healthy spread of ~2.5 %


def scored(name: str, score: float, at: dt.datetime) -> BenchmarkResult:
    return BenchmarkResult(name=name, score=score, duration_s=0.1, cpu=0, ghz=2.0, clock_source="x", ran_at=at)


def with_class(
    host: SnapHost, scores: list[float], *, name: str = AGENT_BENCHMARK, hardware_class: str | None = None
) -> None:
    """Register the rest of the host's class and ingest each one's report with its score, before the host's."""

    def peers(session: Session) -> None:
        benchmarks.clear_cache()  # another scenario's class may still be cached
        cls = hardware_class or host.hardware_class
        rows = [
            HostInventory(hostname=f"{host.hostname}-peer{i}", hardware_class=cls, datacenter="ams1", rack="r08")
            for i in range(len(scores))
        ]
        apply_inventory(session, rows, actor="test")
        at = T0 - dt.timedelta(minutes=30)
        reports = [
            Report(
                host=HostIdentity(hostname=row.hostname, boot_id="peer-boot"),
                captured_at=at,
                observations=Observations(benchmark=scored(name, score, at)),
            )
            for row, score in zip(rows, scores, strict=True)
        ]
        result = ingest(session, reports, ruleset=RULES)
        assert not result.refused, result.refused

    host.setup.append(peers)


def benchmarked(host: SnapHost, score: float, *, name: str = AGENT_BENCHMARK) -> Report:
    report = host.cycle(0)
    report.observations.benchmark = scored(name, score, report.captured_at)
    return report


@case("a host at 60 % of its class's benchmark median: a ticket with the class's distribution", "benchmark-outlier")
def slow_host(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    with_class(host, CLASS)

    def class_on_ticket(session: Session, remediation: Remediation | None, ticket: Ticket | None) -> None:
        assert remediation is not None
        assert remediation.signal is not None
        detail = remediation.signal["detail"]
        assert (detail["n"], detail["class_median"], detail["mad"], detail["errata"]) == (7, 80.0, 1.0, False)
        assert (detail["sample"][0], detail["quantiles"]["max"]) == (48.0, 82.0)
        # 0.6745 * (80 - 48) / 1.6: the MAD (1.0) is below its floor, 2 % of the median
        assert remediation.signal["value"] == 13.49

    return (
        host,
        [benchmarked(host, 48.0)],
        Expect(
            "benchmark-outlier",
            "ticket",
            title=r"fleetfix-cpumem-v1 score 48\.0 is 13\.5 robust deviations below its class median 80\.0",
            part_type="host",
            also=class_on_ticket,
        ),
    )


@case("a slow host in a class of three scored hosts: no judgement", None)
def small_class(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    with_class(host, CLASS[:3])
    return host, [benchmarked(host, 48.0)], Expect(None, never=frozenset({"benchmark-outlier"}))


@case("a host 2 % under its class's median: within the class, nothing", None)
def within_class(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    with_class(host, CLASS)
    return host, [benchmarked(host, 78.5)], Expect(None, never=frozenset({"benchmark-outlier"}))


@case("a slow host whose class scored another benchmark: scores of different names never compared", None)
def other_benchmark(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    with_class(host, CLASS, name="HEP-SPEC06")
    return host, [benchmarked(host, 48.0)], Expect(None, never=frozenset({"benchmark-outlier"}))


@case(
    "an Opteron rev B2 on the stock kernel at 1.66 per core per GHz (seed 001): the errata path, not the outlier's",
    "errata-unpatched-kernel",
)
def errata_outlier(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = opteron(tmp, "2.6.16.60-0.21-smp", "legacy-opteron-8356")
    with_class(host, [3.45, 3.55, 3.62, 3.7, 3.78, 3.9])  # seed 001: 3.4-3.9 on the comparable hosts

    def carries_the_score(session: Session, remediation: Remediation | None, ticket: Ticket | None) -> None:
        assert remediation is not None
        assert remediation.signal is not None
        (slow,) = remediation.signal["detail"]["benchmark"]
        assert (slow["name"], slow["score"], slow["n"]) == (AGENT_BENCHMARK, 1.66, 7)

    return (
        host,
        [benchmarked(host, 1.66)],
        Expect(
            "errata-unpatched-kernel",
            "install_kernel",
            never=frozenset({"benchmark-outlier"}),
            also=carries_the_score,
        ),
    )


# -- memory tiers ---------------------------------------------------------------------------------


@case("a CXL host whose NUMA balancing lacks the tiering mode: the bit added (1 -> 3)", "cxl-numa-balancing-tiering")
def numa_balancing_normal(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = cxl_host(tmp, demotion="true\n", weights=("5\n", "1\n"))
    host.file("/proc/sys/kernel/numa_balancing", "1\n")

    def says_what(session: Session, remediation: Remediation | None, ticket: Ticket | None) -> None:
        assert remediation is not None
        assert remediation.signal is not None
        detail = remediation.signal["detail"]
        assert (detail["current"], detail["wanted"], detail["supported"]) == (1, 3, True)
        assert detail["kernel"] == "6.1.0-28-amd64"

    return host, [host.cycle(0)], Expect("cxl-numa-balancing-tiering", "set_numa_balancing", also=says_what)


@case("a CXL host with numa_balancing=2 already: nothing", None)
def numa_balancing_tiering(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = cxl_host(tmp, demotion="true\n", weights=("5\n", "1\n"))  # numa_balancing 2, as cxl_host writes it
    return host, [host.cycle(0)], Expect(None)


@case("NUMA balancing off on a host with no CPU-less node: nothing (no slow tier to promote from)", None)
def numa_balancing_no_cxl(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = cxl_host(tmp, demotion="true\n", weights=("5\n", "1\n"))
    host.file("/sys/devices/system/node/node1/cpulist", "4-7\n")  # both nodes have CPUs: plain NUMA
    host.file("/proc/sys/kernel/numa_balancing", "0\n")
    return host, [host.cycle(0)], Expect(None)


@case(
    "a CXL host on a 5.15 kernel without the tiering mode: a ticket, nothing written", "cxl-numa-balancing-unsupported"
)
def numa_balancing_old_kernel(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = cxl_host(tmp, demotion="true\n", weights=("5\n", "1\n"))
    host.file("/proc/sys/kernel/osrelease", "5.15.0-91-generic\n")
    host.file("/proc/sys/kernel/numa_balancing", "1\n")
    return (
        host,
        [host.cycle(0)],
        Expect(
            "cxl-numa-balancing-unsupported",
            "ticket",
            title=r"kernel 5\.15\.0-91-generic cannot promote hot pages",
            never_actions=frozenset({"set_numa_balancing"}),
        ),
    )


TIERED_CLASS = """version: 1
classes:
  x9drt-lab:
    tiering:
      interleave: {dram: 3, cxl: 1}
"""


@case("CXL weights 1:1 where the class configures 3:1: the configured weights written", "cxl-interleave-mismatch")
def interleave_mismatch(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = cxl_host(tmp, demotion="true\n", weights=("1\n", "1\n"))
    host.baselines = TIERED_CLASS

    def configured(session: Session, remediation: Remediation | None, ticket: Ticket | None) -> None:
        assert remediation is not None
        assert remediation.signal is not None
        action = CYBORG_ACTIONS["set_interleave_weights"]
        params = resolve_params(action, {}, {"signal": remediation.signal})
        assert params == {"weights": {"0": 3, "1": 1}}  # the class's, not a constant

    return (
        host,
        [host.cycle(0)],
        Expect(
            "cxl-interleave-mismatch",
            "set_interleave_weights",
            never=frozenset({"cxl-interleave-default"}),
            also=configured,
        ),
    )


@case("CXL weights 5:1 where the class configures 3:1: rewritten to the class's", "cxl-interleave-mismatch")
def interleave_other_ratio(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = cxl_host(tmp, demotion="true\n", weights=("5\n", "1\n"))
    host.baselines = TIERED_CLASS
    return host, [host.cycle(0)], Expect("cxl-interleave-mismatch", "set_interleave_weights")


@case("CXL weights as the class configures them: nothing", None)
def interleave_as_configured(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = cxl_host(tmp, demotion="true\n", weights=("3\n", "1\n"))
    host.baselines = TIERED_CLASS
    return host, [host.cycle(0)], Expect(None)
