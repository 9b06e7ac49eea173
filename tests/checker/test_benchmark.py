"""The agent's benchmark: a bounded run on one housekeeping CPU, scored per core per GHz by the nominal clock,
once a day in its window; its report section, and the agent setting that schedules it."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pytest

from checker.agent import benchmark
from checker.agent.benchmark import BenchmarkSchedule, WindowError, nominal_ghz, parse_window, run_benchmark
from checker.agent.config import AgentConfig
from checker.schemas import CollectorStatus, Report

NOW = dt.datetime(2026, 11, 27, 2, 30, tzinfo=dt.UTC)


class Files:
    """A host that is only files (what the benchmark reads: cpuinfo, cpufreq, the isolated CPUs)."""

    def __init__(self, files: dict[str, str]) -> None:
        self.files = files

    def read_text(self, path: str) -> str | None:
        return self.files.get(path)


HOUSEKEEPING = {"/proc/cmdline": "BOOT_IMAGE=/vmlinuz ro quiet\n", "/sys/devices/system/cpu/isolated": "\n"}
XEON = "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Gold 6138 CPU @ 2.00GHz\ncpu MHz\t\t: 3700.000\n"
OPTERON = "processor\t: 0\nmodel name\t: Quad-Core AMD Opteron(tm) Processor 8356\ncpu MHz\t\t: 2300.000\n"


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({"/sys/devices/system/cpu/cpu3/cpufreq/base_frequency": "2100000\n", "/proc/cpuinfo": XEON}, (2.1, "base")),
        ({"/proc/cpuinfo": XEON}, (2.0, "model name")),  # nominal, not the 3.7 GHz turbo it runs at now
        (
            {"/sys/devices/system/cpu/cpu3/cpufreq/cpuinfo_max_freq": "2300000\n", "/proc/cpuinfo": OPTERON},
            (2.3, "cpuinfo_max_freq"),
        ),
        ({"/proc/cpuinfo": OPTERON}, (2.3, "cpu MHz")),  # no cpufreq (a 2.6.16 kernel): the clock it runs at
        ({}, (None, None)),
    ],
)
def test_nominal_clock_and_where_it_was_read(files: dict[str, str], expected: tuple[float | None, str | None]) -> None:
    ghz, source = nominal_ghz(Files(files), 3)  # type: ignore[arg-type]
    assert ghz == expected[0]
    assert (source is None) if expected[1] is None else (expected[1] in (source or ""))


def test_a_run_is_short_pinned_to_a_housekeeping_cpu_and_put_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(benchmark, "WALK_BYTES", 4 << 20)  # the same work, smaller: a test, not a measurement
    before = os.sched_getaffinity(0)
    result, run = run_benchmark(Files({**HOUSEKEEPING, "/proc/cpuinfo": XEON}), NOW)  # type: ignore[arg-type]
    assert run.status == CollectorStatus.ok
    assert result is not None
    assert result.name == "fleetfix-cpumem-v1"
    assert result.cpu == max(before)
    assert (result.ghz, result.clock_source) == (2.0, "cpuinfo model name")
    assert result.score > 0
    assert set(result.parts) == {"hash_mib_s", "walk_mpages_s"}
    assert os.sched_getaffinity(0) == before  # the thread's own CPUs back as they were
    report = Report.model_validate({"host": {"hostname": "h1"}, "captured_at": NOW.isoformat()})
    report.observations.benchmark = result
    assert Report.model_validate_json(report.model_dump_json()).observations.benchmark == result


def test_never_on_an_isolated_cpu() -> None:
    every = ",".join(str(cpu) for cpu in sorted(os.sched_getaffinity(0)))
    isolated = {"/proc/cmdline": f"ro isolcpus={every}\n", "/proc/cpuinfo": XEON}
    result, run = run_benchmark(Files(isolated), NOW)  # type: ignore[arg-type]
    assert result is None
    assert run.status == CollectorStatus.unavailable
    assert "isolated or nohz_full: not run" in (run.reason or "")
    result, run = run_benchmark(Files({"/proc/cpuinfo": XEON}), NOW)  # type: ignore[arg-type]
    assert result is None
    assert "cannot be read" in (run.reason or "")


def test_window_parsing_and_the_agent_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse_window("01:00-05:00") == (60, 300)
    assert parse_window("") is None
    for bad in ("1-5", "05:00-01:00", "25:00-26:00"):
        with pytest.raises(WindowError):
            parse_window(bad)
    assert AgentConfig(benchmark_window=" 02:00-03:30 ").benchmark_window == "02:00-03:30"
    with pytest.raises(ValueError, match="HH:MM-HH:MM"):
        AgentConfig(benchmark_window="nightly")


def test_once_a_day_at_the_hosts_minute_of_the_window(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state = tmp_path / "benchmark.json"
    schedule = BenchmarkSchedule((60, 300), "web-001", state)
    minute = schedule.minute
    assert minute is not None
    assert 60 <= minute < 300
    assert minute == BenchmarkSchedule((60, 300), "web-001").minute  # fixed per host
    day = dt.datetime(2026, 11, 27, tzinfo=dt.UTC).astimezone().replace(hour=0, minute=0)
    assert not schedule.due(day + dt.timedelta(minutes=minute - 1))
    assert schedule.due(day + dt.timedelta(minutes=minute))
    assert not schedule.due(day + dt.timedelta(minutes=300))  # the window is over
    runs = []
    monkeypatch.setattr(benchmark, "run_benchmark", lambda host, now: runs.append(now) or (None, None))
    at = (day + dt.timedelta(minutes=minute)).astimezone(dt.UTC)
    assert schedule.maybe_run(Files({}), at) is not None  # type: ignore[arg-type]
    assert schedule.maybe_run(Files({}), at + dt.timedelta(minutes=5)) is None  # once that day
    assert BenchmarkSchedule((60, 300), "web-001", state).last_day == day.date().isoformat()  # kept across restarts
    assert not BenchmarkSchedule(None, "web-001").due(day + dt.timedelta(minutes=minute))  # window "": never
    assert len(runs) == 1


def test_the_agents_cycle_carries_the_run_once_a_day(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from bench.samples import rich_snapshot
    from checker.agent.worker import CheckLoop
    from core.queue import create_celery

    monkeypatch.setattr(benchmark, "WALK_BYTES", 4 << 20)
    snap = rich_snapshot(tmp_path / "snap")
    config = AgentConfig(state_dir=tmp_path / "state", benchmark_window="00:00-24:00")
    loop = CheckLoop(
        create_celery("redis://127.0.0.1:1/0", make_current=False), "bench-1", 60, config, host=snap.host()
    )
    monkeypatch.setattr(BenchmarkSchedule, "minute", property(lambda self: 0))  # due from midnight
    try:
        first = loop.build()
        assert first is not None
        assert first.observations.benchmark is not None
        assert first.observations.benchmark.name == "fleetfix-cpumem-v1"
        assert first.collectors["benchmark"].status == CollectorStatus.ok
        second = loop.build()
        assert second is not None
        assert second.observations.benchmark is None  # once a day
        assert "benchmark" not in second.collectors
        assert (tmp_path / "state" / "benchmark.json").exists()
    finally:
        loop.stop()


class Changing(Files):
    """A host whose /proc/stat moves between reads (the agent samples it twice)."""

    def __init__(self, files: dict[str, str], stats: list[str]) -> None:
        super().__init__(files)
        self.stats = stats

    def read_text(self, path: str) -> str | None:
        if path == "/proc/stat" and self.stats:
            return self.stats.pop(0) if len(self.stats) > 1 else self.stats[0]
        return super().read_text(path)


def stat(cpu: int, user: int, idle: int, steal: int = 0) -> str:
    return f"cpu  1 2 3 4 5 6 7 8 0 0\ncpu{cpu} {user} 0 0 {idle} 0 0 0 {steal} 0 0\n"


def test_a_busy_host_is_skipped_with_what_was_seen_and_tried_again_later_in_the_window(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(benchmark, "SAMPLE_S", 0.0)
    monkeypatch.setattr(benchmark, "WALK_BYTES", 4 << 20)
    cpu = max(os.sched_getaffinity(0))
    cpus = os.cpu_count() or 1
    busy_load = {**HOUSEKEEPING, "/proc/cpuinfo": XEON, "/proc/loadavg": f"{cpus * 0.9:.2f} 1.0 1.0 3/400 99\n"}
    schedule = BenchmarkSchedule((0, 24 * 60), "web-001", tmp_path / "benchmark.json")
    monkeypatch.setattr(BenchmarkSchedule, "minute", property(lambda self: 0))
    at = dt.datetime(2026, 11, 27, 12, 0, tzinfo=dt.UTC)
    outcome = schedule.maybe_run(Files(busy_load), at)  # type: ignore[arg-type]
    assert outcome is not None
    result, run = outcome
    assert result is None
    assert run.status == CollectorStatus.unavailable
    assert "host busy" in (run.reason or "")
    assert "load_per_cpu" in (run.reason or "")
    assert schedule.last_day is None  # the day is still open
    assert schedule.maybe_run(Files(busy_load), at + dt.timedelta(minutes=5)) is None  # not every cycle
    # the chosen CPU itself 60 % busy over the sample (load average fine): skipped as well
    busy_cpu = Changing(
        {**busy_load, "/proc/loadavg": "0.01 0.01 0.01 1/400 99\n"}, [stat(cpu, 0, 0), stat(cpu, 60, 40)]
    )
    outcome = schedule.maybe_run(busy_cpu, at + dt.timedelta(minutes=16))  # type: ignore[arg-type]
    assert outcome is not None
    assert "cpu_busy_pct 60.0 > 20.0" in (outcome[1].reason or "")
    # quiet now: it runs, and the score carries what the host looked like
    quiet = Changing(
        {**busy_load, "/proc/loadavg": "0.01 0.01 0.01 1/400 99\n"},
        [stat(cpu, 0, 0), stat(cpu, 1, 99), stat(cpu, 1, 99), stat(cpu, 101, 99, steal=1)],
    )
    outcome = schedule.maybe_run(quiet, at + dt.timedelta(minutes=32))  # type: ignore[arg-type]
    assert outcome is not None
    result, run = outcome
    assert run.status == CollectorStatus.ok
    assert result is not None
    assert result.conditions == {
        "loadavg_1m": 0.01,
        "load_per_cpu": round(0.01 / cpus, 3),
        "cpu_busy_pct": 1.0,
        "steal_pct": 0.0,
        "steal_pct_run": 1.0,
    }
    assert schedule.last_day == at.astimezone().date().isoformat()


def test_a_stealing_hypervisor_is_busy_too() -> None:
    host = Changing({}, [stat(2, 0, 0), stat(2, 0, 90, steal=10)])
    with pytest.raises(benchmark.HostBusy, match=r"steal_pct 10\.0 > 5\.0") as busy:
        benchmark.load_seen(host, 2)  # type: ignore[arg-type]
    assert busy.value.seen["steal_pct"] == 10.0
    # nothing readable: measured, and nothing claimed
    assert benchmark.load_seen(Files({}), 2) == {}  # type: ignore[arg-type]
