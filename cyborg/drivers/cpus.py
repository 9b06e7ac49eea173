"""Taking a CPU offline on the real host, for a core that keeps logging machine checks.

What mcelog's and rasdaemon's CPU triggers do, through sysfs: `0` into
/sys/devices/system/cpu/cpuN/online, for the CPU and (by default) every CPU sharing its L1 or L2
(its SMT siblings; on Intel's E-core modules the module's cores); the kernel migrates their tasks
and interrupts to the others.
It is refused for the CPUs the host cannot do without: the last online CPU of its socket (the socket's
memory and devices would be left without a local CPU), the last housekeeping CPU (every other online
one isolated or nohz_full: timekeeping, RCU callbacks and unbound kernel work need one), isolated or
nohz_full CPUs themselves (the latency workload pinned there would be moved silently), and the last
CPU the agent itself may run on (FLEETFIX_AGENT_CPUS pins it to housekeeping cores). CPU 0 is refused
by the parameters already. A reboot brings the CPU back; the plan's ticket is what gets it replaced.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from checker.parsers.common import parse_cpu_list
from cyborg.actions import OfflineCpuParams
from cyborg.commands import ActionContext, ActionFailed

if TYPE_CHECKING:
    from cyborg.drivers.linux import LinuxDriver

CPU_DIR = "/sys/devices/system/cpu"
ONLINE = f"{CPU_DIR}/online"
ISOLATED = f"{CPU_DIR}/isolated"
NOHZ_FULL = f"{CPU_DIR}/nohz_full"
SELF_STATUS = "/proc/self/status"


def cpu_list(cpus: set[int] | list[int]) -> str:
    """The kernel's cpu-list syntax for a set of CPUs: {0,1,2,5} -> '0-2,5'."""
    ordered = sorted(set(cpus))
    ranges: list[str] = []
    start = previous = None
    for cpu in [*ordered, None]:
        if cpu is not None and previous is not None and cpu == previous + 1:
            previous = cpu
            continue
        if start is not None:
            ranges.append(str(start) if start == previous else f"{start}-{previous}")
        start = previous = cpu
    return ",".join(ranges)


def online_file(cpu: int) -> str:
    return f"{CPU_DIR}/cpu{cpu}/online"


def _cpus(driver: LinuxDriver, path: str) -> set[int]:
    return set(parse_cpu_list(driver.system.read_text(path) or "").value)


def _socket_of(driver: LinuxDriver, cpu: int) -> str | None:
    text = driver.system.read_text(f"{CPU_DIR}/cpu{cpu}/topology/physical_package_id")
    return text.strip() if text is not None and text.strip() else None


def _agent_cpus(driver: LinuxDriver) -> set[int]:
    """The CPUs this process may run on (Cpus_allowed_list); empty when it cannot tell."""
    for line in (driver.system.read_text(SELF_STATUS) or "").splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return set(parse_cpu_list(line.partition(":")[2]).value)
    return set()


MAX_CACHE_INDEXES = 8


def _siblings(driver: LinuxDriver, cpu: int) -> set[int]:
    """The CPUs that share `cpu`'s L1 and L2 caches: its SMT siblings (topology/thread_siblings_list) and,
    where an L2 serves a module of cores (Intel's E-core modules), every core of it
    (cache/indexN/shared_cpu_list of the level 1 and 2 caches), as mcelog's cache trigger does."""
    text = driver.system.read_text(f"{CPU_DIR}/cpu{cpu}/topology/thread_siblings_list")
    found = set(parse_cpu_list(text or "").value) | {cpu}
    for index in range(MAX_CACHE_INDEXES):
        base = f"{CPU_DIR}/cpu{cpu}/cache/index{index}"
        level = (driver.system.read_text(f"{base}/level") or "").strip()
        if not level:
            break
        if level in ("1", "2"):
            found |= set(parse_cpu_list(driver.system.read_text(f"{base}/shared_cpu_list") or "").value)
    return found


def offline_cpu(driver: LinuxDriver, params: OfflineCpuParams, ctx: ActionContext) -> dict[str, Any]:
    """Offline the CPU and its SMT siblings: an error in the core's own cache stays in use while a
    sibling thread runs on it (mcelog's cache-error trigger offlines every CPU sharing the cache)."""
    cpu = params.cpu
    path = online_file(cpu)
    state = driver.system.read_text(path)
    if state is None:
        raise ActionFailed(f"precondition: {path} is not there (no such CPU, or one the kernel cannot take offline)")
    online = _cpus(driver, ONLINE)
    core = _siblings(driver, cpu) if params.core else {cpu}
    if 0 in core:
        raise ActionFailed(f"refused: cpu{cpu}'s core holds CPU 0, the boot CPU, which most kernels cannot offline")
    going = {c for c in core if c in online or (driver.system.read_text(online_file(c)) or "").strip() != "0"}
    if not going:
        if cpu in online:
            raise ActionFailed(f"{path} says {state.strip()} but {ONLINE} still lists cpu{cpu}")
        ctx.note("already offline", f"{path}: 0")
        return {"cpu": cpu, "cpus": cpu_list(core), "online": False, "already_offline": True}
    _refuse_if_needed(driver, cpu, going, online)
    for each in sorted(going):
        target = online_file(each)
        if driver.system.read_text(target) is None:
            raise ActionFailed(f"precondition: {target} is not there (cpu{each} of cpu{cpu}'s core)")
        try:
            ctx.write(target, "0")
        except ActionFailed as error:
            raise ActionFailed(f"precondition: {target} is not writable ({error})") from None
    isolated = _cpus(driver, ISOLATED) | _cpus(driver, NOHZ_FULL)
    changed: dict[str, Any] = {
        "cpu": cpu,
        "cpus": cpu_list(going),
        "online": False,
        "socket": _socket_of(driver, cpu),
        "isolated": cpu in isolated,
        "online_before": cpu_list(online),
    }
    if ctx.dry_run:
        return changed
    still = _cpus(driver, ONLINE)
    for each in sorted(going):
        after = (driver.system.read_text(online_file(each)) or "").strip()
        if after != "0" or each in still:
            raise ActionFailed(
                f"cpu{each} is still online after writing 0 ({online_file(each)} reads {after or 'nothing'})"
            )
    changed["online_after"] = cpu_list(still)
    return changed


def _refuse_if_needed(driver: LinuxDriver, cpu: int, going: set[int], online: set[int]) -> None:
    """The CPUs the host cannot do without: refused before anything is written."""
    others = online - going
    socket = _socket_of(driver, cpu)
    if socket is None:
        raise ActionFailed(f"precondition: cannot tell cpu{cpu}'s socket (no topology/physical_package_id)")
    if not any(_socket_of(driver, other) == socket for other in others):
        raise ActionFailed(f"refused: cpu{cpu}'s core ({cpu_list(going)}) is the last online in socket {socket}")
    isolated = _cpus(driver, ISOLATED) | _cpus(driver, NOHZ_FULL)
    if going & isolated:
        raise ActionFailed(
            f"refused: cpu{cpu}'s core ({cpu_list(going)}) is isolated or nohz_full ({cpu_list(going & isolated)}): "
            "a latency-critical thread pinned there would be moved onto housekeeping CPUs without a word; "
            "the ticket goes to a person instead"
        )
    if not others - isolated:
        raise ActionFailed(
            f"refused: cpu{cpu}'s core ({cpu_list(going)}) holds the last housekeeping CPUs online (the others, "
            f"{cpu_list(others)}, are isolated or nohz_full): timekeeping, RCU callbacks and unbound kernel work "
            "need one"
        )
    agent = _agent_cpus(driver)
    if agent & going and not agent & others:
        raise ActionFailed(
            f"refused: the agent may run on cpu{cpu}'s core only (Cpus_allowed_list {cpu_list(agent)}, "
            "FLEETFIX_AGENT_CPUS): offlining it would push the agent off its housekeeping CPUs"
        )
