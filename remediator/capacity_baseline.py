"""What a hardware class should have (the optional `capacity:` block of firmware_baselines.yaml): the
lost-capacity check's configured expectation (docs/rules.md, "Lost capacity"). Where a class has no block,
or the block leaves a measure out, the class's median over its hosts' latest inventories stands in
(remediator/capacity_class.py).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

# MemTotal is what the kernel can hand out: installed memory less the struct page array (64 bytes per
# 4 KiB page, 1.56 %), firmware-reserved ranges (ACPI tables, SMM, the BIOS's own: tens to hundreds of MB)
# and a crashkernel reservation where kdump is set up (256 MiB-1 GiB). The fixed parts weigh most on small
# hosts: a 16 GiB host shows about 15.5 GiB (3.1 % less), a 512 GiB one about 2 % less. 4 % covers both;
# one DIMM of 16 is 6.25 % and one of 24 is 4.2 %, so a lost DIMM still shows. Past 24 DIMMs a lost DIMM
# hides inside the tolerance: the DIMM count (dmidecode) is the check there.
DEFAULT_MEMORY_TOLERANCE_PCT = 4.0

Locator = Annotated[str, StringConstraints(min_length=1, max_length=128)]


class CapacityBaseline(BaseModel):
    """The class's configuration; a measure left out is judged against the class's median."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    memory_gib: float | None = Field(
        None, gt=0, allow_inf_nan=False, description="Installed memory in GiB (the DIMMs' sum, not MemTotal)."
    )
    memory_tolerance_pct: float = Field(
        DEFAULT_MEMORY_TOLERANCE_PCT,
        ge=0,
        le=50,
        description="How far below memory_gib MemTotal may be: the kernel's and firmware's reservations.",
    )
    dimms: int | None = Field(None, ge=0, le=512, description="Populated DIMM slots (dmidecode type 17).")
    dimm_locators: list[Locator] = Field(
        default_factory=list, max_length=512, description="The slots the class fills (their silkscreen locators)."
    )
    cpus: int | None = Field(None, ge=1, le=65536, description="Logical CPUs firmware enables (cpu/present).")
    disks: int | None = Field(None, ge=0, le=4096, description="Whole disks in /sys/block (hot spares included).")
    nics: int | None = Field(None, ge=0, le=1024, description="Physical network interfaces.")
    source: str | None = Field(None, max_length=300, description="Where the figures come from (a bill of materials).")

    def expected(self, measure: str) -> float | None:
        value = getattr(self, measure if measure != "memory" else "memory_gib", None)
        return float(value) if isinstance(value, int | float) else None
