"""What a failing disk makes the kernel print: a read it could not return, in the corpus's wording
(checker/sim/logs.py). A disk ticket shows these lines (remediator/evidence.py matches the kernel's device name
to the disk's serial)."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from checker.sim import logs

if TYPE_CHECKING:
    from checker.sim.host import SimDisk, VirtualHost


def read_error(host: VirtualHost, disk: SimDisk, at: dt.datetime) -> None:
    """What the kernel prints for a read the disk could not return (SATA and NVMe; a SAS disk's sense lines are
    not modelled); the sector is drawn from the host's generator."""
    dev = disk.spec.device.removeprefix("/dev/")
    sector = host.rng.randrange(1 << 20, 1 << 34) & ~7
    if disk.spec.protocol == "NVMe":
        host.log(at, logs.nvme_read_error(host.kernel, f"{dev}n1", sector))
    elif disk.spec.protocol == "ATA":
        port = host.disks.index(disk)
        host.log(at, logs.ata_read_error(host.kernel, port, dev, sector, host.rng.randrange(32)))
