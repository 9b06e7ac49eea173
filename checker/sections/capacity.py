"""The host's capacity as the OS sees it (class 6, lost capacity): memory, CPUs, disks and NICs, counted
from /proc and /sys. What the board lists (DIMMs from dmidecode) stays in the identity section; the
centre compares both with what the host's hardware class should have (docs/rules.md, "Lost capacity").
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from checker.report_types import Model, NonNegativeInt

MAX_BLOCK_DEVICES = 256
MAX_INTERFACES = 64
MAX_OFFLINE_LISTED = 256


class BlockDevice(Model):
    """A whole disk in /sys/block backed by a device (loop, ram, zram, dm-, md and nbd devices are not)."""

    name: str = Field(max_length=64, description="sda, nvme0n1 …")
    model: str | None = Field(None, max_length=128, description="device/model.")
    serial: str | None = Field(None, max_length=128, description="device/serial (NVMe) or the wwid, if readable.")
    size_sectors: NonNegativeInt | None = Field(None, description="size, in 512-byte sectors.")
    rotational: bool | None = Field(None, description="queue/rotational.")


class Capacity(Model):
    """What the host has now. None in a field: that file could not be read (never 0)."""

    mem_total_kb: NonNegativeInt | None = Field(
        None,
        description="MemTotal of /proc/meminfo: installed memory less what firmware and the kernel reserve at boot "
        "(the struct page array, about 1.6 % of memory, crashkernel, firmware tables): a few per cent below "
        "the DIMMs' sum.",
    )
    cpus_present: NonNegativeInt | None = Field(
        None, description="CPUs in /sys/devices/system/cpu/present: the ones firmware enabled."
    )
    cpus_online: NonNegativeInt | None = Field(None, description="CPUs in /sys/devices/system/cpu/online.")
    cpus_offline: list[NonNegativeInt] = Field(
        default_factory=list,
        max_length=MAX_OFFLINE_LISTED,
        description="Present CPUs that are offline (taken down by a person, mcelog's trigger or offline_cpu).",
    )
    sockets: NonNegativeInt | None = Field(None, description="Distinct 'physical id' of /proc/cpuinfo.")
    cores: NonNegativeInt | None = Field(
        None, description="Distinct (physical id, core id) pairs of /proc/cpuinfo: physical cores online."
    )
    disks: list[BlockDevice] | None = Field(
        None, max_length=MAX_BLOCK_DEVICES, description="Whole disks in /sys/block; None: /sys/block not read."
    )
    nics: list[Annotated[str, Field(max_length=64)]] | None = Field(
        None,
        max_length=MAX_INTERFACES,
        description="Physical network interfaces (/sys/class/net entries with a device link); None: not read.",
    )
