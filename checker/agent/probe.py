"""The agent's side of the stall probe: which CPUs it probes, and its process's life.

The probe (checker/agent/stallprobe.py) runs as a child process of the agent so the agent's own
work, which holds the GIL, never reads as a stall (bench/stall_probe.py measures both). It probes
only housekeeping CPUs — the CPUs the agent may run on, less every isolated and nohz_full one, even
when the agent itself is not pinned (FLEETFIX_AGENT_CPUS=all) — and at most
FLEETFIX_AGENT_STALL_PROBE_MAX_CPUS of them, spread over the list (an SMI stalls every core, so a
few see it). It writes its results into the state directory, where the `stalls` collector reads them.

Telling an all-core stall from one CPU's takes two CPUs, and the unit's default CPUAffinity=0 leaves
the agent one. So when the agent's own CPUs hold fewer than two housekeeping ones, the probe takes
another online housekeeping CPU beyond them: its threads pin themselves (sched_setaffinity needs no
privilege within the cgroup's cpuset), sleep between wake-ups, and still never touch an isolated or
nohz_full CPU. Only when the isolated CPUs were read: an unknown list widens nothing. A host with one
housekeeping CPU is probed on it alone, and the report says so (the centre emits a gap).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

from checker.agent.config import AgentConfig
from checker.collectors.base import HostAccess
from checker.collectors.isolated_workload import read_isolated
from checker.collectors.stalls import RESULTS_NAME
from checker.parsers.common import parse_cpu_list

log = logging.getLogger(__name__)
ONLINE = "/sys/devices/system/cpu/online"


def probe_cpus(host: HostAccess, allowed: set[int], most: int) -> tuple[list[int], str | None]:
    """Up to `most` housekeeping CPUs of `allowed`, evenly spread, widened to two from the other online
    housekeeping CPUs when `allowed` holds fewer; or none and why."""
    isolated, problems = read_isolated(host)
    if problems:
        return [], f"the isolated CPUs cannot be told ({problems[0]}): the probe stays off rather than risk them"
    housekeeping = sorted(allowed - (isolated or set()))
    if 0 < len(housekeeping) < 2 <= most and isolated is not None:
        online = host.read_text(ONLINE)
        others = sorted(set(parse_cpu_list(online).value) - allowed - isolated) if online is not None else []
        housekeeping = sorted(housekeeping + others[: 2 - len(housekeeping)])
    if not housekeeping:
        return [], "every CPU the agent may use is isolated or nohz_full"
    if len(housekeeping) <= most:
        return housekeeping, None
    step = len(housekeeping) / most
    return sorted({housekeeping[int(i * step)] for i in range(most)}), None


def probe_argv(config: AgentConfig, cpus: list[int], out: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "checker.agent.stallprobe",
        "--cpus",
        ",".join(map(str, cpus)),
        "--period-ms",
        f"{config.stall_probe_period_ms:g}",
        "--threshold-ms",
        f"{config.stall_probe_threshold_ms:g}",
        "--window-s",
        f"{config.stall_probe_window_s:g}",
        "--active-share",
        f"{config.stall_probe_active_share:g}",
        "--out",
        str(out),
    ]


def start_probe(config: AgentConfig, host: HostAccess, state_dir: Path | None) -> subprocess.Popen[bytes] | None:
    """Start the probe as configured; None (and a log line saying why) when it does not run."""
    if not config.stall_probe:
        return None
    if state_dir is None:
        log.warning("checker.stall_probe.not_started", extra={"fields": {"why": "no usable state directory"}})
        return None
    cpus, why = probe_cpus(host, os.sched_getaffinity(0), config.stall_probe_max_cpus)
    if not cpus:
        log.warning("checker.stall_probe.not_started", extra={"fields": {"why": why}})
        return None
    argv = probe_argv(config, cpus, state_dir / RESULTS_NAME)
    try:
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    except OSError as error:
        log.warning("checker.stall_probe.not_started", extra={"fields": {"why": error.strerror}})
        return None
    fields: dict[str, object] = {"cpus": cpus, "pid": process.pid}
    if len(cpus) < 2:
        fields["note"] = "one housekeeping CPU: all-core stalls cannot be told from one CPU's"
    log.info("checker.stall_probe.started", extra={"fields": fields})
    return process


def stop_probe(process: subprocess.Popen[bytes] | None) -> None:
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        process.kill()
