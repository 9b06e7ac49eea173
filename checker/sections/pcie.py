"""The PCIe section of the report: each PCI Express function's link (trained vs capable speed and
width) and its AER counters, with what names it for a technician (slot, class, vendor:device, driver,
the port above it). Filled by checker/collectors/pcie.py from sysfs, or from `lspci -vvv` where the
kernel has no link files.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from checker.report_types import FiniteFloat, Model, NonNegativeInt

MAX_PCIE_DEVICES = 512
MAX_AER_TYPES = 16
Bdf = Annotated[str, Field(max_length=16, pattern=r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")]


class PcieDevice(Model):
    """One PCI Express function as sysfs (or lspci) shows it."""

    bdf: Bdf = Field(description="Domain:bus:device.function, lower case: '0000:03:00.0'.")
    parent: Bdf | None = Field(None, description="The port above it (its link partner); None under the root complex.")
    class_code: str | None = Field(None, max_length=8, description="PCI class, 6 hex digits: '010802' (NVMe).")
    vendor: str | None = Field(None, max_length=4, description="Vendor id, 4 hex digits: '144d'.")
    device: str | None = Field(None, max_length=4, description="Device id, 4 hex digits: 'a808'.")
    name: str | None = Field(None, max_length=200, description="lspci's description, when lspci was read.")
    driver: str | None = Field(None, max_length=64, description="The bound driver: nvme, mlx5_core, pcieport.")
    slot: str | None = Field(None, max_length=64, description="Physical slot name (/sys/bus/pci/slots/*/address).")
    speed_gts: FiniteFloat | None = Field(None, ge=0, description="Trained link speed, GT/s per lane.")
    max_speed_gts: FiniteFloat | None = Field(None, ge=0, description="The function's own capability, GT/s.")
    width: NonNegativeInt | None = Field(None, description="Trained link width, lanes (0: link down).")
    max_width: NonNegativeInt | None = Field(None, description="The function's own capability, lanes.")
    port_max_speed_gts: FiniteFloat | None = Field(
        None, ge=0, description="The capability of the port above it, the link's other end (None: not known)."
    )
    port_max_width: NonNegativeInt | None = Field(None, description="The port's capability, lanes.")
    target_speed_gts: FiniteFloat | None = Field(
        None,
        ge=0,
        description="LnkCtl2 Target Link Speed (lspci, or a port's config space read as root; no sysfs file): on a"
        " root or downstream port the cap a BIOS or driver set on the link below it; on an endpoint only its"
        " compliance speed.",
    )
    port_target_speed_gts: FiniteFloat | None = Field(
        None, ge=0, description="The port's Target Link Speed: the link cannot train faster (None: not known)."
    )
    aer_correctable: NonNegativeInt | None = Field(None, description="aer_dev_correctable TOTAL_ERR_COR since boot.")
    aer_nonfatal: NonNegativeInt | None = Field(None, description="aer_dev_nonfatal TOTAL_ERR_NONFATAL since boot.")
    aer_fatal: NonNegativeInt | None = Field(None, description="aer_dev_fatal TOTAL_ERR_FATAL since boot.")
    aer_types: dict[Annotated[str, Field(max_length=40)], NonNegativeInt] = Field(
        default_factory=dict,
        max_length=MAX_AER_TYPES,
        description="The non-zero per-type counters, 'correctable:RxErr' → count (aer_dev_* lines).",
    )


class PcieState(Model):
    """Only the functions worth a look are listed (checker/parsers/pcie.py `worth_reporting`): those with an
    AER error counted, those whose link runs below what both its ends can do, and the link partners (the
    port above, the functions below) of those; a healthy host's section is a few bytes, and a function not
    listed had no error counted."""

    source: Literal["sysfs", "lspci"]
    functions: NonNegativeInt = Field(0, description="PCIe functions found (listed or not).")
    aer_counters: bool = Field(False, description="The kernel has the aer_dev_* counters (Linux 4.19 on).")
    devices: list[PcieDevice] = Field(default_factory=list, max_length=MAX_PCIE_DEVICES)
    truncated: NonNegativeInt = Field(0, description="Functions left out to keep the report bounded.")
