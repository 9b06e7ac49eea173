"""The `gpu_xid` fault of a virtual GPU host: the NVIDIA driver's Xid lines in its kernel log, in the
driver's wording as the corpus's gpu/dmesg-* samples show it (read back through the real classifier).

Variants:
- `dbe`: the GPU names itself ("GPU at PCI:…: GPU-uuid", "GPU Board Serial Number"), then Xid 48 (a
  double-bit ECC error in its memory) and the Xid 94 run that stopped the application on it (a headline,
  then one line per channel), as in gpu/dmesg-iso-xid-48-dbe-63-…; nvidia-smi's aggregate uncorrected
  count grows by one. No Xid 63 and no pending remap in nvidia-smi; a GPU reset (gpu-xid-dbe) remaps the
  row and clears the fault (checker/sim/gpu.py reset_gpu).
- `fallen_off_bus`: Xid 79 and the driver's "GPU has fallen off the bus" line. Only a cold power cycle
  brings the GPU back (`power_cycled`); a warm reboot does not. nvidia-smi still lists the GPU (the
  simulated tool does not model a GPU it cannot reach).
- `app`: an application's own faults, Xid 13 and 31 and the Xid 45 cleanup after them: counted, nothing
  for the fleet to do.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from checker.sim.gpu import gpus_of
from checker.sim.logs import KERN_WARNING

if TYPE_CHECKING:
    from checker.sim.faults import Fault
    from checker.sim.gpu import SimGpu
    from checker.sim.host import VirtualHost

VARIANTS = ("dbe", "app", "fallen_off_bus")  # by the fault's DIMM index: fleet.fault(kind) gives dbe
KERN_ERR = 3


def _pci(gpu: SimGpu) -> str:
    """The driver's "0000:07:00" for nvidia-smi's 00000000:07:00.0."""
    return "0000:" + gpu.spec.bdf.split(":", 1)[1].rsplit(".", 1)[0].lower()


def _gpu(host: VirtualHost, fault: Fault) -> SimGpu:
    gpus = gpus_of(host)
    return gpus[fault.dimm_index % len(gpus)]


def lines(host: VirtualHost, fault: Fault) -> list[tuple[int, str]]:
    """What the driver prints for the fault, in its wording."""
    gpu = _gpu(host, fault)
    pci = _pci(gpu)
    pid = host.rng.randrange(2000, 4_000_000)
    named = [
        (KERN_WARNING, f"NVRM: GPU at PCI:{pci}: {gpu.uuid}"),
        (KERN_WARNING, f"NVRM: GPU Board Serial Number: {gpu.serial}"),
    ]
    if fault.variant == "fallen_off_bus":
        return [
            *named,
            (KERN_ERR, f"NVRM: Xid (PCI:{pci}): 79, pid={pid}, name=python3, GPU has fallen off the bus."),
            (KERN_ERR, f"NVRM: GPU {pci}.0: GPU has fallen off the bus."),
        ]
    if fault.variant == "app":
        unknown = "pid='<unknown>', name=<unknown>"
        return [
            *named,
            (KERN_WARNING, f"NVRM: Xid (PCI:{pci}): 13, pid={pid}, name=python3, Graphics SM Warp Exception on "
                           "(GPC 2, TPC 0, SM 1): Out Of Range Address"),
            (KERN_WARNING, f"NVRM: Xid (PCI:{pci}): 31, pid={pid}, name=python3, Ch 00000010, intr 00000000. MMU "
                           "Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f3a_5c000000. Fault is of type "
                           "FAULT_PDE ACCESS_TYPE_VIRT_READ"),
            *[(KERN_WARNING, f"NVRM: Xid (PCI:{pci}): 45, {unknown}, Ch {ch:08x}") for ch in range(8, 12)],
        ]  # fmt: skip
    address = host.rng.getrandbits(36) & ~0x1F
    unknown = "pid='<unknown>', name=<unknown>"
    return [
        *named,
        (KERN_ERR, f"NVRM: Xid (PCI:{pci}): 48, {unknown}, An uncorrectable double bit error (DBE) has been detected "
                   f"on GPU in the framebuffer at physAddr 0x{address:x} partition 2, subpartition 1."),
        (KERN_ERR, f"NVRM: Xid (PCI:{pci}): 94, {unknown}, Contained: SM (0x1). RST: No, D-RST: No"),
        *[(KERN_ERR, f"NVRM: Xid (PCI:{pci}): 94, pid={pid}, name=python3, Ch {ch:08x}") for ch in range(8, 16)],
    ]  # fmt: skip


def progress(host: VirtualHost, fault: Fault, now: dt.datetime) -> None:
    """The driver's lines, once, in the report after the fault began."""
    if fault.logged:
        return
    fault.logged = True
    if fault.variant == "dbe":
        _gpu(host, fault).aggregate_unc += 1
    host.log(now, lines(host, fault))


def power_cycled(host: VirtualHost) -> list[str]:
    """A cold power cycle brings a GPU that fell off the bus back; the fault's other variants stay."""
    if any(f.kind == "gpu_xid" and f.variant == "fallen_off_bus" for f in host.faults):
        return host.clear({"gpu_xid"})
    return []
