"""The simulated fleet's hardware classes: CPUs, memory, disks, NICs and the firmware they ship with.

Firmware versions here are the fleet's current releases; `remediator/firmware_baselines.yaml`
holds the same numbers as the minimum, so a healthy virtual host is never below its baseline
and a stale-firmware fault runs the `old_*` release. The host side may not import the
remediator, so the few facts both sides need are repeated here as plain constants.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

DATACENTERS = ("ams1", "sjc2", "fra3")

# The kernels of AMD erratum 298 on Opteron rev B2 (INFN/CCR-11/01): the stock SLES 10.2 kernel has
# no fix; INFN Pisa's first build (2.6.23.17-amdpatch) fixed it but reported absurd cputime; the
# corrected build is the one the class baseline names (remediator/firmware_baselines.yaml; the
# report gives it no name, so this one is ours).
OPTERON_PATCHED_KERNEL = "2.6.23.17-amdpatch2"
OPTERON_WITHDRAWN_KERNEL = "2.6.23.17-amdpatch"
OPTERON_STOCK_KERNEL = "2.6.16.60-0.21-smp"
OPTERON_DEMO_KERNEL = "2.6.23.17-amdpatch3"  # the demo's new build, with the cputime bug back (KERNEL_BUILDS)

# cputime_wrap: a process's CPU time in /proc/PID/stat jumps by CPUTIME_WRAP_TICKS (what the cputime watch
# sees). The source gives "~22 Msec"; 2^31 USER_HZ ticks (21,474,836 s) is our reading of that figure.
KernelSideEffect = Literal["cputime_wrap"]
CPUTIME_WRAP_TICKS = 2**31


@dataclass(frozen=True)
class KernelBuild:
    """A simulated kernel build and what is wrong with it beyond its purpose: a host running it shows the
    side effects in its reports (docs/simulated-fleet.md). Add a build here to give a rollout a bad canary."""

    release: str
    hardware_class: str  # the class it was built for
    side_effects: tuple[KernelSideEffect, ...]
    source: str = ""


KERNEL_BUILDS: tuple[KernelBuild, ...] = (
    KernelBuild(
        OPTERON_WITHDRAWN_KERNEL,
        "legacy-opteron-8356",
        ("cputime_wrap",),
        "INFN/CCR-11/01 section 4: only on 2.6.23.17-amdpatch, jobs showed ~22 Msec of cputime",
    ),
    KernelBuild(  # ours, for the demo's staged rollout with a halt (api/demo_baselines.yaml configures it)
        OPTERON_DEMO_KERNEL,
        "legacy-opteron-8356",
        ("cputime_wrap",),
        "ours: a rebuild of the corrected kernel that lost the sign check again (the source's bug, regressed)",
    ),
)


def kernel_side_effects(release: str) -> tuple[KernelSideEffect, ...]:
    return next((b.side_effects for b in KERNEL_BUILDS if b.release == release), ())


def build_with(hardware_class: str, effect: KernelSideEffect) -> str | None:
    """A build of the class with that side effect, if the table has one."""
    return next(
        (b.release for b in KERNEL_BUILDS if b.hardware_class == hardware_class and effect in b.side_effects), None
    )


EDAC_POLL_TUNED_MSEC = 37000  # the design's ~37 s: for drivers whose poll adds up counters
EDAC_POLL_DEFAULT_MSEC = 1000  # the kernel's edac_mc_poll_msec default, right for latching chipset drivers
EDAC_POLL_SLOW_MSEC = 120000  # an old hand tuning left behind (the edac_poll_slow fault)
EDAC_POLL_LATCHED_MAX_MSEC = 10000  # slower than this, a latching driver loses a failing DIMM's rate
SEL_CAPACITY = 1024  # entries the BMC's SEL holds


@dataclass(frozen=True)
class DiskSpec:
    device: str
    protocol: Literal["ATA", "NVMe", "SCSI"]
    model: str
    firmware: str
    rotational: bool


@dataclass(frozen=True)
class GpuSpec:
    """One NVIDIA GPU of a class: where it sits and what it is (nvidia-smi -q -x names it so)."""

    bdf: str  # nvidia-smi's 8-digit domain form, 00000000:07:00.0
    product: str
    vbios: str
    driver: str
    slowdown_c: int  # the GPU's own slowdown and shutdown temperatures (nvidia-smi temperature thresholds)
    shutdown_c: int
    power_limit_w: float


# A 2-socket Ice Lake host with 8 A100 SXM4 80GB on an HGX board (Supermicro SYS-420GP-TNAR); the BDFs are
# those a DGX A100 gives its 8 GPUs. Driver and VBIOS as in the A100 sample (nvidia-smi v12, 535.x).
_A100_BDFS = ("07", "0F", "47", "4E", "87", "90", "B7", "BD")
A100_GPUS = tuple(
    GpuSpec(f"00000000:{bus}:00.0", "NVIDIA A100-SXM4-80GB", "92.00.45.00.03", "535.129.03", 92, 95, 400.0)
    for bus in _A100_BDFS
)


@dataclass(frozen=True)
class HardwareClass:
    name: str
    cpu_vendor: str
    cpu_family: int
    cpu_model: int
    cpu_stepping: int
    microcode: int
    model_name: str
    sockets: int
    channels: int  # DIMMs per socket
    dimm_size_mb: int
    mem_type: str
    edac_driver: str
    bios_version: str
    bmc_firmware: str
    old_bios_version: str  # what a host that missed the last rollout still runs
    old_bmc_firmware: str
    bios_vendor: str
    system_manufacturer: str
    system_product: str
    logical_cpus: int  # kept modest so per-CPU interrupt rows stay small
    kernel: str  # the class's image kernel (uname -r)
    nic_driver: str
    nic_firmware: str
    nic_interfaces: tuple[str, ...]
    disks: tuple[DiskSpec, ...]
    cxl_nodes: int = 0  # CPU-less NUMA nodes backed by CXL memory expanders
    cxl_node_mb: int = 0
    gpus: tuple[GpuSpec, ...] = ()  # NVIDIA GPUs, in nvidia-smi's index order (checker/sim/gpu.py)
    # How its agent reads the BMC and the centre acts on it: "redfish" classes report the `redfish` section and
    # their log entries as Redfish LogEntry resources of `bmc_vendor`'s service (checker/sim/redfish.py).
    bmc_protocol: Literal["ipmi", "redfish"] = "ipmi"
    bmc_vendor: Literal["", "dell", "supermicro"] = ""

    @property
    def intel(self) -> bool:
        return self.cpu_vendor == "GenuineIntel"

    @property
    def weighted_interleave(self) -> bool:
        """Weighted interleave exists from Linux 6.9."""
        major, minor = (int(x) for x in self.kernel.split(".")[:2])
        return (major, minor) >= (6, 9)


def default_weights(hardware: HardwareClass, *, tuned: bool) -> dict[str, int]:
    """Weighted-interleave weights per NUMA node: 5:1 local DRAM to CXL when tuned (TPP's finding;
    the kernel's default 1:1 cost 44%), all 1 when left alone."""
    nodes = hardware.sockets + hardware.cxl_nodes
    return {str(n): (5 if tuned and n < hardware.sockets else 1) for n in range(nodes)}


_PM983 = DiskSpec("/dev/nvme0", "NVMe", "SAMSUNG MZQLB1T9HAJR-00007", "EDA5202Q", rotational=False)
_MICRON_7450 = DiskSpec("/dev/nvme0", "NVMe", "Micron_7450_MTFDKCB3T8TFR", "E2MU200", rotational=False)
_KIOXIA_CM6 = DiskSpec("/dev/nvme0", "NVMe", "KIOXIA KCM6XRUL3T84", "0107", rotational=False)


def _second(spec: DiskSpec, device: str) -> DiskSpec:
    return DiskSpec(device, spec.protocol, spec.model, spec.firmware, spec.rotational)


HARDWARE_CLASSES = (
    HardwareClass(
        name="compute-skx-2s",
        cpu_vendor="GenuineIntel",
        cpu_family=6,
        cpu_model=85,
        cpu_stepping=4,
        microcode=0x2007006,
        model_name="Intel(R) Xeon(R) Gold 6138 CPU @ 2.00GHz",
        sockets=2,
        channels=6,
        dimm_size_mb=32768,
        mem_type="DDR4",
        edac_driver="skx_edac",
        bios_version="2.10.2",
        bmc_firmware="4.40.40.40",
        old_bios_version="2.9.4",
        old_bmc_firmware="4.00.00.00",
        bios_vendor="Dell Inc.",
        system_manufacturer="Dell Inc.",
        system_product="PowerEdge R640",
        logical_cpus=16,
        kernel="6.1.0-28-amd64",
        nic_driver="mlx5_core",
        nic_firmware="16.35.2000 (DEL0000000015)",
        nic_interfaces=("ens1f0np0", "ens1f1np1"),
        disks=(_PM983, _second(_PM983, "/dev/nvme1")),
    ),
    HardwareClass(
        name="compute-icx-2s",
        cpu_vendor="GenuineIntel",
        cpu_family=6,
        cpu_model=106,
        cpu_stepping=6,
        microcode=0xD0003A5,
        model_name="Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz",
        sockets=2,
        channels=8,
        dimm_size_mb=32768,
        mem_type="DDR4",
        edac_driver="i10nm_edac",
        bios_version="1.9.2",
        bmc_firmware="6.10.30.00",
        old_bios_version="1.6.5",
        old_bmc_firmware="5.10.50.00",
        bios_vendor="Dell Inc.",
        system_manufacturer="Dell Inc.",
        system_product="PowerEdge R650",
        logical_cpus=16,
        kernel="6.1.0-28-amd64",
        nic_driver="mlx5_core",
        nic_firmware="22.36.1010 (DEL0000000027)",
        nic_interfaces=("ens2f0np0", "ens2f1np1"),
        disks=(_MICRON_7450, _second(_MICRON_7450, "/dev/nvme1")),
        bmc_protocol="redfish",  # iDRAC9 (the R650 of the Redfish samples in shared/fixtures/redfish)
        bmc_vendor="dell",
    ),
    HardwareClass(
        name="storage-epyc-1s",
        cpu_vendor="AuthenticAMD",
        cpu_family=25,
        cpu_model=1,
        cpu_stepping=1,
        microcode=0xA0011D1,
        model_name="AMD EPYC 7443P 24-Core Processor",
        sockets=1,
        channels=8,
        dimm_size_mb=65536,
        mem_type="DDR4",
        edac_driver="amd64_edac",
        bios_version="2.8.4",
        bmc_firmware="2.13",
        old_bios_version="2.6.6",
        old_bmc_firmware="2.08",
        bios_vendor="American Megatrends International, LLC.",
        system_manufacturer="Supermicro",
        system_product="AS -1114S-WN10RT",
        logical_cpus=16,
        kernel="6.1.0-28-amd64",
        nic_driver="i40e",
        nic_firmware="8.70 0x8000c3d5 1.3179.0",
        nic_interfaces=("enp65s0f0", "enp65s0f1"),
        disks=(
            DiskSpec("/dev/sda", "ATA", "ST16000NM001G-2KK103", "SN03", rotational=True),
            DiskSpec("/dev/sdb", "ATA", "ST16000NM001G-2KK103", "SN03", rotational=True),
            DiskSpec("/dev/sdc", "ATA", "ST16000NM001G-2KK103", "SN03", rotational=True),
            DiskSpec("/dev/sdd", "SCSI", "SEAGATE ST1200MM0088", "N004", rotational=True),
        ),
        bmc_protocol="redfish",  # an H12 board's BMC (Supermicro's Redfish, as in the X10SDV samples)
        bmc_vendor="supermicro",
    ),
    HardwareClass(
        name="legacy-opteron-8356",
        cpu_vendor="AuthenticAMD",
        cpu_family=16,
        cpu_model=2,
        cpu_stepping=2,
        microcode=0x1000065,
        model_name="Quad-Core AMD Opteron(tm) Processor 8356",
        sockets=4,
        channels=4,
        dimm_size_mb=4096,
        mem_type="DDR2",
        edac_driver="amd64_edac",
        bios_version="1.3.7",
        bmc_firmware="1.60",
        old_bios_version="1.2.1",
        old_bmc_firmware="1.27",
        bios_vendor="Phoenix Technologies LTD",
        system_manufacturer="Supermicro",
        system_product="H8QMi-2",
        logical_cpus=16,
        kernel=OPTERON_PATCHED_KERNEL,
        nic_driver="e1000e",
        nic_firmware="5.11-2",
        nic_interfaces=("eth0",),
        disks=(DiskSpec("/dev/sda", "ATA", "ST3500418AS", "CC38", rotational=True),),
    ),
    HardwareClass(
        name="edge-xeon-e",
        cpu_vendor="GenuineIntel",
        cpu_family=6,
        cpu_model=158,
        cpu_stepping=10,
        microcode=0xF4,
        model_name="Intel(R) Xeon(R) E-2236 CPU @ 3.40GHz",
        sockets=1,
        channels=4,  # 2 channels x 2 DIMMs of unbuffered ECC DDR4
        dimm_size_mb=16384,
        mem_type="DDR4",
        edac_driver="ie31200_edac",  # a chipset driver that polls: edac_mc_poll_msec matters here
        bios_version="2.3",
        bmc_firmware="1.73.14",
        old_bios_version="1.9",
        old_bmc_firmware="1.52.2",
        bios_vendor="American Megatrends Inc.",
        system_manufacturer="Supermicro",
        system_product="X11SCL-F",
        logical_cpus=12,
        kernel="6.1.0-28-amd64",
        nic_driver="igb",
        nic_firmware="3.25, 0x800005d0",
        nic_interfaces=("eno1", "eno2"),
        disks=(DiskSpec("/dev/sda", "ATA", "INTEL SSDSC2KB480G8", "XCV10132", rotational=False),),
    ),
    HardwareClass(
        name="compute-spr-cxl",
        cpu_vendor="GenuineIntel",
        cpu_family=6,
        cpu_model=143,
        cpu_stepping=8,
        microcode=0x2B000590,
        model_name="Intel(R) Xeon(R) Platinum 8480+",
        sockets=2,
        channels=8,
        dimm_size_mb=65536,
        mem_type="DDR5",
        edac_driver="i10nm_edac",
        bios_version="2.3.6",
        bmc_firmware="7.10.50.00",
        old_bios_version="1.6.6",
        old_bmc_firmware="6.10.80.00",
        bios_vendor="Dell Inc.",
        system_manufacturer="Dell Inc.",
        system_product="PowerEdge R760",
        logical_cpus=16,
        kernel="6.12.12-amd64",
        nic_driver="mlx5_core",
        nic_firmware="28.39.1002 (DEL0000000031)",
        nic_interfaces=("ens3f0np0", "ens3f1np1"),
        disks=(_KIOXIA_CM6, _second(_KIOXIA_CM6, "/dev/nvme1")),
        cxl_nodes=2,
        cxl_node_mb=131072,
    ),
    HardwareClass(
        name="gpu-a100-8x",
        cpu_vendor="GenuineIntel",
        cpu_family=6,
        cpu_model=106,
        cpu_stepping=6,
        microcode=0xD0003A5,
        model_name="Intel(R) Xeon(R) Platinum 8380 CPU @ 2.30GHz",
        sockets=2,
        channels=8,
        dimm_size_mb=65536,
        mem_type="DDR4",
        edac_driver="i10nm_edac",
        bios_version="1.4a",
        bmc_firmware="01.01.10",
        old_bios_version="1.1",
        old_bmc_firmware="01.00.25",
        bios_vendor="American Megatrends International, LLC.",
        system_manufacturer="Supermicro",
        system_product="SYS-420GP-TNAR",
        logical_cpus=16,
        kernel="6.1.0-28-amd64",
        nic_driver="mlx5_core",
        nic_firmware="22.36.1010 (MT_0000000540)",
        nic_interfaces=("ens21f0np0", "ens21f1np1"),
        disks=(_MICRON_7450, _second(_MICRON_7450, "/dev/nvme1")),
        gpus=A100_GPUS,
    ),
)
