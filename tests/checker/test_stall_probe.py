"""The stall probe (checker/agent/stallprobe.py), the agent's choice of CPUs for it, the `stalls`
collector over its results file, and the simulated host's stalls. The results lines here are ours,
in the probe's own format 1 (what `serve` writes); one test runs the real probe for a second."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from checker.agent.config import AgentConfigError, load_agent_config
from checker.agent.probe import probe_argv, probe_cpus
from checker.agent.stallprobe import CpuWindow, coincident
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


def test_settings_bound_the_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEETFIX_AGENT_STALL_PROBE_PERIOD_MS", "0")
    with pytest.raises(AgentConfigError, match="FLEETFIX_AGENT_STALL_PROBE_PERIOD_MS"):
        load_agent_config()
    monkeypatch.setenv("FLEETFIX_AGENT_STALL_PROBE_PERIOD_MS", "50")
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


def test_the_simulated_host_shows_all_core_stalls_only_with_the_fault() -> None:
    start = dt.datetime(2026, 11, 27, tzinfo=dt.UTC)
    quiet = standalone_host("sim-q", hardware_class="", faults=[], seed=1)
    smi = standalone_host("sim-s", hardware_class="", faults=["smi_stalls"], seed=1)
    seen = {"quiet": 0, "smi": 0}
    for minute in range(30):
        at = start + dt.timedelta(minutes=minute)
        for name, host in (("quiet", quiet), ("smi", smi)):
            section = host.report(at, interval_s=60).observations.stalls
            assert section is not None
            assert len(section.cpus) == 2
            seen[name] += sum(1 for s in section.coincident if s.ms >= 100)
    assert seen["quiet"] == 0
    assert seen["smi"] >= 5
