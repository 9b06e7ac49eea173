"""Where a load test runs and how much of the memory it covers.

The agent's unit confines it (deploy/fleetfix-agent.service: CPUAffinity=, CPUQuota=50%, MemoryMax=512M),
and a child shares its cgroup: stressapptest there tests a few hundred MB at half a CPU, which says
nothing about a repaired DIMM. So the test runs in a transient scope of its own (`systemd-run --scope`),
with explicit limits: the housekeeping CPUs (AllowedCPUs=; never an isolated or nohz_full one) and the
planned memory plus a margin (MemoryMax=, no swap: a page swapped out is not tested in its DIMM). The
agent asks the system manager for the scope; as the unprivileged `fleetfix` user it needs the polkit
rule in deploy/fleetfix-memtest.rules (docs/agent.md). Where systemd-run is missing or refused, the test
runs in the agent's cgroup, bounded so it is not killed half-way, and says so: a memory cap or a CPU
quota there, or a coverage below `min_coverage_percent` of MemAvailable, makes the verdict a gap,
never a pass.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from checker.agent.probe import probe_cpus
from checker.parsers.common import parse_cpu_list
from cyborg.actions import VerifyMemoryUnderLoadParams
from cyborg.commands import ActionContext, ActionFailed

if TYPE_CHECKING:
    from cyborg.drivers.linux import LinuxDriver

SYSTEMD_RUN = "systemd-run"
TASKSET = "taskset"
UNIT_PREFIX = "fleetfix-memtest-"
MEMINFO = "/proc/meminfo"
ONLINE = "/sys/devices/system/cpu/online"
SELF_CGROUP = "/proc/self/cgroup"
CGROUP_ROOT = "/sys/fs/cgroup"
SCOPE_MARGIN_MB = 256
"""Beyond the memory tested (-M): the stall probe (a Python process, 14.5 MB peak RSS) and stressapptest's own
threads and buffers (69 MB peak RSS at -M 64), measured with `/usr/bin/time -f %M` and getrusage on the
development machine (2 CPUs); the rest is room for per-thread stacks on hosts with many CPUs."""
SCOPE_CHECK_TIMEOUT_S = 30


@dataclass
class Placement:
    """How the run is placed: the argv before the stall probe's, the memory it tests, and what bounded it."""

    prefix: list[str]
    megabytes: int
    available_mb: int
    total_mb: int | None
    scope: str | None
    housekeeping: list[int]
    gaps: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def coverage(self, params: VerifyMemoryUnderLoadParams) -> dict[str, object]:
        share = round(100 * self.megabytes / self.available_mb, 1) if self.available_mb else 0.0
        return {
            "tested_mb": self.megabytes,
            "available_mb": self.available_mb,
            "total_mb": self.total_mb,
            "percent_of_available": share,
            "min_percent": params.min_coverage_percent,
            "scope": self.scope,
            "cpus": self.housekeeping,
            "notes": self.notes,
        }


def meminfo_mb(driver: LinuxDriver) -> tuple[int, int | None]:
    """MemAvailable and MemTotal in MB."""
    found: dict[str, int] = {}
    for line in (driver.system.read_text(MEMINFO) or "").splitlines():
        name, _, rest = line.partition(":")
        if name in ("MemAvailable", "MemTotal") and rest.split() and rest.split()[0].isdigit():
            found[name] = int(rest.split()[0]) // 1024
    if "MemAvailable" not in found:
        raise ActionFailed(f"precondition: no MemAvailable in {MEMINFO}: cannot bound the memory stressapptest takes")
    return found["MemAvailable"], found.get("MemTotal")


def housekeeping_cpus(driver: LinuxDriver) -> list[int]:
    """Every online CPU that is neither isolated nor nohz_full: where the load may run."""
    online = set(parse_cpu_list(driver.system.read_text(ONLINE) or "").value)
    cpus, why = probe_cpus(driver.system, online, len(online) or 1)  # type: ignore[arg-type]  # reads files only
    if not cpus:
        raise ActionFailed(f"precondition: no housekeeping CPU to run the load test on: {why}")
    return cpus


def cpu_list(cpus: list[int]) -> str:
    """0-3,8 for [0, 1, 2, 3, 8]."""
    ranges: list[str] = []
    for cpu in cpus:
        if ranges and "-" in ranges[-1] and int(ranges[-1].split("-")[1]) == cpu - 1:
            ranges[-1] = f"{ranges[-1].split('-')[0]}-{cpu}"
        elif ranges and "-" not in ranges[-1] and int(ranges[-1]) == cpu - 1:
            ranges[-1] = f"{ranges[-1]}-{cpu}"
        else:
            ranges.append(str(cpu))
    return ",".join(ranges)


def scope_argv(unit: str, megabytes: int, cpus: list[int]) -> list[str]:
    return [
        SYSTEMD_RUN,
        "--scope",
        "--quiet",
        "--collect",
        f"--unit={unit}",
        "-p",
        f"MemoryMax={megabytes + SCOPE_MARGIN_MB}M",
        "-p",
        "MemorySwapMax=0",
        "-p",
        f"AllowedCPUs={cpu_list(cpus)}",
        "--",
    ]


def place(driver: LinuxDriver, params: VerifyMemoryUnderLoadParams, ctx: ActionContext) -> Placement:
    """A scope when systemd-run exists and the system manager grants one (checked with `true` in the same
    scope, so a refusal is told apart from the test's own failure); else the agent's cgroup, bounded."""
    available, total = meminfo_mb(driver)
    wanted = available * params.memory_percent // 100
    megabytes = min(wanted, params.max_memory_mb or wanted)
    cpus = housekeeping_cpus(driver)
    widen = [TASKSET, "-c", cpu_list(cpus)] if ctx.system.which(TASKSET) else []  # the unit's CPUAffinity= is inherited
    why = f"{SYSTEMD_RUN} is not installed"
    if ctx.system.which(SYSTEMD_RUN) is not None:
        unit = f"{UNIT_PREFIX}{uuid.uuid4().hex[:12]}"
        check = ctx.run(
            [*scope_argv(f"{unit}-check", megabytes, cpus), "true"], timeout_s=SCOPE_CHECK_TIMEOUT_S, changes=False
        )
        if check.returncode == 0 and not check.timed_out:
            return Placement([*scope_argv(unit, megabytes, cpus), *widen], megabytes, available, total, unit, cpus)
        said = (check.stderr or check.stdout).strip()[:200] or f"exit {check.returncode}"
        why = f"{SYSTEMD_RUN} --scope refused: {said}"
    placement = Placement(widen, megabytes, available, total, None, cpus)
    where = f"ran inside the agent's own cgroup ({why}; see docs/agent.md, the polkit rule)"
    placement.megabytes, bounds = agent_cgroup_bounds(driver, megabytes)
    if bounds:  # what the cgroup took from the test: a gap
        placement.gaps += [where, *bounds]
    else:  # no memory cap, no CPU quota there (an agent run by hand, a host without systemd): said, no gap
        placement.notes.append(where)
    return placement


def _own_cgroup(driver: LinuxDriver) -> str | None:
    lines = (driver.system.read_text(SELF_CGROUP) or "").splitlines()
    own = next((ln[3:].strip() for ln in lines if ln[:3] == "0::"), None)
    return None if own is None else f"{CGROUP_ROOT}{own.rstrip('/')}"


def agent_cgroup_bounds(driver: LinuxDriver, megabytes: int) -> tuple[int, list[str]]:
    """Inside the agent's cgroup (v2): what its memory.max still lets the test allocate (a fifth is left for
    the agent: asked for more, stressapptest would be killed half-way), and a CPU quota (cpu.max) named."""
    path = _own_cgroup(driver)
    if path is None:
        return megabytes, []
    gaps: list[str] = []
    limit = (driver.system.read_text(f"{path}/memory.max") or "max").strip()
    current = (driver.system.read_text(f"{path}/memory.current") or "0").strip()
    if limit.isdigit():
        used = int(current) if current.isdigit() else 0
        room = max(0, int(limit) - used) * 8 // 10 // (1024 * 1024)
        if room < megabytes:
            gaps.append(
                f"only {room} MB of the {megabytes} MB asked for tested: the agent's cgroup caps it "
                f"({path}/memory.max; MemoryMax= of its unit)"
            )
            megabytes = room
    quota = (driver.system.read_text(f"{path}/cpu.max") or "max").split()
    if len(quota) == 2 and quota[0].isdigit() and quota[1].isdigit() and int(quota[1]):
        share = 100 * int(quota[0]) // int(quota[1])
        gaps.append(f"the load was throttled to {share}% of one CPU ({path}/cpu.max; CPUQuota= of its unit)")
    return megabytes, gaps


def coverage_gap(placement: Placement, params: VerifyMemoryUnderLoadParams) -> str | None:
    """The gap when the run tested less than `min_coverage_percent` of MemAvailable at its start."""
    floor = placement.available_mb * params.min_coverage_percent // 100
    if placement.megabytes >= floor:
        return None
    return (
        f"only {placement.megabytes} MB of {placement.available_mb} MB available tested "
        f"({placement.coverage(params)['percent_of_available']}%, below the {params.min_coverage_percent}% "
        "a pass needs)"
    )
