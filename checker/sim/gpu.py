"""The NVIDIA GPUs of a virtual host (classes with `gpus`, checker/sim/hardware.py): their state, the
`nvidia-smi -q -x` document the real tool would print for them (v12 DTD, the A100 sample's layout), read
back through the real parser, and the fault and action that change them.

- `gpu_remap_pending` (variant `pending`): an uncorrectable DRAM error on one GPU; the row remapper marks
  its row for remapping (nvidia-smi: remapped_row_unc + 1, remapped_row_pending Yes; the kernel log:
  Xid 63 in the driver's wording, as in the corpus's dmesg sample). A GPU reset applies it.
- the same kind, variant `failure`: the bank had no spare row left (remapped_row_failure Yes, one bank
  in the histogram's `none`): nothing on the host repairs that. No Xid line is written for it (the
  corpus has no sample of the driver's wording).
- `reset_gpu` (the action): refused unless the centre confirmed a drain, or if the index names another
  GPU than the BDF given; a pending remap is applied (and a `gpu_xid` DBE's row remapped), a remapping
  failure stays.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import uuid
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from checker.parsers.nvidia_smi import parse_nvidia_smi_xml
from checker.schemas import CollectorRun, CollectorStatus, GpuState
from checker.sim.hardware import GpuSpec

if TYPE_CHECKING:
    from checker.sim.faults import Fault
    from checker.sim.host import VirtualHost

HISTOGRAM_BANKS = 192  # banks of an A100's row remapper histogram (the A10G sample's max)


@dataclass
class SimGpu:
    index: int
    spec: GpuSpec
    serial: str
    uuid: str
    temperature_c: float
    remapped_corr: int = 0
    remapped_unc: int = 0
    remap_pending: bool = False
    remap_failure: bool = False
    aggregate_unc: int = 0


def gpus_of(host: VirtualHost) -> list[SimGpu]:
    """The host's GPUs, made on first use from its class (serials and UUIDs from the hostname, so a
    seeded fleet replays them without drawing from the host's generator)."""
    if not host.gpus and host.hardware.gpus:
        for index, spec in enumerate(host.hardware.gpus):
            digest = hashlib.sha256(f"{host.hostname}/gpu{index}".encode()).digest()
            host.gpus.append(
                SimGpu(
                    index=index,
                    spec=spec,
                    serial=str(1650000000000 + int.from_bytes(digest[:4], "big") % 10_000_000),
                    uuid=f"GPU-{uuid.UUID(bytes=digest[:16])}",
                    temperature_c=float(34 + zlib.crc32(digest) % 18),
                )
            )
    return host.gpus


def _kernel_bdf(spec: GpuSpec) -> str:
    """The driver's 'PCI:0000:07:00' form of nvidia-smi's 00000000:07:00.0."""
    return "0000:" + spec.bdf.split(":", 1)[1].rsplit(".", 1)[0].lower()


def start(host: VirtualHost, fault: Fault) -> None:
    gpus = gpus_of(host)
    gpu = gpus[fault.dimm_index % len(gpus)]
    gpu.aggregate_unc += 1
    if fault.variant == "failure":
        gpu.remap_failure = True
        return
    gpu.remapped_unc += 1
    gpu.remap_pending = True


def progress(host: VirtualHost, fault: Fault, now: dt.datetime) -> None:
    """The driver's Xid 63 line, once, in the report after the fault began."""
    if fault.logged or fault.variant == "failure":
        return
    fault.logged = True
    gpus = gpus_of(host)
    gpu = gpus[fault.dimm_index % len(gpus)]
    row = host.rng.getrandbits(36) & ~0x1F
    message = (
        f"NVRM: Xid (PCI:{_kernel_bdf(gpu.spec)}): 63, pid='<unknown>', name=<unknown>, "
        f"Row Remapper: New row (0x{row:016x}) marked for remapping, reset gpu to activate."
    )
    host.log(now, [(3, message)])


def stop(host: VirtualHost) -> None:
    """The fault cleared by a remediation: nothing is pending any more (a remapping failure stays)."""
    for gpu in gpus_of(host):
        gpu.remap_pending = False


def reset_gpu(host: VirtualHost, params: dict[str, Any]) -> dict[str, Any]:
    """What the real action does (cyborg/drivers/gpu.py), on the virtual GPUs."""
    if not params.get("drained", False):
        raise ValueError("refused: host not drained (a GPU reset kills every process on it; no drain confirmed)")
    gpus = gpus_of(host)
    index = int(params["gpu"])
    if not 0 <= index < len(gpus):
        raise ValueError(f"no GPU {index} on {host.hostname}")
    gpu = gpus[index]
    bdf = params.get("bdf")
    if bdf is not None and str(bdf).lower()[-12:] != gpu.spec.bdf.lower()[-12:]:
        raise ValueError(f"refused: GPU index {index} is {gpu.spec.bdf}, not {bdf}")
    before = {"remap_pending": gpu.remap_pending, "remap_failure": gpu.remap_failure}
    gpu.remap_pending = False  # the reset applies the remap; a failure (no spare row) stays
    cleared: list[str] = []
    if not any(g.remap_pending for g in gpus) and not any(
        f.kind == "gpu_remap_pending" and f.variant == "failure" for f in host.faults
    ):
        cleared = host.clear({"gpu_remap_pending"})
    if any(f.kind == "gpu_xid" and f.variant == "dbe" for f in host.faults):
        cleared += host.clear({"gpu_xid"})  # the DBE's row is remapped at the reset (WORKFLOW_XID_48)
    return {
        "gpu": index,
        "bdf": gpu.spec.bdf,
        "uuid": gpu.uuid,
        "serial": gpu.serial,
        "before": before,
        "after": {"remap_pending": gpu.remap_pending, "remap_failure": gpu.remap_failure},
        "cleared": cleared,
    }


REASONS = (
    "gpu_idle",
    "applications_clocks_setting",
    "sw_power_cap",
    "hw_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
    "sync_boost",
    "sw_thermal_slowdown",
    "display_clocks_setting",
)


def _reasons(active: frozenset[str] = frozenset()) -> str:
    """The v12 clocks_event_reasons rows, every one `Not Active` but those given."""
    rows = []
    for reason in REASONS:
        tag = f"clocks_event_reason_{reason}"
        rows.append(f"            <{tag}>{'Active' if reason in active else 'Not Active'}</{tag}>\n")
    return "".join(rows)


def _yes(flag: bool) -> str:
    return "Yes" if flag else "No"


def gpu_xml(gpu: SimGpu) -> str:
    spec = gpu.spec
    bus = spec.bdf.split(":")[1]
    histogram_none = 1 if gpu.remap_failure else 0
    return f"""    <gpu id="{spec.bdf}">
        <product_name>{spec.product}</product_name>
        <product_brand>NVIDIA</product_brand>
        <product_architecture>Ampere</product_architecture>
        <persistence_mode>Enabled</persistence_mode>
        <mig_mode>
            <current_mig>Disabled</current_mig>
            <pending_mig>Disabled</pending_mig>
        </mig_mode>
        <serial>{gpu.serial}</serial>
        <uuid>{gpu.uuid}</uuid>
        <minor_number>{gpu.index}</minor_number>
        <vbios_version>{spec.vbios}</vbios_version>
        <board_part_number>692-2G506-0212-002</board_part_number>
        <gpu_module_id>{gpu.index + 1}</gpu_module_id>
        <gpu_reset_status>
            <reset_required>No</reset_required>
            <drain_and_reset_recommended>No</drain_and_reset_recommended>
        </gpu_reset_status>
        <pci>
            <pci_bus>{bus}</pci_bus>
            <pci_device>00</pci_device>
            <pci_domain>0000</pci_domain>
            <pci_device_id>20B210DE</pci_device_id>
            <pci_bus_id>{spec.bdf}</pci_bus_id>
        </pci>
        <performance_state>P0</performance_state>
        <clocks_event_reasons>
{_reasons()}        </clocks_event_reasons>
        <ecc_mode>
            <current_ecc>Enabled</current_ecc>
            <pending_ecc>Enabled</pending_ecc>
        </ecc_mode>
        <ecc_errors>
            <volatile>
                <sram_correctable>0</sram_correctable>
                <sram_uncorrectable>0</sram_uncorrectable>
                <dram_correctable>0</dram_correctable>
                <dram_uncorrectable>{gpu.aggregate_unc}</dram_uncorrectable>
            </volatile>
            <aggregate>
                <sram_correctable>0</sram_correctable>
                <sram_uncorrectable>0</sram_uncorrectable>
                <dram_correctable>0</dram_correctable>
                <dram_uncorrectable>{gpu.aggregate_unc}</dram_uncorrectable>
            </aggregate>
        </ecc_errors>
        <retired_pages>
            <multiple_single_bit_retirement>
                <retired_count>N/A</retired_count>
                <retired_pagelist>N/A</retired_pagelist>
            </multiple_single_bit_retirement>
            <double_bit_retirement>
                <retired_count>N/A</retired_count>
                <retired_pagelist>N/A</retired_pagelist>
            </double_bit_retirement>
            <pending_blacklist>N/A</pending_blacklist>
            <pending_retirement>N/A</pending_retirement>
        </retired_pages>
        <remapped_rows>
            <remapped_row_corr>{gpu.remapped_corr}</remapped_row_corr>
            <remapped_row_unc>{gpu.remapped_unc}</remapped_row_unc>
            <remapped_row_pending>{_yes(gpu.remap_pending)}</remapped_row_pending>
            <remapped_row_failure>{_yes(gpu.remap_failure)}</remapped_row_failure>
            <row_remapper_histogram>
                <row_remapper_histogram_max>{HISTOGRAM_BANKS - histogram_none} bank(s)</row_remapper_histogram_max>
                <row_remapper_histogram_high>0 bank(s)</row_remapper_histogram_high>
                <row_remapper_histogram_partial>0 bank(s)</row_remapper_histogram_partial>
                <row_remapper_histogram_low>0 bank(s)</row_remapper_histogram_low>
                <row_remapper_histogram_none>{histogram_none} bank(s)</row_remapper_histogram_none>
            </row_remapper_histogram>
        </remapped_rows>
        <temperature>
            <gpu_temp>{gpu.temperature_c:.0f} C</gpu_temp>
            <gpu_temp_tlimit>N/A</gpu_temp_tlimit>
            <gpu_temp_max_threshold>{spec.shutdown_c} C</gpu_temp_max_threshold>
            <gpu_temp_slow_threshold>{spec.slowdown_c} C</gpu_temp_slow_threshold>
            <gpu_temp_max_gpu_threshold>85 C</gpu_temp_max_gpu_threshold>
            <gpu_target_temperature>N/A</gpu_target_temperature>
            <memory_temp>{gpu.temperature_c + 8:.0f} C</memory_temp>
            <gpu_temp_max_mem_threshold>95 C</gpu_temp_max_mem_threshold>
        </temperature>
        <gpu_power_readings>
            <power_state>P0</power_state>
            <power_draw>{spec.power_limit_w * 0.55:.2f} W</power_draw>
            <current_power_limit>{spec.power_limit_w:.2f} W</current_power_limit>
            <requested_power_limit>{spec.power_limit_w:.2f} W</requested_power_limit>
            <default_power_limit>{spec.power_limit_w:.2f} W</default_power_limit>
            <min_power_limit>100.00 W</min_power_limit>
            <max_power_limit>{spec.power_limit_w:.2f} W</max_power_limit>
        </gpu_power_readings>
    </gpu>
"""


def nvidia_smi_xml(host: VirtualHost) -> str:
    """`nvidia-smi -q -x` as the host's driver would print it."""
    gpus = gpus_of(host)
    driver = gpus[0].spec.driver if gpus else ""
    body = "".join(gpu_xml(g) for g in gpus)
    return (
        '<?xml version="1.0" ?>\n<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">\n<nvidia_smi_log>\n'
        f"    <driver_version>{driver}</driver_version>\n    <cuda_version>12.2</cuda_version>\n"
        f"    <attached_gpus>{len(gpus)}</attached_gpus>\n{body}</nvidia_smi_log>\n"
    )


def gpu_state(host: VirtualHost) -> GpuState | None:
    if not host.hardware.gpus:
        return None
    return parse_nvidia_smi_xml(nvidia_smi_xml(host)).value


def collector_run(host: VirtualHost) -> CollectorRun:
    if not host.hardware.gpus:
        return CollectorRun(
            status=CollectorStatus.unavailable,
            duration_ms=0.2,
            reason="no NVIDIA GPU (0x10de display controller) in /sys/bus/pci/devices",
        )
    return CollectorRun(status=CollectorStatus.ok, duration_ms=350.0, source="nvidia-smi")
