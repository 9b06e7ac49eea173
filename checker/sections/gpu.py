"""The GPU section: what `nvidia-smi -q -x` says of each NVIDIA GPU (identity, ECC, retired pages,
remapped rows, temperature, power, clock-event reasons), for the GPU rules (remediator/derive/gpu.py).

Every field the tool prints as N/A (not supported, not enabled, not visible in a VM or under MIG) is
None here: unknown, never 0 and never healthy.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from checker.report_types import FiniteFloat, Model, NonNegativeInt, Timestamp

MAX_GPUS = 64
MAX_DIAG_TESTS = 64
MAX_DIAG_WARNINGS = 64


class GpuEcc(Model):
    """ECC mode and error counts. Totals add up what the GPU's layout reports: legacy single/double-bit
    (Pascal, Volta: the `total` row) or Ampere's SRAM and DRAM counters."""

    mode: str | None = Field(None, max_length=32, description="current_ecc: Enabled or Disabled (None: N/A).")
    pending_mode: str | None = Field(None, max_length=32, description="pending_ecc: the mode after the next reset.")
    layout: str | None = Field(None, max_length=16, description="legacy (single/double-bit) or sram_dram (Ampere+).")
    volatile_corrected: NonNegativeInt | None = Field(None, description="Since the driver loaded.")
    volatile_uncorrected: NonNegativeInt | None = None
    aggregate_corrected: NonNegativeInt | None = Field(None, description="Over the GPU's life (inforom).")
    aggregate_uncorrected: NonNegativeInt | None = None
    aggregate_dram_uncorrected: NonNegativeInt | None = Field(None, description="Ampere+: the DRAM part.")


class GpuMemoryRepair(Model):
    """Page retirement (before Ampere) and row remapping (Ampere and later)."""

    retired_single_bit: NonNegativeInt | None = Field(None, description="Pages retired for repeated single-bit errors.")
    retired_double_bit: NonNegativeInt | None = Field(None, description="Pages retired for double-bit errors.")
    retirement_pending: bool | None = Field(
        None, description="pending_retirement or pending_blacklist: retired at the next reset/driver reload."
    )
    remapped_corrected: NonNegativeInt | None = Field(None, description="Rows remapped for correctable errors.")
    remapped_uncorrected: NonNegativeInt | None = Field(None, description="Rows remapped for uncorrectable errors.")
    remap_pending: bool | None = Field(None, description="A remap waits for a GPU reset to take effect.")
    remap_failure: bool | None = Field(None, description="A row could not be remapped (no spare rows left).")
    banks_without_spare: NonNegativeInt | None = Field(
        None, description="row_remapper_histogram_none: memory banks with no spare row left."
    )
    bank_histogram: dict[Annotated[str, Field(max_length=8)], NonNegativeInt] | None = Field(
        None,
        max_length=5,
        description="row_remapper_histogram: banks by spare rows left (max, high, partial, low, none); the "
        "ticket's and the reset's record (None: N/A).",
    )


class Gpu(Model):
    index: NonNegativeInt = Field(description="nvidia-smi's index (-i N): the GPU's position in the tool's output.")
    bdf: str = Field(max_length=32, description="PCI bus id as nvidia-smi prints it (00000000:07:00.0).")
    uuid: str | None = Field(None, max_length=64)
    serial: str | None = Field(None, max_length=64, description="Board serial (None: N/A).")
    product: str | None = Field(None, max_length=128)
    part_number: str | None = Field(None, max_length=64, description="Board part number.")
    vbios: str | None = Field(None, max_length=64)
    minor_number: NonNegativeInt | None = Field(None, description="/dev/nvidiaN.")
    module_id: NonNegativeInt | None = Field(None, description="The SXM module position on an HGX board.")
    mig_mode: str | None = Field(None, max_length=32)
    ecc: GpuEcc = Field(default_factory=GpuEcc)
    memory_repair: GpuMemoryRepair = Field(default_factory=GpuMemoryRepair)
    reset_required: bool | None = Field(None, description="gpu_reset_status: the driver asks for a reset.")
    drain_and_reset_recommended: bool | None = None
    recovery_action: str | None = Field(
        None,
        max_length=64,
        description="v13 gpu_recovery_action: GPU Reset Required, Node Reboot Required, Drain P2P, Drain and Reset "
        "(None: none asked for, or not reported).",
    )
    temperature_c: FiniteFloat | None = None
    slowdown_c: FiniteFloat | None = Field(None, description="The GPU slows itself down from this temperature.")
    shutdown_c: FiniteFloat | None = Field(None, description="The GPU shuts down at this temperature.")
    tlimit_c: FiniteFloat | None = Field(
        None, description="v13: degrees left below the maximum operating temperature (T.Limit)."
    )
    slowdown_tlimit_c: FiniteFloat | None = Field(
        None, description="v13: the T.Limit reading at which slowdown begins."
    )
    memory_temperature_c: FiniteFloat | None = None
    memory_max_c: FiniteFloat | None = None
    power_draw_w: FiniteFloat | None = None
    power_limit_w: FiniteFloat | None = None
    clock_event_reasons: list[Annotated[str, Field(max_length=64)]] | None = Field(
        None,
        max_length=32,
        description="Active clocks throttle (event) reasons: hw_slowdown, hw_thermal_slowdown, "
        "hw_power_brake_slowdown, sw_thermal_slowdown, sw_power_cap, gpu_idle … (None: not reported).",
    )


class MissingGpu(Model):
    """An NVIDIA display controller sysfs lists that nvidia-smi does not (not one bound to vfio-pci: passed to a VM)."""

    bdf: str = Field(max_length=32, description="sysfs's address (0000:3b:00.0).")
    device_id: str | None = Field(None, max_length=16, description="sysfs `device` (0x20b2).")
    driver: str | None = Field(None, max_length=64, description="The driver bound to it (None: none bound).")


DiagKind = Literal["memory", "pcie", "nvlink", "compute", "power", "deployment", "other"]


class DcgmWarning(Model):
    """One Warning row of a `dcgmi diag` test, its wrapped lines joined."""

    gpu: NonNegativeInt | None = Field(None, description="The GPU index the text names ('GPU 3 …'); None: none named.")
    text: str = Field(max_length=1000)


class DcgmTest(Model):
    """One test's row of a `dcgmi diag` table (checker/parsers/dcgmi_diag.py)."""

    name: str = Field(max_length=64, description="As dcgmi prints it: 'GPU Memory', 'PCIe', 'Targeted Stress'.")
    group: str | None = Field(
        None, max_length=32, description="Its table section: Deployment, Integration, Hardware, Stress."
    )
    kind: DiagKind = Field(description="What it exercises: memory, pcie, nvlink, compute, power, deployment, other.")
    result: Literal["pass", "fail", "warn", "skip", "other"]
    result_text: str = Field(max_length=64, description="'Fail - All', 'Pass', 'Skip - All', 'Fail - GPU: 3'.")
    gpus: list[NonNegativeInt] | None = Field(
        None, max_length=MAX_GPUS, description="The GPUs the result names; None: All, or none named."
    )
    could_not_run: bool = Field(
        False,
        description="A failure whose warnings say the test could not start (CUDA would not initialise: "
        "cuInit, 'system not yet initialized', the fabric manager not running): a setup fault, not the hardware's.",
    )
    warnings: list[DcgmWarning] = Field(default_factory=list, max_length=MAX_DIAG_WARNINGS)


class DcgmDiag(Model):
    """The output of a `dcgmi diag` run the site left for the agent (fleetfix runs none: docs/gpus.md)."""

    dcgm_version: str | None = Field(None, max_length=32)
    driver_version: str | None = Field(None, max_length=64)
    tests: list[DcgmTest] = Field(default_factory=list, max_length=MAX_DIAG_TESTS)
    info: list[Annotated[str, Field(max_length=1000)]] = Field(default_factory=list, max_length=16)
    first_seen: Timestamp | None = Field(None, description="When the agent first read this output: the run's age.")
    written_at: Timestamp | None = Field(
        None,
        description="The file's modification time (null: the host could not say): when the run's table was written, "
        "which a lost agent state does not reset as it does first_seen.",
    )
    replaced_gpus: list[Annotated[int, Field(ge=0)]] = Field(
        default_factory=list,
        max_length=64,
        description="nvidia-smi indices whose board serial differs from the one at that index when the agent first "
        "read this output: the run tested another board there.",
    )
    run_serials: dict[Annotated[int, Field(ge=0)], Annotated[str, Field(max_length=64)]] | None = Field(
        None,
        max_length=64,
        description="The board serial at each nvidia-smi index when the agent first read this output, so a result "
        "is credited by board, not by an index a renumbering moved (review r7, finding 4). Null: the boards at run "
        "time are not known (first read more than DIAG_BOARDS_KNOWN_WITHIN after the file was written, its mtime "
        "unknown, no serial read, or an older agent): only All GPUs' results are credited.",
    )


class GpuState(Model):
    source: str = Field("nvidia-smi", max_length=32)
    driver_version: str | None = Field(None, max_length=64)
    cuda_version: str | None = Field(None, max_length=32)
    attached_gpus: NonNegativeInt | None = Field(None, description="What the driver counts (may exceed `gpus`).")
    gpus: list[Gpu] = Field(default_factory=list, max_length=MAX_GPUS)
    missing: list[MissingGpu] = Field(
        default_factory=list,
        max_length=MAX_GPUS,
        description="NVIDIA GPUs on the PCI bus (sysfs) that nvidia-smi does not list; vfio-pci-bound ones left out.",
    )
    diag: DcgmDiag | None = Field(
        None, description="The last `dcgmi diag` output the site left in DCGM_DIAG_FILE (checker/collectors/gpu.py)."
    )
