"""SMIs: Intel's MSR_SMI_COUNT (0x34), read through the msr driver, one housekeeping CPU per package.

Every SMI stops all the threads of the platform, and each thread's MSR_SMI_COUNT counts the same
event, so reading every CPU tells nothing more — and each read of /dev/cpu/N/msr is an
inter-processor interrupt to CPU N (rdmsr_on_cpu), the jitter an agent must not bring to isolated
cores (docs/domain: seed 004, "who watches the watchmen"). So the first online, non-isolated CPU
of each package is read: one 8-byte pread per socket per cycle. Bits 31:0 are the count and wrap;
the centre derives the rate (remediator/derive/reporting.py).

No turbostat fallback: it reads the same /dev/cpu/N/msr (the same module and permission), on
every CPU, and must sleep through an interval to print a delta.
"""

from __future__ import annotations

import errno

from checker.collectors.context import Context, Unavailable
from checker.collectors.isolated_workload import isolated_cpus
from checker.collectors.topology import package_readers
from checker.parsers.common import parse_cpu_list
from checker.parsers.identity import parse_cpuinfo
from checker.schemas import SmiPackage, SmiState

MSR_SMI_COUNT = 0x34
CPU_SYSFS = "/sys/devices/system/cpu"
ONLINE = f"{CPU_SYSFS}/online"
MAX_PACKAGES = 64


def msr_path(cpu: int) -> str:
    return f"/dev/cpu/{cpu}/msr"


def _vendor(ctx: Context) -> str | None:
    identity = ctx.observations.identity
    if identity is not None and identity.cpus:
        return identity.cpus[0].vendor
    text = ctx.host.read_text("/proc/cpuinfo")
    if text is None:
        return None
    cpus = parse_cpuinfo(text).value
    return cpus[0].vendor if cpus else None


def _readers(ctx: Context, online: list[int]) -> dict[int, int]:
    """package -> the CPU to read for it: its first online CPU that is not isolated."""
    readers, skipped = package_readers(ctx, online, avoid=isolated_cpus(ctx) or (), limit=MAX_PACKAGES)
    for package in skipped:
        ctx.problem(f"package {package}: every online CPU is isolated; its SMI count is not read")
    return readers


def collect(ctx: Context) -> None:
    vendor = _vendor(ctx)
    if vendor == "AuthenticAMD" or vendor == "HygonGenuine":
        raise Unavailable("no MSR_SMI_COUNT on AMD: the SMI counter (MSR 0x34) is Intel's")
    if vendor is not None and vendor != "GenuineIntel":
        raise Unavailable(f"no MSR_SMI_COUNT on {vendor}: the SMI counter (MSR 0x34) is Intel's")
    online_text = ctx.host.read_text(ONLINE)
    online = parse_cpu_list(online_text).value if online_text else [0]
    if ctx.host.list_dir("/dev/cpu") is None or "msr" not in (ctx.host.list_dir(f"/dev/cpu/{online[0]}") or []):
        raise Unavailable(f"no {msr_path(online[0])}: load the msr module (modprobe msr)")
    packages: list[SmiPackage] = []
    for package, cpu in sorted(_readers(ctx, online).items()):
        try:
            raw = ctx.host.read_bytes(msr_path(cpu), MSR_SMI_COUNT, 8)
        except OSError as error:
            if error.errno in (errno.EACCES, errno.EPERM):
                raise Unavailable(
                    f"{msr_path(cpu)}: permission denied (reading MSRs needs root with CAP_SYS_RAWIO; "
                    "kernel lockdown also refuses it)"
                ) from error
            if error.errno == errno.EIO:
                raise Unavailable(f"{msr_path(cpu)}: the CPU has no MSR 0x34 (MSR_SMI_COUNT)") from error
            if error.errno == errno.ENOENT:
                raise Unavailable(f"no {msr_path(cpu)}: load the msr module (modprobe msr)") from error
            raise Unavailable(f"{msr_path(cpu)}: {error.strerror or error}") from error
        count = int.from_bytes(raw, "little") & 0xFFFFFFFF
        packages.append(SmiPackage(package=package, cpu=cpu, count=count))
    if not packages:
        raise Unavailable("no package has a CPU the agent may read (all isolated)")
    ctx.observations.smi = SmiState(source="msr", packages=packages)
    ctx.source = "msr"
