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
SYSCTL_DIRS = ("/etc/sysctl.d", "/run/sysctl.d", "/usr/local/lib/sysctl.d", "/usr/lib/sysctl.d", "/lib/sysctl.d")
SYSCTL_CONF = "/etc/sysctl.conf"
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


def sysctl_setters(driver: LinuxDriver) -> list[str]:
    """The sysctl configuration files other than ours that set kernel.numa_balancing (sysctl.d(5): the
    directories systemd-sysctl and `sysctl --system` read, and /etc/sysctl.conf)."""
    found: list[str] = []
    for directory in SYSCTL_DIRS:
        for name in sorted(driver.system.list_dir(directory) or []):
            path = f"{directory}/{name}"
            if name.endswith(".conf") and path != NUMA_BALANCING_CONF and _sets_numa_balancing(driver, path):
                found.append(path)
    if _sets_numa_balancing(driver, SYSCTL_CONF):
        found.append(SYSCTL_CONF)
    return found


def _sets_numa_balancing(driver: LinuxDriver, path: str) -> bool:
    for line in (driver.system.read_text(path) or "").splitlines():
        line = line.strip().lstrip("-").strip()  # a leading '-': errors setting it are ignored, it is still set
        if line and line[0] not in "#;" and "=" in line:
            key = line.split("=", 1)[0].strip().replace("/", ".")
            if key == "kernel.numa_balancing":
                return True
    return False


def set_numa_balancing(driver: LinuxDriver, ctx: ActionContext) -> dict[str, Any]:
    """Add the memory-tiering bit to NUMA balancing that is on in its normal mode only (1 -> 3), read it back,
    and keep it across reboots with a sysctl.d drop-in. Balancing turned off (0) is someone's decision and is
    left alone; a value another sysctl file sets is that file's owner's, and ours would fight it."""
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
    if before == 0:
        raise ActionFailed(
            f"precondition: {NUMA_BALANCING} is 0: NUMA balancing was turned off on this host, not overridden"
        )
    if before != 1:
        raise ActionFailed(f"precondition: {NUMA_BALANCING} is {before}, not 1 (normal mode only): not changed")
    if others := sysctl_setters(driver):
        raise ActionFailed(
            f"precondition: {', '.join(others)} sets kernel.numa_balancing: a drop-in of ours would override "
            "it or be undone by it; change it there"
        )
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
    auto = (driver.system.read_text(f"{WEIGHTED_INTERLEAVE}/auto") or "").strip().lower()
    if auto in ("y", "1", "true"):  # Linux 6.16 on: writing a nodeN weight would switch the system to manual
        raise ActionFailed(
            f"precondition: {WEIGHTED_INTERLEAVE}/auto is {auto}: the kernel sets the weights from the tiers' "
            "bandwidth (HMAT/CDAT); not switched to manual"
        )
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
