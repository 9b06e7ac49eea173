"""The stall probe (checker/agent/stallprobe.py), the agent's choice of CPUs for it, the `stalls`
collector over its results file, and the simulated host's stalls. The results lines here are ours,
in the probe's own format 1 (what `serve` writes); one test runs the real probe for a second."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from checker.agent.config import AgentConfigError, load_agent_config
from checker.agent.probe import probe_argv, probe_cpus
from checker.agent.stallprobe import CpuWindow, coincident, next_due
from checker.agent.stallwitness import (
    Sample,
    SmiSampler,
    Witness,
    cgroup_cpu_stat,
    hypervisor_flag,
    steal_ticks,
    throttling,
)
from checker.collectors import stalls as stalls_collector
from checker.collectors.base import LiveHost
from checker.collectors.context import CollectorState
from checker.cycle import run_cycle
from checker.parsers.stalls import merge_windows, parse_stall_windows
from checker.schemas import CollectorStatus
from checker.sim.standalone import standalone_host

COLLECTORS = {"stalls": stalls_collector.collect}


def line(end: float, *, cpu0: float = 0.5, cpu2: float = 0.4, events: list[float] | None = None) -> str:
    events = events or []
    return json.dumps(
        {
            "format": 1,
            "start": end - 10,
            "end": end,
            "period_ms": 20.0,
            "threshold_ms": 5.0,
            "cpus": {
                "0": {"max_ms": cpu0, "total_ms": cpu0 if cpu0 >= 5 else 0, "count": int(cpu0 >= 5), "wakeups": 500},
                "2": {"max_ms": cpu2, "total_ms": cpu2 if cpu2 >= 5 else 0, "count": int(cpu2 >= 5), "wakeups": 500},
            },
            "coincident": [{"at": end - 5, "ms": ms} for ms in events],
            "coincident_count": len(events),
            "probe_cpu_s": 0.05,
        }
    )


def test_coincident_stalls_are_those_every_cpu_saw_at_once() -> None:
    smi = [CpuWindow(stalls=[(10.0, 10.3)]), CpuWindow(stalls=[(10.05, 10.32)]), CpuWindow(stalls=[(10.1, 10.31)])]
    [(start, length)] = coincident(smi)
    assert start == pytest.approx(10.1)
    assert length == pytest.approx(0.2)
    one_core = [CpuWindow(stalls=[(10.0, 10.3)]), CpuWindow(stalls=[(20.0, 20.01)])]
    assert coincident(one_core) == []
    assert coincident([CpuWindow(stalls=[(1.0, 2.0)])]) == []  # one CPU probed cannot tell


def test_every_thread_wakes_on_one_grid_and_sleeps_through_the_inactive_part() -> None:
    assert next_due(10.03, 0.1, 0.1, 0.1) == pytest.approx(10.1)  # continuous: the next multiple of the period
    assert next_due(10.1, 0.1, 0.1, 0.1) == pytest.approx(10.2)
    assert next_due(11.25, 0.1, 0.1, 0.1) == pytest.approx(11.3)  # after a long stall: no catching up
    # awake the first 2.5 s of every 10 s
    assert next_due(21.3, 0.1, 10.0, 2.5) == pytest.approx(21.4)
    assert next_due(22.45, 0.1, 10.0, 2.5) == pytest.approx(30.0)
    assert next_due(25.0, 0.1, 10.0, 2.5) == pytest.approx(30.0)


def test_the_active_share_is_read_merged_by_time_and_defaults_to_always() -> None:
    old = line(100.0)  # written before duty cycles: no active_share
    duty = json.dumps({**json.loads(line(130.0)), "start": 110.0, "active_share": 0.25})
    parsed = parse_stall_windows("\n".join([old, duty, json.dumps({**json.loads(line(140.0)), "active_share": 0})]))
    assert [w.active_share for w in parsed.value] == [1.0, 0.25]
    assert "active_share" in parsed.problems[0]
    merged = merge_windows(parsed.value)
    assert merged.active_share == pytest.approx((10 * 1.0 + 20 * 0.25) / 30)


def test_windows_merge_into_one_section_and_a_broken_line_is_named() -> None:
    parsed = parse_stall_windows("\n".join([line(100.0), '{"format": 1, "start": "x"}', line(110.0, cpu0=300.0)]))
    assert len(parsed.value) == 2
    assert parsed.problems
    assert parsed.problems[0].startswith("line 2:")
    merged = merge_windows(parsed.value)
    assert merged.interval_s == 20.0
    assert [(c.cpu, c.max_ms, c.count, c.wakeups) for c in merged.cpus] == [(0, 300.0, 1, 1000), (2, 0.4, 0, 1000)]
    assert merged.coincident_count == 0
    assert merged.probe_cpu_s == pytest.approx(0.1)
    assert merged.active_share == 1.0


def test_the_collector_reads_the_windows_since_its_cursor(tmp_path: Path) -> None:
    state = CollectorState(tmp_path / "cursors.json")
    results = tmp_path / stalls_collector.RESULTS_NAME
    now = time.time()
    results.write_text(line(now - 20) + "\n" + line(now - 10, events=[250.0, 180.0]) + "\n")
    first = run_cycle(LiveHost(), hostname="h", state=state, collectors=COLLECTORS)
    assert first.collectors["stalls"].status == CollectorStatus.ok
    section = first.observations.stalls
    assert section is not None
    assert section.interval_s == 10.0
    assert [s.ms for s in section.coincident] == [250.0, 180.0]
    state.commit()
    results.write_text(results.read_text() + line(now, cpu0=40.0) + "\n")
    second = run_cycle(LiveHost(), hostname="h", state=state, collectors=COLLECTORS).observations.stalls
    assert second is not None
    assert second.coincident_count == 0
    assert second.cpus[0].max_ms == 40.0
    state.commit()
    quiet = run_cycle(LiveHost(), hostname="h", state=state, collectors=COLLECTORS)
    assert quiet.observations.stalls is None  # nothing new: nothing counted twice
    assert "no probe window ended" in quiet.collectors["stalls"].problems[0]


def test_stale_or_missing_results_are_said_not_reported_as_quiet(tmp_path: Path) -> None:
    state = CollectorState(tmp_path / "cursors.json")
    missing = run_cycle(LiveHost(), hostname="h", state=state, collectors=COLLECTORS).collectors["stalls"]
    assert missing.status == CollectorStatus.unavailable
    assert "FLEETFIX_AGENT_STALL_PROBE" in (missing.reason or "")
    (tmp_path / stalls_collector.RESULTS_NAME).write_text(line(time.time() - 3600) + "\n")
    stale = run_cycle(LiveHost(), hostname="h", state=state, collectors=COLLECTORS).collectors["stalls"]
    assert stale.status == CollectorStatus.unavailable
    assert "not running" in (stale.reason or "")


class Files:
    def __init__(self, files: dict[str, str]) -> None:
        self.files = files

    def read_text(self, path: str) -> str | None:
        return self.files.get(path)


def test_the_probe_never_runs_on_isolated_or_nohz_full_cpus() -> None:
    host = Files({"/proc/cmdline": "ro isolcpus=2-5 nohz_full=6-7", "/sys/devices/system/cpu/isolated": "2-5\n"})
    assert probe_cpus(host, set(range(16)), 2) == ([0, 11], None)  # type: ignore[arg-type]
    assert probe_cpus(host, {2, 3, 6}, 2)[0] == []  # type: ignore[arg-type]
    bad = Files({"/sys/devices/system/cpu/isolated": "2-x\n"})
    cpus, why = probe_cpus(bad, {0, 1}, 2)  # type: ignore[arg-type]
    assert cpus == []
    assert why is not None
    assert "cannot be told" in why


def test_an_agent_pinned_to_one_cpu_gets_a_probe_on_two() -> None:
    """The unit's CPUAffinity=0: the probe takes another online housekeeping CPU, never an isolated one."""
    host = Files({"/proc/cmdline": "ro isolcpus=1-5", "/sys/devices/system/cpu/online": "0-15\n"})
    assert probe_cpus(host, {0}, 2) == ([0, 6], None)  # type: ignore[arg-type]
    assert probe_cpus(host, {0}, 1) == ([0], None)  # type: ignore[arg-type]  # asked for one
    unknown = Files({"/sys/devices/system/cpu/online": "0-15\n"})  # the isolated CPUs cannot be read
    assert probe_cpus(unknown, {0}, 2) == ([0], None)  # type: ignore[arg-type]  # so nothing is widened
    lone = Files({"/proc/cmdline": "ro", "/sys/devices/system/cpu/online": "0\n"})
    assert probe_cpus(lone, {0}, 2) == ([0], None)  # type: ignore[arg-type]


def test_the_witness_reads_steal_throttling_and_the_hypervisor_flag() -> None:
    stat = "cpu  10 0 5 900 1 0 0 70 0 0\ncpu0 5 0 2 450 0 0 0 30 0 0\ncpu1 5 0 3 450 1 0 0 40 0 0\nintr 1 2\n"
    assert steal_ticks(stat, [0, 1]) == 70
    assert steal_ticks(stat, [7]) is None  # not there: unknown, not zero
    assert cgroup_cpu_stat("0::/system.slice/fleetfix-agent.service\n")[0] == (
        "/sys/fs/cgroup/system.slice/fleetfix-agent.service/cpu.stat"
    )
    assert cgroup_cpu_stat("4:memory:/x\n")[0] is None  # cgroup v1 only
    assert throttling("usage_usec 9\nnr_periods 40\nnr_throttled 3\nthrottled_usec 51000\n") == (3, 51000)
    assert throttling("usage_usec 9\n") == (None, None)  # no cpu controller
    assert hypervisor_flag("processor\t: 0\nflags\t\t: fpu vme hypervisor lahf_lm\n") is True
    assert hypervisor_flag("processor\t: 0\nflags\t\t: fpu vme lahf_lm\n") is False
    assert hypervisor_flag("processor\t: 0\nFeatures\t: fp asimd\n") is None  # arm64: no flags line


def test_a_window_counts_smis_across_the_wrap_and_leaves_the_unknown_null() -> None:
    witness = Witness([0])
    seen = witness.window(Sample(100, 2, 1000, 2**32 - 2), Sample(103, 5, 61000, 3))
    assert (seen["nr_throttled"], seen["throttled_ms"], seen["smis"]) == (3, 60.0, 5)
    assert seen["steal_ms"] == pytest.approx(3 * 1000 / os.sysconf("SC_CLK_TCK"))
    blind = witness.window(Sample(None, None, None, None), Sample(None, None, None, 7))
    assert (blind["steal_ms"], blind["throttled_ms"], blind["smis"]) == (None, None, None)


def test_the_smi_counter_is_read_around_each_stall() -> None:
    sampler = SmiSampler(0)
    sampler.samples.extend([(10.0, 2**32 - 1), (11.0, 2**32 - 1), (11.42, 1), (12.4, 1)])
    assert sampler.around(11.1, 11.4) == (2, 0.42)  # the read before it and the one right after, across the wrap
    assert sampler.around(11.5, 12.0) == (0, 0.98)
    assert sampler.around(12.5, 12.6) is None  # no read after it yet


def test_each_all_core_stall_carries_what_its_window_saw() -> None:
    plain = json.loads(line(100.0, events=[250.0]))
    seen = {"steal_ms": 0.0, "throttled_ms": 40.0, "smis": 0, "load1": 8.0, "online_cpus": 4, "hypervisor": False}
    busy = {**json.loads(line(110.0, events=[180.0, 120.0])), **seen, "cpus_asked": [0, 2]}
    busy["coincident"][1].update(smis=1, smis_span_s=1.3)  # read around it: one SMI
    merged = merge_windows(parse_stall_windows(json.dumps(plain) + "\n" + json.dumps(busy)).value)
    old, new, read = merged.coincident
    assert (read.smis_around, read.smis_span_s) == (1, 1.3)
    assert (old.smis_around, old.smis_span_s, old.window_throttled_ms, old.window_load_per_cpu) == (None,) * 4
    assert (new.smis_around, new.smis_span_s) == (0, 10.0)  # no finer read: the window's count, over the window
    assert (new.window_throttled_ms, new.window_load_per_cpu) == (40.0, 2.0)
    assert (merged.hypervisor, merged.throttled_ms, merged.smis, merged.one_cpu) == (None, 40.0, None, None)
    one = {**json.loads(line(120.0)), "cpus_asked": [0, 3], "problems": ["cpu3: cannot pin (Invalid argument)"]}
    del one["cpus"]["2"]
    lonely = merge_windows(parse_stall_windows(json.dumps(one)).value)
    assert lonely.one_cpu == "asked for CPUs 0,3, probed 0: cpu3: cannot pin (Invalid argument)"


def test_settings_bound_the_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEETFIX_AGENT_STALL_PROBE_PERIOD_MS", "0")
    with pytest.raises(AgentConfigError, match="FLEETFIX_AGENT_STALL_PROBE_PERIOD_MS"):
        load_agent_config()
    monkeypatch.setenv("FLEETFIX_AGENT_STALL_PROBE_PERIOD_MS", "50")
    assert load_agent_config().stall_probe_active_share == 1.0  # always awake unless told
    monkeypatch.setenv("FLEETFIX_AGENT_STALL_PROBE_ACTIVE_SHARE", "0.01")
    with pytest.raises(AgentConfigError, match="FLEETFIX_AGENT_STALL_PROBE_ACTIVE_SHARE"):
        load_agent_config()
    monkeypatch.setenv("FLEETFIX_AGENT_STALL_PROBE_ACTIVE_SHARE", "1")
    config = load_agent_config()
    argv = probe_argv(config, [0, 1], Path("/state/stalls.jsonl"))
    assert argv[1:] == [
        "-m",
        "checker.agent.stallprobe",
        "--cpus",
        "0,1",
        "--period-ms",
        "50",
        "--threshold-ms",
        "5",
        "--window-s",
        "10",
        "--active-share",
        "1",
        "--out",
        "/state/stalls.jsonl",
    ]


def test_the_real_probe_writes_a_window(tmp_path: Path) -> None:
    out = tmp_path / "stalls.jsonl"
    argv = [sys.executable, "-m", "checker.agent.stallprobe", "--cpus", "0", "--period-ms", "10"]
    probe = subprocess.Popen([*argv, "--window-s", "1", "--out", str(out)])
    try:
        deadline = time.monotonic() + 10
        while not out.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        probe.terminate()
        probe.wait(timeout=5)
    [window] = parse_stall_windows(out.read_text()).value[:1]
    assert 50 <= window.cpus[0]["wakeups"] <= 101
    assert window.probe_cpu_s is not None
    assert window.probe_cpu_s < 0.2
    assert window.active_share == 1.0
    assert window.cpus_asked == (0,)
    assert window.smis is None  # no msr access here


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_a_probe_started_on_one_cpu_still_probes_two(tmp_path: Path) -> None:
    """The agent under CPUAffinity=0 starts the probe with its own one-CPU affinity: the threads pin wider."""
    out = tmp_path / "stalls.jsonl"
    first, second = sorted(os.sched_getaffinity(0))[:2]
    argv = [sys.executable, "-m", "checker.agent.stallprobe", "--cpus", f"{first},{second}", "--period-ms", "10"]
    probe = subprocess.Popen(
        [*argv, "--window-s", "1", "--out", str(out)], preexec_fn=lambda: os.sched_setaffinity(0, {first})
    )
    try:
        deadline = time.monotonic() + 10
        while not out.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        probe.terminate()
        probe.wait(timeout=5)
    [window] = parse_stall_windows(out.read_text()).value[:1]
    assert sorted(window.cpus) == [first, second]
    assert window.problems == ()


def test_a_duty_cycled_probe_sleeps_through_the_rest_of_each_window(tmp_path: Path) -> None:
    out = tmp_path / "stalls.jsonl"
    argv = [sys.executable, "-m", "checker.agent.stallprobe", "--cpus", "0", "--period-ms", "10"]
    probe = subprocess.Popen([*argv, "--window-s", "1", "--active-share", "0.3", "--out", str(out)])
    try:
        deadline = time.monotonic() + 10
        while (
            len(parse_stall_windows(out.read_text()).value if out.exists() else []) < 2 and time.monotonic() < deadline
        ):
            time.sleep(0.1)
    finally:
        probe.terminate()
        probe.wait(timeout=5)
    window = parse_stall_windows(out.read_text()).value[1]  # the first began mid-cycle
    assert window.active_share == 0.3
    assert 15 <= window.cpus[0]["wakeups"] <= 45  # about 30 of a continuous probe's 100


def test_the_simulated_host_shows_all_core_stalls_only_with_the_fault() -> None:
    start = dt.datetime(2026, 11, 27, tzinfo=dt.UTC)
    quiet = standalone_host("sim-q", hardware_class="", faults=[], seed=1)
    smi = standalone_host("sim-s", hardware_class="", faults=["smi_stalls"], seed=1)
    seen = {"quiet": 0, "smi": 0}
    lengths = []
    for minute in range(30):
        at = start + dt.timedelta(minutes=minute)
        for name, host in (("quiet", quiet), ("smi", smi)):
            section = host.report(at, interval_s=60).observations.stalls
            assert section is not None
            assert len(section.cpus) == 2
            seen[name] += sum(1 for s in section.coincident if s.ms >= 100)
            lengths += [s.ms for s in section.coincident] if name == "smi" else []
            assert section.period_ms == 100.0  # the agent's default, and the cost it measured
            assert section.probe_cpu_s == pytest.approx(60 * 0.001)
    assert seen["quiet"] == 0
    assert seen["smi"] >= 5
    assert min(lengths) >= 50.0  # 150-400 ms SMIs, measured from a wake-up up to one period into them
