"""Resetting one NVIDIA GPU on the real host: `nvidia-smi -r -i N`, then the GPU checked back.

NVIDIA's "GPU Memory Error Management" (row remapping, page retirement): a row remap or page retirement
marked after an uncorrectable error takes effect at the next GPU reset, and nvidia-smi shows it
pending until then. A reset kills every process on the GPU, so it is refused unless the centre
confirmed a scheduler drain for this remediation (cyborg.central.issuing.drain_confirmed); nvidia-smi
itself refuses a GPU still in use (and, on NVSwitch systems, a GPU whose peers are in use).

Before: `nvidia-smi -q -x -i N` must show the GPU the centre named (BDF and UUID, when given: an index
can move after a GPU is lost); everything it says is kept in the result (the reset clears the volatile
ECC counters). After: `nvidia-smi -L` must list the GPU again (by UUID, else by index), `nvidia-smi -q -x
-i N` must show the same GPU (BDF, UUID) and no remap or retirement pending, no Remapping Failure, no
Reset Required or Drain and Reset Recommended, no recovery action; otherwise the step fails and the
plan's ticket takes over, with the before and after states in the result.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from checker.parsers.nvidia_smi import parse_nvidia_smi_xml
from cyborg.actions import ResetGpuParams
from cyborg.commands import ActionContext, ActionFailed

if TYPE_CHECKING:
    from checker.schemas import Gpu
    from cyborg.drivers.linux import LinuxDriver

TOOL = "nvidia-smi"
RESET_TIMEOUT_S = 120.0
QUERY_TIMEOUT_S = 60.0
NOT_DRAINED = "refused: host not drained (a GPU reset kills every process on it; no scheduler drain confirmed)"
_LISTED = re.compile(r"^GPU (?P<index>\d+): [^\n]*?(?:\(UUID: (?P<uuid>GPU-[0-9a-fA-F-]+)\))?$", re.MULTILINE)


def _address(bdf: str) -> str:
    """00000000:07:00.0 and 0000:07:00.0 alike: the last 12 characters, lower case."""
    return bdf.strip().lower()[-12:]


def query(ctx: ActionContext, index: int) -> Gpu:
    out = ctx.must([TOOL, "-q", "-x", "-i", str(index)], timeout_s=QUERY_TIMEOUT_S, changes=False)
    parsed = parse_nvidia_smi_xml(out)
    if parsed.value is None or not parsed.value.gpus:
        why = parsed.problems[0] if parsed.problems else "no GPU in the output"
        raise ActionFailed(f"{TOOL} -q -x -i {index}: {why}")
    return parsed.value.gpus[0]


def state_of(gpu: Gpu) -> dict[str, Any]:
    """Everything nvidia-smi said of the GPU: a reset clears the volatile ECC counters, so the record before it is
    the only copy of them (and of the remapper's state, reset status and clocks)."""
    return gpu.model_dump(mode="json", exclude_none=True)


def _is_the_named_gpu(gpu: Gpu, params: ResetGpuParams, *, when: str = "now") -> None:
    if params.bdf is not None and _address(gpu.bdf) != _address(params.bdf):
        raise ActionFailed(
            f"refused: GPU index {params.gpu} is {when} {gpu.bdf}, not {params.bdf} (indexes moved: a GPU was lost "
            "or added since the signal)"
        )
    if params.uuid is not None and (gpu.uuid or "").lower() != params.uuid.lower():
        raise ActionFailed(f"refused: GPU index {params.gpu} is {when} {gpu.uuid}, not {params.uuid}")


def _same_gpu_after(after: Gpu, before: Gpu, params: ResetGpuParams) -> None:
    """Index N after the reset is the GPU that was reset: the signal's BDF and UUID, and the one queried before."""
    _is_the_named_gpu(after, params, when="after the reset")
    if _address(after.bdf) != _address(before.bdf) or (before.uuid or "").lower() != (after.uuid or "").lower():
        raise ActionFailed(
            f"GPU index {params.gpu} after the reset is {after.bdf} ({after.uuid}), not the GPU reset "
            f"({before.bdf}, {before.uuid}): the GPU did not come back under its index"
        )


def _listed_again(listed: str, before: Gpu, index: int) -> None:
    """`nvidia-smi -L` lists the reset GPU: by its UUID, or by its index when nvidia-smi gave no UUID."""
    found = {int(m.group("index")): (m.group("uuid") or "").lower() for m in _LISTED.finditer(listed)}
    if before.uuid is not None and before.uuid.lower() not in found.values():
        raise ActionFailed(f"GPU {index} ({before.bdf}, {before.uuid}) is not listed by {TOOL} -L after the reset")
    if before.uuid is None and index not in found:
        raise ActionFailed(f"GPU {index} ({before.bdf}) is not listed by {TOOL} -L after the reset")


def still_wrong(after: Gpu) -> str | None:
    """What the GPU still reports after the reset that the reset should have cleared; None when nothing."""
    repair = after.memory_repair
    if repair.remap_pending or repair.retirement_pending:
        return "still shows a row remap or page retirement pending"
    if repair.remap_failure:
        return "reports a row remapping failure (no spare row): replace it"
    if after.reset_required or after.drain_and_reset_recommended:
        return "still asks for a reset (Reset Required or Drain and Reset Recommended: Yes)"
    if after.recovery_action is not None and after.recovery_action.lower() != "none":
        return f"still names a recovery action ({after.recovery_action})"
    return None


def reset_gpu(driver: LinuxDriver, params: ResetGpuParams, ctx: ActionContext) -> dict[str, Any]:
    if not params.drained:
        ctx.note("refused", NOT_DRAINED, kind="check")
        raise ActionFailed(NOT_DRAINED)
    if driver.system.which(TOOL) is None:
        raise ActionFailed(f"precondition: {TOOL} is not installed")
    before = query(ctx, params.gpu)
    _is_the_named_gpu(before, params)
    changed: dict[str, Any] = {
        "gpu": params.gpu,
        "bdf": before.bdf,
        "uuid": before.uuid,
        "serial": before.serial,
        "product": before.product,
        "before": state_of(before),
    }
    # in the command log too: a failed step returns no `changed`, and the log is what the centre keeps of it
    ctx.note("state before the reset", json.dumps(changed["before"], separators=(",", ":")), kind="check")
    ctx.must([TOOL, "-r", "-i", str(params.gpu)], timeout_s=RESET_TIMEOUT_S)
    if ctx.dry_run:
        return changed
    _listed_again(ctx.must([TOOL, "-L"], timeout_s=QUERY_TIMEOUT_S, changes=False), before, params.gpu)
    after = query(ctx, params.gpu)
    changed["after"] = state_of(after)
    ctx.note("state after the reset", json.dumps(changed["after"], separators=(",", ":")), kind="check")
    _same_gpu_after(after, before, params)
    wrong = still_wrong(after)
    if wrong is not None:
        raise ActionFailed(f"GPU {params.gpu} ({before.bdf}) {wrong} after the reset")
    return changed
