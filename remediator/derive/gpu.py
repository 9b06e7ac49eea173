"""GPU signals from nvidia-smi (the report's `gpu` section): row remapping, page retirement, uncorrected
ECC growth, temperature past the GPU's own slowdown threshold, hardware clock slowdowns, ECC off, a reset or
reboot the GPU asks for itself (gpu_reset_required: Reset Required, Drain and Reset Recommended, v13's
recovery action; under MIG the only sign), and a GPU on the PCI bus that nvidia-smi does not list
(gpu_missing, subject its address, gpu_parts.locator).

NVIDIA's "GPU Memory Error Management" (r535+, sections "Row Remapping" and "Page Retirement"): a row
remap (Ampere+) or a page retirement (before) marked after an uncorrectable error takes effect only
after a GPU reset; until then the GPU reports it pending and the bad row stays in use. A remapping
failure means a bank ran out of spare rows: the board must be replaced. States (pending, failure, hot,
throttled, ECC off) are emitted on every report while they hold; the aggregate uncorrected ECC count is
a counter, and only its growth is a signal (the first sight of a GPU records it). Anything nvidia-smi
reports as N/A is None in the report and never gives a signal, nor a healthy reading.
Subject: `gpu<index> <BDF>` (remediator/gpu_parts.py); detail names uuid, serial, product, BDF.
"""

from __future__ import annotations

from typing import Any

from checker.schemas import Gpu, GpuState
from remediator.gpu_parts import gpu_subject, locator
from remediator.signals import SignalValue
from remediator.xid_catalog import recovery_action

MAX_GPUS = 64
# clocks event reasons that mean the hardware is held back by heat or power (not policy, not idleness)
HARDWARE_SLOWDOWNS = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown")


def gpu_key(gpu: Gpu) -> str:
    """What the GPU's counters are remembered by: its UUID (it moves with the board), else its address."""
    return gpu.uuid or gpu.bdf


def about(gpu: Gpu, state: GpuState) -> dict[str, Any]:
    return {
        "index": gpu.index,
        "bdf": gpu.bdf,
        "uuid": gpu.uuid,
        "serial": gpu.serial,
        "product": gpu.product,
        "vbios": gpu.vbios,
        "driver": state.driver_version,
    }


def slowdown_margin(gpu: Gpu) -> float | None:
    """Degrees left before the GPU slows itself down (negative: past it); None when unknown."""
    if gpu.temperature_c is not None and gpu.slowdown_c is not None:
        return gpu.slowdown_c - gpu.temperature_c
    if gpu.tlimit_c is not None and gpu.slowdown_tlimit_c is not None:
        return gpu.tlimit_c - gpu.slowdown_tlimit_c  # v13: T.Limit counts down to the slowdown reading
    return None


def heat_reading(gpu: Gpu, margin: float) -> str:
    """The title's words for a GPU past its slowdown: its temperature and threshold, or on v13 (which gives only
    the T.Limit margin) the degrees past it."""
    if gpu.temperature_c is not None and gpu.slowdown_c is not None:
        return f"at {gpu.temperature_c:.0f} C, past its slowdown {gpu.slowdown_c:.0f} C"
    at = f"at {gpu.temperature_c:.0f} C, " if gpu.temperature_c is not None else ""
    limits = f"T.Limit {gpu.tlimit_c} C, slowdown at T.Limit {gpu.slowdown_tlimit_c} C"
    return f"{at}{-margin:.0f} C past its slowdown ({limits})"


def recovery_of(gpu: Gpu) -> str | None:
    """What the GPU asks for itself: `reset` (Reset Required, Drain and Reset Recommended, recovery action GPU
    Reset Required or Drain and Reset) or `reboot` (recovery action Node Reboot Required); None: nothing."""
    named = recovery_action(gpu.recovery_action) if gpu.recovery_action else None
    if named is not None:
        return named
    return "reset" if gpu.reset_required or gpu.drain_and_reset_recommended else None


def _one(gpu: Gpu, state: GpuState, before: int | None) -> list[SignalValue]:
    subject = gpu_subject(gpu.index, gpu.bdf)
    detail = about(gpu, state)
    repair = gpu.memory_repair
    signals: list[SignalValue] = []
    if repair.remap_pending:
        remap = {"remapped_uncorrected": repair.remapped_uncorrected, "remapped_corrected": repair.remapped_corrected}
        signals.append(SignalValue("gpu_remap_pending", subject, 1.0, {**detail, **remap}))
    if repair.remap_failure:
        spare = {"banks_without_spare": repair.banks_without_spare, "remapped_uncorrected": repair.remapped_uncorrected}
        signals.append(SignalValue("gpu_remap_failure", subject, 1.0, {**detail, **spare}))
    if repair.retirement_pending:
        pages = {"retired_double_bit": repair.retired_double_bit, "retired_single_bit": repair.retired_single_bit}
        signals.append(SignalValue("gpu_retired_pages_pending", subject, 1.0, {**detail, **pages}))
    now = gpu.ecc.aggregate_uncorrected
    if now is not None and before is not None and now > before:
        growth = {
            "aggregate_uncorrected": now,
            "previous": before,
            "dram_uncorrected": gpu.ecc.aggregate_dram_uncorrected,
        }
        signals.append(SignalValue("gpu_ecc_uncorrected", subject, float(now - before), {**detail, **growth}))
    margin = slowdown_margin(gpu)
    if margin is not None and margin <= 0:
        heat = {
            "temperature_c": gpu.temperature_c,
            "slowdown_c": gpu.slowdown_c,
            "shutdown_c": gpu.shutdown_c,
            "tlimit_c": gpu.tlimit_c,
            "slowdown_tlimit_c": gpu.slowdown_tlimit_c,
            "margin_c": margin,
            "over_slowdown_c": -margin,
            "reading": heat_reading(gpu, margin),
        }
        value = gpu.temperature_c if gpu.temperature_c is not None else -margin
        signals.append(SignalValue("gpu_temperature", subject, value, {**detail, **heat}))
    slowdowns = [r for r in gpu.clock_event_reasons or [] if r in HARDWARE_SLOWDOWNS]
    if slowdowns:
        why = {"reasons": slowdowns, "reason": slowdowns[0], "temperature_c": gpu.temperature_c}
        why |= {"power_draw_w": gpu.power_draw_w, "power_limit_w": gpu.power_limit_w}
        signals.append(SignalValue("gpu_clock_slowdown", subject, float(len(slowdowns)), {**detail, **why}))
    if (recovery := recovery_of(gpu)) is not None:
        asks = {
            "recovery": recovery,
            "reset_required": gpu.reset_required,
            "drain_and_reset_recommended": gpu.drain_and_reset_recommended,
            "recovery_action": gpu.recovery_action,
            "mig_mode": gpu.mig_mode,
        }
        signals.append(SignalValue("gpu_reset_required", subject, 1.0, {**detail, **asks}))
    if gpu.ecc.mode is not None and gpu.ecc.mode.lower() == "disabled":
        mode = {"ecc_mode": gpu.ecc.mode, "pending_mode": gpu.ecc.pending_mode}
        signals.append(SignalValue("gpu_ecc_disabled", subject, 1.0, {**detail, **mode}))
    return signals


def gpu_signals(
    state: GpuState | None, previous: dict[str, int] | None
) -> tuple[list[SignalValue], dict[str, int] | None]:
    """Signals of every GPU, and the aggregate uncorrected counts to remember (absent section: memory kept)."""
    if state is None:
        return [], previous
    prev = previous or {}
    signals: list[SignalValue] = []
    memory: dict[str, int] = {}
    for gpu in state.gpus[:MAX_GPUS]:
        key = gpu_key(gpu)
        before = prev.get(key)
        signals += _one(gpu, state, before)
        now = gpu.ecc.aggregate_uncorrected
        if now is not None:
            memory[key] = now
        elif before is not None:
            memory[key] = before  # N/A this time (ECC being toggled, MIG): keep what was known
    signals += [
        SignalValue(
            "gpu_missing",
            locator(m.bdf),
            1.0,
            {"bdf": m.bdf, "device_id": m.device_id, "driver": m.driver, "listed": len(state.gpus)},
        )
        for m in state.missing[:MAX_GPUS]
    ]
    return signals, memory or None
