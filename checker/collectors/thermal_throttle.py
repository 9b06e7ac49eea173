"""CPU thermal throttling: the kernel's counters in /sys/devices/system/cpu/cpuN/thermal_throttle/
(arch/x86/kernel/cpu/mce/therm_throt.c), read on the first online CPU of each package.

Every CPU of a package shows the package's counts, so one CPU per package tells them: a few small
sysfs reads per socket, no command, no MSR (the files read per-CPU variables the interrupt handler
keeps; reading them interrupts no CPU). Since Linux 5.5 the kernel no longer logs each throttle
(only one that lasts; `*_throttle_total_time_ms` counts the time), so these counters see heat the
kernel log does not. Absent on CPUs without Intel's thermal monitor interrupt (AMD) and in most VMs.
"""

from __future__ import annotations

from checker.collectors.context import Context, Unavailable
from checker.collectors.topology import package_readers
from checker.parsers.common import parse_cpu_list
from checker.sections.heat import MAX_PACKAGES, ThermalThrottle, ThrottlePackage

CPU_SYSFS = "/sys/devices/system/cpu"
COUNTERS = (
    "package_throttle_count",
    "package_throttle_total_time_ms",
    "core_throttle_count",
    "core_throttle_total_time_ms",
    "package_power_limit_count",
)


def _count(ctx: Context, path: str) -> int | None:
    text = ctx.host.read_text(path)
    if text is None:
        return None
    text = text.strip()
    return int(text) if text.isdigit() and len(text) <= 19 else None


def collect(ctx: Context) -> None:
    online_text = ctx.host.read_text(f"{CPU_SYSFS}/online")
    online = parse_cpu_list(online_text).value if online_text else [0]
    packages: list[ThrottlePackage] = []
    for package, cpu in sorted(package_readers(ctx, online or [0], limit=MAX_PACKAGES)[0].items()):
        base = f"{CPU_SYSFS}/cpu{cpu}/thermal_throttle"
        counts = {name: _count(ctx, f"{base}/{name}") for name in COUNTERS}
        package_count = counts.pop("package_throttle_count")
        if package_count is None:
            continue
        packages.append(ThrottlePackage(package=package, cpu=cpu, package_throttle_count=package_count, **counts))
    if not packages:
        raise Unavailable(
            f"no {CPU_SYSFS}/cpuN/thermal_throttle/package_throttle_count: no Intel thermal monitor "
            "interrupt on this CPU (AMD, most VMs)"
        )
    ctx.observations.thermal_throttle = ThermalThrottle(packages=packages)
