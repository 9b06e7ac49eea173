"""One CPU per package: the collectors that read a per-package counter (MSR_SMI_COUNT, the thermal
throttle counters) read it on one CPU of each package, found from sysfs topology with each package's
CPU list read once, not once per CPU.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from checker.collectors.context import Context
from checker.parsers.common import parse_cpu_list

CPU_SYSFS = "/sys/devices/system/cpu"


def package_readers(
    ctx: Context, online: Sequence[int], *, avoid: Collection[int] = (), limit: int = 64
) -> tuple[dict[int, int], list[int]]:
    """package -> its lowest online CPU not in `avoid`, for at most `limit` packages; and the packages
    whose every online CPU is in `avoid` (not read: the caller says so)."""
    online_set, avoided = set(online), set(avoid)
    seen: set[int] = set()
    readers: dict[int, int] = {}
    skipped: list[int] = []
    for cpu in online:
        if cpu in seen:
            continue
        topology = f"{CPU_SYSFS}/cpu{cpu}/topology"
        package_id = (ctx.host.read_text(f"{topology}/physical_package_id") or "").strip()
        siblings = ctx.host.read_text(f"{topology}/package_cpus_list") or ctx.host.read_text(
            f"{topology}/core_siblings_list"
        )
        package = int(package_id) if package_id.isdigit() and len(package_id) <= 9 else 0
        members = parse_cpu_list(siblings).value if siblings else [cpu]
        seen.update(members)
        seen.add(cpu)
        usable = [c for c in members if c in online_set and c not in avoided]
        if not usable:
            skipped.append(package)
            continue
        readers.setdefault(package, min(usable))
        if len(readers) >= limit:
            break
    return readers, skipped
