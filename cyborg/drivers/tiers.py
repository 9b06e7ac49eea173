"""Memory tiers on the real driver (seed 003): demotion on, NUMA balancing's memory-tiering mode (promotion),
and the weighted-interleave weights the central side sends (the host's class configuration: the host never
guesses a ratio). Every write is read back."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from cyborg.actions import InterleaveParams
from cyborg.commands import ActionContext, ActionFailed

if TYPE_CHECKING:
    from cyborg.drivers.linux import LinuxDriver

DEMOTION = "/sys/kernel/mm/numa/demotion_enabled"
WEIGHTED_INTERLEAVE = "/sys/kernel/mm/mempolicy/weighted_interleave"
NUMA_BALANCING = "/proc/sys/kernel/numa_balancing"
NUMA_BALANCING_CONF = "/etc/sysctl.d/60-fleetfix-numa-balancing.conf"  # read by systemd-sysctl at boot
MEMORY_TIERING = 2  # NUMA_BALANCING_MEMORY_TIERING (Documentation/admin-guide/sysctl/kernel.rst), Linux 5.18 on
TIERING_SINCE = (5, 18)


def enable_demotion(driver: LinuxDriver, ctx: ActionContext) -> dict[str, Any]:
    before = driver.system.read_text(DEMOTION)
    if before is None:
        raise ActionFailed(f"precondition: {DEMOTION} is not there (kernel without memory tiering)")
    ctx.write(DEMOTION, "true")
    if not ctx.dry_run and (driver.system.read_text(DEMOTION) or "").strip() not in ("true", "1"):
        raise ActionFailed(f"{DEMOTION} did not take true")
    return {"demotion_enabled": True, "previous": before.strip()}


def set_numa_balancing(driver: LinuxDriver, ctx: ActionContext) -> dict[str, Any]:
    """Add the memory-tiering bit to NUMA balancing (keeping NORMAL if it was on: 1 -> 3), read it back, and
    keep it across reboots with a sysctl.d drop-in."""
    text = driver.system.read_text(NUMA_BALANCING)
    if text is None:
        raise ActionFailed(f"precondition: {NUMA_BALANCING} is not there (a kernel without NUMA balancing)")
    release = driver.release()
    found = re.match(r"(\d+)\.(\d+)", release)
    if found is None or (int(found[1]), int(found[2])) < TIERING_SINCE:
        raise ActionFailed(f"precondition: kernel {release or '?'} predates numa_balancing=2 (Linux 5.18)")
    try:
        before = int(text.strip())
    except ValueError:
        raise ActionFailed(f"{NUMA_BALANCING} holds {text.strip()[:40]!r}, not a number") from None
    wanted = before | MEMORY_TIERING
    ctx.write(NUMA_BALANCING, str(wanted))
    ctx.write(
        NUMA_BALANCING_CONF, f"# fleetfix: TPP promotion from CPU-less (CXL) nodes\nkernel.numa_balancing = {wanted}\n"
    )
    if not ctx.dry_run and (driver.system.read_text(NUMA_BALANCING) or "").strip() != str(wanted):
        raise ActionFailed(f"{NUMA_BALANCING} did not take {wanted}")
    return {"numa_balancing": wanted, "previous": before, "persisted": NUMA_BALANCING_CONF}


def set_interleave_weights(driver: LinuxDriver, params: InterleaveParams, ctx: ActionContext) -> dict[str, Any]:
    if driver.system.list_dir(WEIGHTED_INTERLEAVE) is None:
        raise ActionFailed(f"precondition: {WEIGHTED_INTERLEAVE} is not there (kernel before 6.9)")
    weights = params.weights
    if not weights:  # the central side fills in the class's configured weights; a host never guesses a ratio
        raise ActionFailed("no weights given: the class's configured weights come with the action")
    for node, weight in sorted(weights.items()):
        ctx.write(f"{WEIGHTED_INTERLEAVE}/node{node}", str(weight))
    if not ctx.dry_run:
        for node, weight in sorted(weights.items()):
            back = (driver.system.read_text(f"{WEIGHTED_INTERLEAVE}/node{node}") or "").strip()
            if back != str(weight):
                raise ActionFailed(f"{WEIGHTED_INTERLEAVE}/node{node} reads {back!r} after writing {weight}")
    return {"weights": weights}
