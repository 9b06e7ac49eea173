"""Fault kinds the simulated fleet injects: how common each is, which hosts can have it, and
which faults a remediation clears.

Relative rates follow what large fleets report: DIMM correctable errors and disk wear lead,
power and cooling next, software and configuration faults after; kinds that only exist on
some hardware (an erratum, CXL memory, isolated cores) are drawn only for those hosts.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Literal

FaultKind = Literal[
    "dimm_ce_storm",
    "dimm_ce_moderate",
    "dimm_ce_page",
    "gpu_remap_pending",
    "nic_crc_errors",
    "dimm_ue",
    "cmci_storm",
    "edac_poll_slow",
    "firmware_old_bios",
    "firmware_old_bmc",
    "errata_unpatched",
    "cputime_wrap",
    "smart_failing",
    "smart_realloc_growing",
    "nvme_critical_warning",
    "nvme_temperature",
    "psu_failure",
    "psu_input_lost",
    "fan_failure",
    "soft_lockups",
    "panic",
    "unreachable",
    "powered_off",
    "agent_dead",
    "isolated_irqs",
    "isolated_tlb",
    "cxl_demotion_disabled",
    "cxl_interleave_default",
    "cxl_promotion_disabled",
    "slow_host",
    "sel_full",
    "cpu_core_errors",
    "firmware_first_left",
    "smi_storm",
    "smi_stalls",
    "stalls_not_smi",
    "verify_tool_missing",
    "verify_scope_refused",
    "corrected_errors_ignored",
    "capacity_lost",
    "pcie_fault",
    "fs_readonly",
    "oom_kills",
    "gpu_xid",
    "rack_hot",
    "cxl_media_errors",
]

# kind -> relative rate among faulty hosts
FAULT_RATES: dict[FaultKind, float] = {
    "dimm_ce_storm": 10,
    "dimm_ce_moderate": 12,
    "dimm_ce_page": 6,
    "gpu_remap_pending": 3,
    "nic_crc_errors": 5,
    "dimm_ue": 4,
    "cmci_storm": 3,
    "edac_poll_slow": 5,
    "firmware_old_bios": 6,
    "firmware_old_bmc": 5,
    "errata_unpatched": 8,
    "cputime_wrap": 3,
    "smart_failing": 3,
    "smart_realloc_growing": 7,
    "nvme_critical_warning": 3,
    "nvme_temperature": 2,
    "psu_failure": 4,
    "psu_input_lost": 3,
    "fan_failure": 4,
    "soft_lockups": 4,
    "panic": 2,
    "unreachable": 3,
    "powered_off": 1,
    "agent_dead": 2,
    "isolated_irqs": 8,
    "isolated_tlb": 4,
    "cxl_demotion_disabled": 6,
    "cxl_interleave_default": 6,
    "cxl_promotion_disabled": 5,
    "slow_host": 4,
    "sel_full": 2,
    "cpu_core_errors": 3,
    "firmware_first_left": 2,
    "smi_storm": 2,
    "smi_stalls": 2,
    "stalls_not_smi": 1,
    "verify_tool_missing": 1,
    "verify_scope_refused": 1,
    "corrected_errors_ignored": 1,
    "capacity_lost": 3,  # a DIMM, a core or a disk firmware or the OS no longer sees (checker/sim/capacity.py)
    "pcie_fault": 3,  # variants: a link at half width or a gen lower, or a corrected-error storm (sim/pcie.py)
    "fs_readonly": 3,  # the data volume's filesystem shut down or remounted ro (checker/sim/os_faults.py)
    "oom_kills": 4,  # a workload outgrowing its memory cgroup, killed again and again
    # on GPU hosts only; Xid errors are their commonest fault (Meta's Llama 3 training: GPUs and their
    # memory were most of the unexpected interruptions). Variants dbe, fallen_off_bus, app (sim/xid.py)
    "gpu_xid": 6,
    # a rack position whose cooling failed: the host and two healthy neighbours of its rack (checker/sim/heat.py)
    "rack_hot": 2,
    "cxl_media_errors": 3,  # on CXL hosts only: an uncorrectable read and its poison, or a threshold (sim/cxl.py)
}
FAULT_KINDS: tuple[FaultKind, ...] = tuple(FAULT_RATES)

# Faults that stop a host's reports. The centre misses only a host it has heard from (remediator.mark_unreachable
# skips a host with no report yet), so the demo gives these an onset (Fault.onset_s) after the first report.
SILENCING: frozenset[FaultKind] = frozenset({"unreachable", "powered_off", "agent_dead"})
# Faults a warm or cold reboot makes go away (a wedged kernel); hardware and configuration stay.
CLEARED_BY_REBOOT: frozenset[FaultKind] = frozenset({"soft_lockups"})
# Software faults a reimage removes: the image brings the class kernel and the fleet's tuning.
CLEARED_BY_REIMAGE: frozenset[FaultKind] = frozenset(
    {
        "soft_lockups",
        "panic",
        "errata_unpatched",
        "cputime_wrap",
        "edac_poll_slow",
        "isolated_irqs",
        "cxl_demotion_disabled",
        "cxl_interleave_default",
        "cxl_promotion_disabled",
    }
)


@dataclass
class Fault:
    kind: FaultKind
    dimm_index: int = 0
    ce_per_s: float = 0.0
    started_at: dt.datetime | None = None
    ppr_success: bool = True  # whether a hard PPR of this DIMM's row repairs it
    disk_index: int | None = None  # chosen by the host when injected, when the fault is a disk's
    variant: str = ""  # e.g. which NVMe critical warning, which PSU
    per_hour: float = 0.0  # rate of the fault's events (lockups, storms, panics, sector growth)
    next_at: dt.datetime | None = None  # when the next event is due
    carry: float = 0.0  # fractional growth not yet shown (counters move in whole steps)
    logged: bool = False  # a one-off fault's SEL entries are written
    onset_s: float = 0.0  # a silencing fault (SILENCING) starts this long after the host's first report
