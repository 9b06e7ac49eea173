"""The actions a plan may name, and what the safety gates need to know of each.

Cyborg carries the actions out on hosts; this table is the contract: a rule
pack naming anything else is refused on load. `disruptive` actions take the
host out of service (they count against concurrency caps and drain first);
`destructive` ones need a person's approval before they run.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ActionSpec:
    name: str
    disruptive: bool
    destructive: bool = False
    idempotent: bool = True
    description: str = ""


ACTIONS: dict[str, ActionSpec] = {
    spec.name: spec
    for spec in (
        ActionSpec("ticket", disruptive=False, description="open a repair ticket for a technician"),
        ActionSpec("reboot", disruptive=True, idempotent=False, description="warm (kexec) or cold reboot"),
        ActionSpec(
            "power_cycle", disruptive=True, idempotent=False, description="chassis power cycle through the BMC (if_off)"
        ),
        ActionSpec("reflash_firmware", disruptive=True, description="flash BIOS/BMC/NIC/disk firmware to a version"),
        ActionSpec("install_kernel", disruptive=True, description="install a pinned kernel, boot it, verify"),
        ActionSpec("hard_ppr", disruptive=True, idempotent=False, description="post-package repair via the SMI flow"),
        ActionSpec("tune_error_reporting", disruptive=False, description="EDAC polling interval, CMCI mode"),
        ActionSpec(
            "verify_memory_under_load",
            disruptive=True,  # it takes the host's CPUs and most of its memory: run on a drained host
            description="stressapptest on the drained host, stall probe on: no new CE/UE, no long stall",
        ),
        ActionSpec(
            "restore_cmci", disruptive=False, description="corrected-error reporting from firmware-first back to CMCI"
        ),
        ActionSpec("repair_irq_affinity", disruptive=False, description="keep device IRQs off isolated cores"),
        ActionSpec("enable_demotion", disruptive=False, description="enable memory-tier demotion"),
        ActionSpec(
            "set_numa_balancing",
            disruptive=False,
            description="NUMA balancing's memory-tiering mode (promotion from CXL), kept across reboots",
        ),
        ActionSpec(
            "set_interleave_weights", disruptive=False, description="weighted interleave for CPU-less (CXL) nodes"
        ),
        ActionSpec("clear_sel", disruptive=False, idempotent=True, description="archive then clear a full SEL"),
        # Not disruptive: one CPU's capacity goes, but the host keeps running and serving on the others
        # (the kernel moves its tasks and interrupts), nothing restarts, and the driver refuses the CPUs
        # the host cannot do without. Undone by a reboot, so a ticket for the CPU follows it in the plan.
        ActionSpec(
            "offline_cpu", disruptive=False, description="take a CPU with repeated errors offline (sysfs online=0)"
        ),
        # Disruptive: a reset kills every process on the GPU, so it runs on a drained host only (the driver
        # refuses otherwise) and counts against the blast-radius caps like any other disruptive step.
        ActionSpec(
            "reset_gpu",
            disruptive=True,
            description="reset one GPU (nvidia-smi -r) so pending row remaps or page retirements take effect",
        ),
        # Not disruptive: the kernel migrates the page's contents and the host keeps serving; 4 KiB of memory go
        # until the next boot, and the driver refuses past a cap of poisoned pages per host.
        ActionSpec(
            "soft_offline_page", disruptive=False, description="soft-offline a 4 KiB page that keeps correcting"
        ),
        ActionSpec("reimage", disruptive=True, destructive=True, idempotent=False, description="PXE reinstall"),
        # Not disruptive: the BMC updates while the host runs on. A BMC image restarts only the BMC; a BIOS image is
        # staged and runs from the next boot (the driver reports `pending_reboot`), a restart the plan orders as its
        # own disruptive step (power_cycle, drained first). Redfish only: an IPMI-only host fails the step.
        ActionSpec(
            "update_bmc_firmware",
            disruptive=False,
            idempotent=False,  # a re-run while the BMC flashes or restarts would submit the update again
            description="BIOS/BMC firmware through the BMC (Redfish SimpleUpdate), image pinned by SHA-256",
        ),
        ActionSpec(
            "restart_agent", disruptive=False, description="start a silent host's agent again (the cluster's hook)"
        ),
        ActionSpec("drain", disruptive=False, description="take the host out of its scheduler"),
        ActionSpec("undrain", disruptive=False, description="put the host back into its scheduler"),
    )
}
