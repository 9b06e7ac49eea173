"""The simulated fleet's cputime side effect: a kernel build's table entry decides it, the stat line it prints
is one the real parser reads to the same numbers, and changing the kernel takes it away or brings it."""

from __future__ import annotations

import datetime as dt

import pytest

from checker.parsers.task_stat import parse_task_stat
from checker.sim import SimulatedFleet, VirtualHost
from checker.sim.events import valid_for
from checker.sim.hardware import (
    CPUTIME_WRAP_TICKS,
    OPTERON_PATCHED_KERNEL,
    OPTERON_WITHDRAWN_KERNEL,
    kernel_side_effects,
)

T0 = dt.datetime(2026, 6, 1, tzinfo=dt.UTC)


def opteron() -> tuple[SimulatedFleet, VirtualHost]:
    fleet = SimulatedFleet(40, seed=5, fault_fraction=0.0)
    return fleet, next(h for h in fleet.hosts if valid_for(h, "cputime_wrap"))


def test_only_the_builds_in_the_table_have_it() -> None:
    assert kernel_side_effects(OPTERON_WITHDRAWN_KERNEL) == ("cputime_wrap",)
    assert kernel_side_effects(OPTERON_PATCHED_KERNEL) == ()
    fleet, _ = opteron()
    assert not any(valid_for(h, "cputime_wrap") for h in fleet.hosts if h.hardware.intel)


def test_the_withdrawn_build_shows_a_job_with_2_31_ticks_too_many_in_the_real_format() -> None:
    fleet, host = opteron()
    clean = host.report(T0).observations.cputime
    assert clean is not None
    assert (clean.flagged, clean.complete) == (0, True)
    host.inject(fleet.fault("cputime_wrap"))
    assert host.kernel == OPTERON_WITHDRAWN_KERNEL
    found = host.report(T0 + dt.timedelta(minutes=5)).observations.cputime
    assert found is not None
    (job,) = found.processes
    stat = parse_task_stat(job.stat_line).value
    assert stat is not None
    assert (stat.pid, stat.comm, stat.num_threads) == (job.pid, "cmsRun", 1)
    assert len(job.stat_line.split()) == 42  # a 2.6.23 kernel's line: no guest time and after
    assert (stat.utime + stat.stime) / 100 == pytest.approx(job.cputime_s)
    assert found.uptime_s - stat.starttime / 100 == pytest.approx(job.elapsed_s)
    assert 0 < job.elapsed_s <= 8 * 3600  # a batch job of hours, not the host's uptime
    assert round(job.excess_s) == round(CPUTIME_WRAP_TICKS / 100)


def test_the_corrected_build_takes_it_away_and_the_withdrawn_one_brings_it_back() -> None:
    fleet, host = opteron()
    host.inject(fleet.fault("cputime_wrap"))
    host.report(T0)
    changed = host.apply("install_kernel", {"release": OPTERON_PATCHED_KERNEL})
    assert "cputime_wrap" in changed["changed"]["cleared"]
    later = T0 + dt.timedelta(hours=2)
    assert host.report(later).observations.cputime.flagged == 0  # type: ignore[union-attr]
    host.apply("install_kernel", {"release": OPTERON_WITHDRAWN_KERNEL})  # a rollout of the bad build
    assert host.report(later + dt.timedelta(hours=1)).observations.cputime.flagged == 1  # type: ignore[union-attr]
