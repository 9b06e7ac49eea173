"""The real driver: each action as argv lists for the host's own tools, and sysfs writes.

Nothing is a shell string. Tests assert the argv built here and feed recorded tool outputs through
a recorded `System`. Firmware, hard PPR and CPU offlining live in their own modules (firmware.py,
ppr.py, cpus.py).
"""

from __future__ import annotations

import datetime as dt
import re
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from checker.parsers.common import parse_cpu_list
from checker.parsers.edac import edac_polls
from checker.parsers.ipmi import parse_sel_info
from cyborg.actions import (
    ActionParams,
    CyborgAction,
    HardPprParams,
    InstallKernelParams,
    InterleaveParams,
    OfflineCpuParams,
    RebootParams,
    ReflashFirmwareParams,
    ResetGpuParams,
    SoftOfflinePageParams,
    TuneErrorReportingParams,
    VerifyMemoryUnderLoadParams,
)
from cyborg.commands import ActionContext, ActionFailed, ActionTimedOut, System
from cyborg.drivers import cpus, firmware, gpu, memtest, pages, ppr, tiers
from cyborg.drivers.base import require_restarted
from cyborg.drivers.cpus import cpu_list

BOOT_ID = "/proc/sys/kernel/random/boot_id"
OSRELEASE = "/proc/sys/kernel/osrelease"
KEXEC_DISABLED = "/proc/sys/kernel/kexec_load_disabled"
EDAC_POLL = "/sys/module/edac_core/parameters/edac_mc_poll_msec"
EDAC_MODPROBE = "/etc/modprobe.d/fleetfix-edac.conf"
EDAC_CORE_INITSTATE = "/sys/module/edac_core/initstate"
EDAC_MC = "/sys/devices/system/edac/mc"
CMCI_DISABLED = "/sys/devices/system/machinecheck/machinecheck0/cmci_disabled"
ISOLATED = "/sys/devices/system/cpu/isolated"
ONLINE = "/sys/devices/system/cpu/online"
IRQBALANCE_DEFAULTS = ("/etc/default/irqbalance", "/etc/sysconfig/irqbalance")
BANNED_CPULIST, BANNED_CPUS = "IRQBALANCE_BANNED_CPULIST", "IRQBALANCE_BANNED_CPUS"
CPULIST_SINCE = (1, 8)  # irqbalance 1.8.0 added the cpulist; before it only the hex mask is read
BANNED_LINE = re.compile(rf"^\s*(?:export\s+)?(?:{BANNED_CPULIST}|{BANNED_CPUS})\s*=")


def cpu_mask(cpus: Iterable[int]) -> str:
    """CPUs as the kernel's hex mask, 32-bit groups most significant first, as /proc/irq/N/smp_affinity
    shows them: {4-7,12-15} -> '0000f0f0', {32} -> '00000001,00000000'."""
    bits = 0
    for cpu in cpus:
        bits |= 1 << cpu
    groups = max(1, (bits.bit_length() + 31) // 32)
    return ",".join(f"{(bits >> (32 * group)) & 0xFFFFFFFF:08x}" for group in reversed(range(groups)))


class LinuxDriver:
    name = "linux"

    def __init__(
        self,
        system: System,
        *,
        warm_reboot: bool = True,
        firmware_tools: dict[str, list[str]] | None = None,
        ppr_tool: dict[str, list[str]] | None = None,
        work_dir: Path | None = None,
        firmware_dir: Path | None = None,
        bmc_wait_s: float = 600.0,
        poll_s: float = 15.0,
    ) -> None:
        self.system = system
        self.warm_reboot = warm_reboot
        self.firmware_tools = firmware_tools or {}
        self.ppr_tool = ppr_tool or {}
        self.work_dir = work_dir or Path("/var/tmp")  # noqa: S108 - the agent's state dir when it has one
        self.firmware_dir = firmware_dir  # local firmware images are taken from here only
        self.bmc_wait_s = bmc_wait_s
        self.poll_s = poll_s

    def boot_id(self) -> str | None:
        text = self.system.read_text(BOOT_ID)
        return text.strip() if text else None

    def release(self) -> str:
        return (self.system.read_text(OSRELEASE) or "").strip()

    # -- dispatch ---------------------------------------------------------------------

    def run(self, action: CyborgAction, params: ActionParams, ctx: ActionContext) -> dict[str, Any]:
        if isinstance(params, RebootParams):
            return self.reboot(params, ctx)
        if isinstance(params, ReflashFirmwareParams):
            return firmware.reflash(self, params, ctx)
        if isinstance(params, InstallKernelParams):
            return self.install_kernel(params, ctx)
        if isinstance(params, HardPprParams):
            return ppr.hard_ppr(self, params, ctx)
        if isinstance(params, TuneErrorReportingParams):
            return self.tune_error_reporting(params, ctx)
        if isinstance(params, InterleaveParams):
            return tiers.set_interleave_weights(self, params, ctx)
        if isinstance(params, OfflineCpuParams):
            return cpus.offline_cpu(self, params, ctx)
        if isinstance(params, SoftOfflinePageParams):
            return pages.soft_offline_page(self, params, ctx)
        if isinstance(params, ResetGpuParams):
            return gpu.reset_gpu(self, params, ctx)
        if isinstance(params, VerifyMemoryUnderLoadParams):
            return memtest.verify_memory_under_load(self, params, ctx)
        handler = {
            "repair_irq_affinity": self.repair_irq_affinity,
            "enable_demotion": lambda ctx: tiers.enable_demotion(self, ctx),
            "set_numa_balancing": lambda ctx: tiers.set_numa_balancing(self, ctx),
            "clear_sel": self.clear_sel,
            "restore_cmci": self.restore_cmci,
        }.get(action.name)
        if handler is None:
            raise ActionFailed(f"the linux driver does not carry out {action.name!r} on the host")
        return handler(ctx)

    def await_restart(self, action: CyborgAction, ctx: ActionContext, boot_id_before: str | None) -> None:
        """The restart kills this process; if the time budget runs out first, the host did not restart."""
        ctx.note("waiting for the host to restart", f"boot id {boot_id_before}")
        while ctx.remaining() > 0:
            time.sleep(max(0.0, min(self.poll_s, ctx.remaining())))
        raise ActionTimedOut("the host did not restart within the action's time budget")

    def verify(
        self, action: CyborgAction, params: ActionParams, ctx: ActionContext, boot_id_before: str | None
    ) -> dict[str, Any]:
        checks: dict[str, Any] = {"boot_id": require_restarted(self, boot_id_before)}
        if isinstance(params, InstallKernelParams):
            running = ctx.must(["uname", "-r"], changes=False).strip()
            if running != params.release:
                raise ActionFailed(f"uname -r is {running}, not {params.release}: the new kernel did not boot")
            checks["kernel"] = running
        elif isinstance(params, HardPprParams):
            checks.update(ppr.after_boot(self, params, ctx))
        elif isinstance(params, ReflashFirmwareParams):
            checks.update(firmware.after_boot(params, ctx))
        return checks

    # -- reboot -----------------------------------------------------------------------

    def kexec_allowed(self) -> bool:
        disabled = (self.system.read_text(KEXEC_DISABLED) or "1").strip()
        return self.warm_reboot and disabled == "0" and self.system.which("kexec") is not None

    def kexec_argv(self, release: str) -> list[str]:
        boot = set(self.system.list_dir("/boot") or [])
        kernel = f"vmlinuz-{release}"
        if kernel not in boot:
            raise ActionFailed(f"/boot/{kernel} is not there: cannot kexec into {release}")
        initrd = next((n for n in (f"initrd.img-{release}", f"initramfs-{release}.img") if n in boot), None)
        argv = ["kexec", "--load", f"/boot/{kernel}", "--reuse-cmdline"]
        if initrd:
            argv.insert(3, f"--initrd=/boot/{initrd}")
        return argv

    def restart(self, ctx: ActionContext, *, warm: bool, release: str) -> dict[str, Any]:
        """Warm through kexec (seconds, no firmware POST) where allowed, otherwise a full reboot."""
        if warm and self.kexec_allowed():
            ctx.must(self.kexec_argv(release))
            ctx.restart_issued()
            ctx.must(["systemctl", "kexec"])
            return {"via": "kexec", "release": release, "restarting": True}
        ctx.restart_issued()
        ctx.must(["systemctl", "reboot"])
        return {"via": "reboot", "release": release, "restarting": True}

    def reboot(self, params: RebootParams, ctx: ActionContext) -> dict[str, Any]:
        if self.system.which("systemctl") is None:
            raise ActionFailed("precondition: systemctl is not installed")
        return {"mode": params.mode, **self.restart(ctx, warm=params.mode == "warm", release=self.release())}

    # -- kernel -----------------------------------------------------------------------

    def package_manager(self) -> str:
        for tool in ("apt-get", "dnf", "zypper", "yum"):
            if self.system.which(tool):
                return tool
        raise ActionFailed("precondition: no package manager found (apt-get, dnf, zypper, yum)")

    def install_argv(self, manager: str, package: str) -> list[str]:
        # `--` ends the options (apt's CommandLine::Parse, getopt in zypper, argparse in dnf, optparse
        # in yum): the package is never read as one, whatever the parameter check let through.
        if manager == "apt-get":
            return [
                "env",
                "DEBIAN_FRONTEND=noninteractive",
                "apt-get",
                "install",
                "-y",
                "--no-install-recommends",
                "--",
                package,
            ]
        if manager == "zypper":
            return ["zypper", "--non-interactive", "install", "--", package]
        return [manager, "install", "-y", "--", package]

    def default_package(self, manager: str, release: str) -> str:
        return f"linux-image-{release}" if manager == "apt-get" else f"kernel-{release}"

    def default_entry_argv(self, release: str) -> list[list[str]]:
        if self.system.which("grubby"):
            return [["grubby", "--set-default", f"/boot/vmlinuz-{release}"]]
        if self.system.which("grub-set-default"):
            name = "Linux"
            for line in (self.system.read_text("/etc/os-release") or "").splitlines():
                if line.startswith("NAME="):
                    name = line.partition("=")[2].strip().strip('"')
            entry = f"Advanced options for {name}>{name}, with Linux {release}"
            return [["grub-set-default", entry], ["update-grub"]]
        raise ActionFailed("precondition: neither grubby nor grub-set-default is installed")

    def install_kernel(self, params: InstallKernelParams, ctx: ActionContext) -> dict[str, Any]:
        running = self.release()
        if running == params.release:
            ctx.note("already running the kernel", running)
            return {"kernel": running, "already_running": True}
        manager = self.package_manager()
        package = params.package or self.default_package(manager, params.release)
        ctx.must(self.install_argv(manager, package), timeout_s=900)
        if not ctx.dry_run and f"vmlinuz-{params.release}" not in (self.system.list_dir("/boot") or []):
            raise ActionFailed(f"{package} installed no /boot/vmlinuz-{params.release}")
        for argv in self.default_entry_argv(params.release):
            ctx.must(argv)
        return {
            "kernel": params.release,
            "package": package,
            "previous": running,
            **self.restart(ctx, warm=True, release=params.release),
        }

    # -- error reporting, interrupts, memory tiers ------------------------------------------------

    def edac_controllers(self) -> list[str]:
        """The mc_name of every EDAC memory controller ('Skylake Socket#0 IMC#1', 'ie31200' …)."""
        names = []
        for entry in self.system.list_dir(EDAC_MC) or []:
            if entry.startswith("mc") and entry[2:].isdigit():
                names.append((self.system.read_text(f"{EDAC_MC}/{entry}/mc_name") or "").strip())
        return names

    def tune_error_reporting(self, params: TuneErrorReportingParams, ctx: ActionContext) -> dict[str, Any]:
        before = (self.system.read_text(EDAC_POLL) or "").strip()
        if not before:
            raise ActionFailed(f"precondition: {EDAC_POLL} is not there (no EDAC driver loaded)")
        controllers = self.edac_controllers()
        if controllers and all(edac_polls(name) is False for name in controllers):
            # skx/i10nm/amd64/ghes log each error from the MCE decode chain: the interval changes nothing there
            raise ActionFailed(f"precondition: the EDAC driver of {', '.join(sorted(set(controllers)))} does not poll")
        wanted = str(params.edac_poll_s * 1000)
        ctx.write(EDAC_POLL, wanted)
        changed: dict[str, Any] = {"edac_poll_msec": int(wanted), "previous": int(before)}
        if self.system.read_text(EDAC_CORE_INITSTATE) is not None:  # only a loadable module has initstate
            ctx.write(EDAC_MODPROBE, f"options edac_core edac_mc_poll_msec={wanted}\n")  # the next boot too
            changed["persisted"] = EDAC_MODPROBE
        else:
            changed["persisted"] = None
            changed["note"] = (
                f"edac_core is built into the kernel: modprobe.d does not reach it; the next boot needs "
                f"edac_core.edac_mc_poll_msec={wanted} on the kernel command line"
            )
            ctx.note("not persisted", changed["note"])
        if params.cmci == "cmci":
            if self.system.read_text(CMCI_DISABLED) is None:
                raise ActionFailed(f"precondition: {CMCI_DISABLED} is not there (no CMCI on this CPU)")
            ctx.write(CMCI_DISABLED, "0")
            changed["cmci"] = "on"
        if not ctx.dry_run and (self.system.read_text(EDAC_POLL) or "").strip() != wanted:
            raise ActionFailed(f"{EDAC_POLL} did not take {wanted}")
        return changed

    def repair_irq_affinity(self, ctx: ActionContext) -> dict[str, Any]:
        isolated = set(parse_cpu_list(self.system.read_text(ISOLATED) or "").value)
        if not isolated:
            ctx.note("no isolated cores", "/sys/devices/system/cpu/isolated is empty")
            return {"moved": [], "isolated": ""}
        online = set(parse_cpu_list(self.system.read_text(ONLINE) or "").value)
        housekeeping = cpu_list(online - isolated)
        moved, managed = [], []
        for irq in sorted((n for n in self.system.list_dir("/proc/irq") or [] if n.isdigit()), key=int):
            path = f"/proc/irq/{irq}/smp_affinity_list"
            current = set(parse_cpu_list(self.system.read_text(path) or "").value)
            if not current & isolated:
                continue
            try:
                ctx.write(path, housekeeping)
                moved.append(int(irq))
            except ActionFailed:
                managed.append(int(irq))  # kernel-managed IRQs refuse (EIO): isolcpus=managed_irq keeps them off
        banned = cpu_list(isolated)
        for defaults in IRQBALANCE_DEFAULTS:
            text = self.system.read_text(defaults)
            if text is None:
                continue
            version = self.irqbalance_version(ctx)
            wanted = []
            if version is None or version >= CPULIST_SINCE:
                wanted.append(f"{BANNED_CPULIST}={banned}")
            if version is None or version < CPULIST_SINCE:
                wanted.append(f"{BANNED_CPUS}={cpu_mask(isolated)}")
            if version is None:
                ctx.note(
                    "irqbalance version unknown",
                    f"neither irqbalance --version nor dpkg-query told it: writing both {BANNED_CPULIST} "
                    f"(read from 1.8) and {BANNED_CPUS} (read before 1.8), for the same CPUs",
                )
            # a stale line of the other variable goes too: 1.8+ still prefers a set IRQBALANCE_BANNED_CPUS
            lines = [ln for ln in text.splitlines() if not BANNED_LINE.match(ln)]
            ctx.write(defaults, "\n".join([*lines, *wanted]) + "\n")
            if self.system.which("irqbalance"):
                ctx.must(["systemctl", "restart", "irqbalance"])
            break
        if not ctx.dry_run:
            still = [
                irq
                for irq in moved
                if set(parse_cpu_list(self.system.read_text(f"/proc/irq/{irq}/smp_affinity_list") or "").value)
                & isolated
            ]
            if still:
                raise ActionFailed(f"IRQs {still} are still allowed on isolated cores {banned}")
        return {"moved": moved, "managed": managed, "housekeeping": housekeeping, "banned": banned}

    def irqbalance_version(self, ctx: ActionContext) -> tuple[int, int] | None:
        """(major, minor) of the installed irqbalance, or None when it cannot be told."""
        if self.system.which("irqbalance"):
            # irqbalance.c: -V prints "irqbalance version 1.9.0" to stdout, then exit(1): the text decides
            result = ctx.run(["irqbalance", "--version"], timeout_s=10, changes=False)
            found = re.search(r"irqbalance version (\d+)\.(\d+)", result.stdout)
            if found:
                return int(found[1]), int(found[2])
        if self.system.which("dpkg-query"):  # older builds have no --version; Debian's package says it
            result = ctx.run(["dpkg-query", "-W", "--showformat=${Version}", "irqbalance"], timeout_s=10, changes=False)
            found = re.match(r"(?:\d+:)?(\d+)\.(\d+)", result.stdout.strip())  # '1.9.2-1', '1.8.0-1ubuntu0.2'
            if result.returncode == 0 and found:
                return int(found[1]), int(found[2])
        return None

    def restore_cmci(self, ctx: ActionContext) -> dict[str, Any]:
        return ppr.restore_cmci(self, ctx)

    def clear_sel(self, ctx: ActionContext) -> dict[str, Any]:
        entries = ctx.must(["ipmitool", "sel", "elist"], timeout_s=300, changes=False)
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
        archive = str(self.work_dir / f"sel-{stamp}.txt")
        ctx.write(archive, entries)  # archived before anything is cleared
        ctx.must(["ipmitool", "sel", "clear"])
        if ctx.dry_run:
            return {"archived": archive}
        after = parse_sel_info(ctx.must(["ipmitool", "sel", "info"], changes=False)).value
        if after.entry_count is not None and after.entry_count > 1:  # "Log area reset/cleared" may be the one
            raise ActionFailed(f"the SEL still holds {after.entry_count} entries after clearing")
        return {"archived": archive, "archived_lines": len(entries.splitlines()), "entries_after": after.entry_count}
