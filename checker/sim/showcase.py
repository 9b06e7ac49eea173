"""What the demo (`fleetfix up --simulate N`, `SimulatedFleet(showcase=True)`) must show within its first five
minutes, and the few ways its faults differ from the fleet's ordinary ones so that they show in that time.

FAMILIES names every family of the default pack (remediator/default_rules.yaml) by the rule ids that belong to
it, in the groups docs/rules.md documents them under; tests/remediator/test_sim_demo.py holds that each id is a
rule of the pack and that a rule of each family decides within the demo's first five minutes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from checker.sim.faults import SILENCING, Fault, FaultKind

if TYPE_CHECKING:
    from checker.sim.host import VirtualHost

FAMILIES: dict[str, tuple[str, ...]] = {
    "memory: CE storm": ("dimm-ce-storm", "cmci-storm", "cmci-storm-unattributed", "dimm-ce-too-fast-for-ppr"),
    "memory: PPR": ("dimm-ce-ppr",),
    "memory: UE": ("dimm-uncorrectable", "sel-memory-uncorrectable", "mce-memory-uncorrected"),
    "disks": (
        "disk-smart-failing",
        "disk-reallocated-growing",
        "disk-pending-growing",
        "disk-grown-defects-growing",
        "nvme-media-errors-growing",
        "nvme-critical-warning",
        "nvme-spare-low",
        "nvme-temperature",
    ),
    "PSU and feed": ("psu-failure", "psu-input-lost", "power-unit-fault", "sensor-critical-power"),
    "firmware": ("firmware-below-baseline", "microcode-below-baseline"),
    "errata rollout": ("errata-unpatched-kernel", "errata-no-patched-kernel", "cputime-exceeds-elapsed"),
    "lockups and panics": (
        "kernel-panic",
        "kernel-panic-repeated",
        "hardware-fatal-panic",
        "soft-lockups",
        "hard-lockup",
    ),
    "IRQs on isolated cores": ("isolated-core-irqs", "irq-affinity-isolated", "isolated-core-tlb-shootdowns"),
    "CXL": (
        "cxl-demotion-disabled",
        "cxl-numa-balancing-tiering",
        "cxl-numa-balancing-off",
        "cxl-interleave-mismatch",
        "cxl-interleave-default",
        "cxl-poison",
        "cxl-poison-external",
        "cxl-media-uncorrectable",
        "cxl-media-service",
        "cxl-device-error",
    ),
    "network": (
        "nic-link-flapping",
        "nic-link-flapping-redundant",
        "nic-crc-errors",
        "nic-carrier-flapping",
        "nic-carrier-flapping-redundant",
        "nic-errors-every-port",
    ),
    "PCIe": ("pcie-aer-uncorrected", "pcie-aer-corrected", "pcie-link-downtrained"),
    "GPU": (
        "gpu-row-remap-pending",
        "gpu-row-remap-failure",
        "gpu-xid-dbe",
        "gpu-xid-reset",
        "gpu-xid-reboot",
        "gpu-fallen-off-bus",
        "gpu-xid-contained-repeated",
    ),
    "CPU machine checks": ("mce-cpu-uncorrected", "mce-cpu-core-corrected", "mce-cpu-shared-corrected"),
    "memory pages": ("page-ce-soft-offline", "dimm-offlined-pages"),
    "lost capacity": (
        "capacity-dimm-missing",
        "capacity-memory-missing",
        "capacity-cpu-missing",
        "capacity-disk-missing",
        "capacity-nic-missing",
        "sel-memory-disabled",
    ),
    "OS and filesystems": ("fs-readonly", "fs-errors", "oom-kills-repeated", "oom-host-wide"),
    "heat and hot racks": (
        "sensor-critical-temperature",
        "sensor-critical-temperature-nr",
        "cpu-package-throttling",
        "thermal-throttling",
    ),
    "the BMC's own evidence (Redfish)": (
        "firmware-below-baseline-redfish",
        "bmc-dimm-ce-rate",
        "bmc-dimm-uncorrectable",
        "bmc-dimm-ce-alarm",
        "sel-memory-correctable",
        "sel-critical-interrupt",
        "sel-temperature-high",
    ),
    "SEL": ("sel-flood", "sel-full"),
    "silent hosts": ("host-hung", "host-powered-off", "agent-silent", "host-unreachable-unconfirmed"),
    "SMIs and stalls": (
        "smi-firmware-first-left",
        "smi-storm-no-errors",
        "corrected-errors-ignored",
        "all-core-stalls",
        "all-core-stalls-not-smi",
    ),
    "benchmarks": ("benchmark-outlier",),
}

# Periodic faults whose rules count events over a day: the demo's host has them often enough that the count
# is reached in its first minutes (warm-up included: checker/sim/fleet.py WARM_UP), not after hours.
# mce-cpu-core-corrected wants 18 in a day: at 40 an hour the warm-up's 35 minutes bring about 23.
CPU_CE_PER_HOUR = 40.0
# page-ce-soft-offline wants 10 corrected errors on one page in a day: a weak cell correcting every 2.5 minutes.
PAGE_CES_PER_HOUR = 24.0
# nic-crc-errors wants three times the BER allowance in the last hour (270 at 25 Gb/s): the centre knows only the
# warm-up's 35 minutes and what came since, so the demo's dirty optic sits at the top of the fleet's draw (300-800).
NIC_CRC_PER_HOUR = 700.0
# kernel-panic-repeated (a reimage, which waits for a person's approval) wants a second panic: a crash-looping
# host panics every 10-30 minutes (events.py draws each period at 0.5-1.5 x the mean), so twice in the warm-up.
PANICS_PER_HOUR = 3.0


# The demo's host left firmware-first gets a BIOS that does not take the setting: its first action (restore_cmci,
# smi-firmware-first-left's) fails (VirtualHost.fail_next_action), so the demo shows a fix that fails and
# escalates to its ticket within minutes; every other fix works or fails as the host's faults say.
FAILS_FIRST: frozenset[FaultKind] = frozenset({"firmware_first_left"})


def fits(host: VirtualHost, kind: FaultKind) -> bool:
    """Whether the demo gives `kind` to this host: a BMC too old goes to a Redfish host, where it shows the
    BMC's own evidence (firmware-below-baseline-redfish; `adjust`)."""
    if kind == "firmware_old_bmc":
        return host.hardware.bmc_protocol == "redfish"
    return True


def adjust(fault: Fault) -> Fault:
    """The demo's version of a fault drawn for it (no draw: the fleet's random stream stays the same)."""
    if fault.kind == "firmware_old_bmc":
        # a Redfish-managed host without in-band IPMI (no ipmi_si, no /dev/ipmi0: `ipmitool mc info` fails), so
        # the BMC's version is the one its Redfish FirmwareInventory serves (checker/sim/render.py)
        fault.variant = NO_INBAND_IPMI
    elif fault.kind == "dimm_ce_page":
        fault.per_hour = max(fault.per_hour, PAGE_CES_PER_HOUR)
    elif fault.kind == "nic_crc_errors" and fault.variant in ("crc", "every_port"):
        fault.per_hour = max(fault.per_hour, NIC_CRC_PER_HOUR)
    elif fault.kind in SILENCING:
        fault.onset_s = SILENCE_ONSET_S  # the centre hears from the host first, then misses it
    elif fault.kind == "cpu_core_errors":
        fault.per_hour = max(fault.per_hour, CPU_CE_PER_HOUR)
    elif fault.kind == "panic":
        fault.per_hour = max(fault.per_hour, PANICS_PER_HOUR)
    return fault


NO_INBAND_IPMI = "no_inband_ipmi"  # Fault.variant of firmware_old_bmc: the host cannot read its BMC's version
SILENCE_ONSET_S = 120.0  # a demo host that goes silent does so two minutes after its first report


@dataclass(frozen=True)
class Highlight:
    """A host of the demo worth looking at first, and what it shows."""

    hostname: str
    datacenter: str
    what: str


# What the start-up guide points at, in its order: (fault kind, what a person sees of it).
HIGHLIGHTS: tuple[tuple[FaultKind, str], ...] = (
    ("dimm_ce_storm", "a DIMM ticket (a CE storm on {dimm}): claim it, resolve it with a new serial"),
    ("panic", "a reimage waiting for approval (it panicked twice)"),
    ("firmware_first_left", "a fix that failed (restore_cmci) and escalated to a ticket"),
    ("errata_unpatched", "the errata kernel's staged rollout, canary first"),
)


def highlights(hosts: list[VirtualHost]) -> list[Highlight]:
    """The first host of each kind HIGHLIGHTS names, as the fleet has them."""
    found = []
    for kind, what in HIGHLIGHTS:
        for host in hosts:
            fault = next((f for f in host.faults if f.kind == kind), None)
            if fault is not None:
                dimm = host.dimms[fault.dimm_index].locator if host.dimms else ""
                found.append(Highlight(host.hostname, host.datacenter, what.format(dimm=dimm)))
                break
    return found
