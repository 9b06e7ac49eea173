"""The heat scenarios (rules cpu-package-throttling, sensor-critical-temperature-nr), registered into
tests/decisions/cases.py's CASES.

The host's thermal_throttle tree is the corpus's real sysfs session (tests/checker/throttle_tree.py)
with the counters moving between cycles as the kernel's would (therm_throt.c): the count when a
throttling episode starts, the time (Linux 5.5's `package_throttle_total_time_ms`) when it ends; short
episodes every minute, or one long one; power-limit notifications (no heat). The sensor scenarios are
the corpus's real `ipmitool sensor list` listings."""

from __future__ import annotations

from pathlib import Path

from bench.samples import sample
from checker.schemas import Report
from tests.checker.throttle_tree import install
from tests.decisions.cases import case
from tests.decisions.harness import Expect, SnapHost

MINUTES = range(13)  # a report a minute: the ten-minute window fills


def throttled(
    tmp: Path, *, ms_per_minute: int, events_per_minute: int, power_per_minute: int = 0
) -> tuple[SnapHost, list[Report]]:
    host = SnapHost(tmp)
    reports = []
    for minute in MINUTES:
        install(
            host.snap,
            packages=2,
            package_throttle_count=100 + events_per_minute * minute,
            package_throttle_total_time_ms=5000 + ms_per_minute * minute,
            package_power_limit_count=8 + power_per_minute * minute,
        )
        reports.append(host.cycle(minute))
    return host, reports


@case(
    "a CPU package throttled for heat a fifth of the time for ten minutes: an airflow check", "cpu-package-throttling"
)
def hot_package(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host, reports = throttled(tmp, ms_per_minute=12000, events_per_minute=3)
    return (
        host,
        reports,
        Expect(
            "cpu-package-throttling",
            "ticket",
            title=r"Airflow check at dt-host-01: CPU package \d throttled for heat \d+% of ten minutes",
            part_type="airflow",
            part="host",  # one airflow ticket per host, whichever package or sensor showed it
            never_actions=frozenset({"drain", "reboot", "power_cycle"}),
        ),
    )


@case("a CPU package at its power limit, never throttled for heat: nothing", None)
def power_limited(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host, reports = throttled(tmp, ms_per_minute=0, events_per_minute=0, power_per_minute=20)
    return host, reports, Expect(None)


@case("a CPU package throttled for heat 1% of the time: below the rule's 5%, nothing", None)
def warm_package(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host, reports = throttled(tmp, ms_per_minute=600, events_per_minute=1)
    return host, reports, Expect(None)


@case(
    "a CPU package held at its limit for an hour, one throttling episode timed when it ends: an airflow check",
    "cpu-package-throttling",
)
def one_long_episode(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    """The kernel counts the episode when it starts and times it when it ends: an hour with neither counter
    moving, then one report with an hour more. Before, `for: 10m` on a per-report share never fired."""
    host = SnapHost(tmp)
    reports = []
    for minute in (0, 10, 20, 30, 40, 50, 60, 61, 62):
        ended = minute >= 61
        install(
            host.snap,
            packages=2,
            package_throttle_count=100 if minute == 0 else 101,
            package_throttle_total_time_ms=5000 + (3_600_000 if ended else 0),
            package_power_limit_count=8,
        )
        reports.append(host.cycle(minute))
    expect = Expect(
        "cpu-package-throttling",
        "ticket",
        title=r"Airflow check at dt-host-01: CPU package \d throttled for heat 100% of ten minutes",
        part_type="airflow",
    )
    return host, reports, expect


NR_LOWERED = "thermal/ipmitool-sensor-list-supermicro-dual-socket-cpu2-temp-nr-lowered-thresholds.txt"


@case(
    "a CPU temperature past its non-recoverable threshold (the real nr listing): drain, ticket with the thresholds",
    "sensor-critical-temperature-nr",
)
def past_non_recoverable(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    """Before: the one airflow rule matched cr and nr alike and left the host in service."""
    host = SnapHost(tmp)
    host.sensors(sample(NR_LOWERED))
    expect = Expect(
        "sensor-critical-temperature-nr",
        "drain",
        # the listing's limits were lowered to 30 by hand: the title shows them
        title=r"Overheating at dt-host-01: CPU2 Temp at 33 past its non-recoverable threshold "
        r"\(lnr 10, lcr 10, ucr 30, unr 30\)",
        part_type="airflow",
        part="host",
        never=frozenset({"sensor-critical-temperature"}),
    )
    return host, [host.cycle(0)], expect


@case("an inlet sensor past its LOWER critical threshold (cold, or a sensor reading 0): no airflow ticket", None)
def cold_inlet(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    host.sensors(
        "Inlet Temp       | 0.000      | degrees C  | cr    | -5.000    | 0.000     | 5.000     "
        "| 40.000    | 45.000    | 50.000    \n"
    )
    return host, [host.cycle(0)], Expect(None)
