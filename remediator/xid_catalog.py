"""What an NVIDIA Xid code means and what to do about it: NVIDIA's Xid catalog, one row per code we judge.

Source of every row unless it says more: NVIDIA, "XID Errors" (docs.nvidia.com/deploy/xid-errors/), the
r555+ "Xid catalog" for Ampere and newer (analyzing-xid-catalog.html): each code's mnemonic and its
"Resolution Bucket (Immediate Action)" — RESTART_APP, IGNORE, RESET_GPU, RESTART_BM (restart the bare
metal: a cold power cycle), the WORKFLOW_* guides, CONTACT_SUPPORT. NVIDIA's NVSentinel keeps the same
mapping as a table (xiderrorsmapping.csv: code, mnemonic, bucket, FATAL/NONFATAL), and leptonai/gpud
follows the same document.

`action` is ours: what the fleet does about the code, read from NVIDIA's bucket —
  application   the application's own error, or cleanup after another Xid: counted, no hardware action
  reset         the GPU needs a reset before it is used again (RESET_GPU)
  ecc_dbe       a double-bit ECC error (48, WORKFLOW_XID_48): the row remap or page retirement it triggers
                takes effect at a GPU reset, so reset the GPU (drained); replace it only if the reset or the
                remap fails, or the DBE comes back after the reset
  rma           the GPU's memory repair failed (64: no spare row, retirement failed): drain, and a ticket
                to replace it
  row_remap     a row was remapped (a spare row takes over at the next GPU reset): counted; the reset is
                for nvidia-smi's "remapping pending" (the GPU section), not for this line
  nvlink        an NVLink error: a ticket (NVIDIA's NVLink workflow is a person's)
  off_bus       the GPU is gone from the PCIe bus: drain, a cold power cycle (RESTART_BM), a ticket if it returns
  contained     an ECC error the GPU contained to one application (restarted): a ticket when it repeats
  reboot        the GPU asks for the node to be rebooted (Xid 154 naming "Node Reboot Required")
  watch         logged for the record, no action of its own (high SBE rate, C2C corrected, 154 back to None)
Xid 154 (GPU_RECOVERY_ACTION_CHANGED) takes the action its line names (`classify_line`): GPU Reset Required
or Drain and Reset -> reset, Node Reboot Required -> reboot, None or Drain P2P -> watch.
Codes not in the table are counted as `unlisted`, never acted on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

XidAction = Literal[
    "application",
    "reset",
    "ecc_dbe",
    "rma",
    "reboot",
    "row_remap",
    "nvlink",
    "off_bus",
    "contained",
    "watch",
    "unlisted",
]
CATALOG = "NVIDIA Xid catalog, r555+ (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html)"
MEMORY_RMA = "NVIDIA A100/H100 GPU memory error management: RMA policy (a row-remapping failure qualifies)"
XID_48 = (
    "; WORKFLOW_XID_48: alone RESET_GPU, with 63 or 64 DRAIN_AND_RESET; NVIDIA 'GPU Memory Error Management': "
    "a row remap 'requires a GPU reset to take effect', replacement on a remapping failure (Xid 64) or the RMA policy"
)


@dataclass(frozen=True)
class XidCode:
    code: int
    mnemonic: str
    meaning: str
    bucket: str  # NVIDIA's immediate action (resolution bucket)
    action: XidAction
    source: str = CATALOG


def _x(code: int, mnemonic: str, meaning: str, bucket: str, action: XidAction, source: str = CATALOG) -> XidCode:
    return XidCode(code, mnemonic, meaning, bucket, action, source)


XID_CODES: dict[int, XidCode] = {
    row.code: row
    for row in (
        _x(8, "ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT", "GPU stopped processing (channel idle timeout)",
           "RESTART_APP", "application"),
        _x(13, "ROBUST_CHANNEL_GR_EXCEPTION", "graphics engine exception (usually the application)",
           "RESTART_APP", "application"),
        _x(31, "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "GPU memory page fault (usually the application's address)",
           "RESTART_APP", "application"),
        _x(32, "ROBUST_CHANNEL_PBDMA_ERROR", "invalid or corrupted push buffer stream", "RESTART_APP",
           "application"),
        _x(43, "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "GPU stopped processing: the application's channel was reset",
           "IGNORE", "application"),
        _x(45, "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", "preemptive cleanup after an earlier error", "WORKFLOW_XID_45",
           "application"),
        _x(46, "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "GPU timeout", "RESET_GPU", "reset"),
        _x(48, "ROBUST_CHANNEL_GPU_ECC_DBE", "double-bit (uncorrectable) ECC error in GPU memory", "WORKFLOW_XID_48",
           "ecc_dbe", CATALOG + XID_48),
        _x(62, "PMU_HALT_ERROR", "internal micro-controller halt", "RESET_GPU", "reset"),
        _x(63, "INFOROM_DRAM_RETIREMENT_EVENT", "row remapping or page retirement recorded: reset the GPU to activate",
           "IGNORE", "row_remap"),
        _x(64, "INFOROM_DRAM_RETIREMENT_FAILURE", "row remapping or page retirement failed", "RESET_GPU", "rma",
           CATALOG + "; " + MEMORY_RMA),
        _x(69, "ROBUST_CHANNEL_GR_CLASS_ERROR", "graphics engine class error", "RESTART_APP", "application"),
        _x(74, "NVLINK_ERROR", "NVLink error", "WORKFLOW_NVLINK_ERR", "nvlink"),
        _x(79, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "GPU has fallen off the bus", "RESTART_BM", "off_bus"),
        _x(92, "EXCESSIVE_SBE_INTERRUPTS", "high single-bit ECC error rate", "IGNORE", "watch"),
        _x(94, "ROBUST_CHANNEL_CONTAINED_ERROR", "contained ECC error: the affected application was stopped",
           "RESTART_APP", "contained"),
        _x(95, "ROBUST_CHANNEL_UNCONTAINED_ERROR", "uncontained ECC error: every application on the GPU is affected",
           "RESET_GPU", "reset"),
        _x(109, "ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", "context switch timeout", "RESET_GPU", "reset"),
        _x(110, "SEC_FAULT_ERROR", "security fault", "RESET_GPU", "reset"),
        _x(119, "GSP_RPC_TIMEOUT", "GSP RPC timeout (the GPU System Processor stopped answering)", "RESET_GPU",
           "reset"),
        _x(120, "GSP_ERROR", "GSP error", "RESET_GPU", "reset"),
        _x(121, "C2C_ERROR", "C2C link error (corrected)", "IGNORE", "watch"),
        _x(136, "ALI_TRAINING_FAIL", "NVLink link training (ALI) failed", "RESET_GPU", "reset"),
        _x(140, "UNRECOVERABLE_ECC_ERROR_ESCAPE", "an uncorrectable ECC error escaped containment", "RESET_GPU",
           "reset"),
        _x(143, "GPU_INIT_ERROR", "GPU initialisation failed", "RESET_GPU", "reset"),
        *(_x(code, f"NVLINK_{name}_ERROR", f"NVLink5 {name} error", "WORKFLOW_NVLINK5_ERR", "nvlink")
          for code, name in ((144, "SAW"), (145, "RLW"), (146, "TLW"), (147, "TREX"), (148, "NVLPW_CTRL"),
                             (149, "NETIR"), (150, "MSE"))),
        _x(154, "GPU_RECOVERY_ACTION_CHANGED", "the GPU's recovery action changed (the line names the new one)",
           "the named recovery action", "watch"),
        _x(155, "NVLINK_SW_DEFINED_ERROR", "NVLink software-defined error", "RESET_GPU", "reset"),
        _x(158, "GPU_FATAL_TIMEOUT", "GPU fatal timeout", "RESET_GPU", "reset"),
    )
}  # fmt: skip

FALLEN_OFF_BUS = XidCode(
    79,
    "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS",
    "GPU has fallen off the bus (the driver's probe message, no Xid line)",
    "RESTART_BM",
    "off_bus",
)


def classify(code: int | None) -> XidCode:
    """The catalog's row for a code; None is the fallen-off-the-bus message without an Xid 79 line."""
    if code is None:
        return FALLEN_OFF_BUS
    return XID_CODES.get(code) or XidCode(code, "", "not in the fleet's table", "", "unlisted", "")


RECOVERY_ACTIONS: tuple[tuple[str, XidAction], ...] = (
    ("drain and reset", "reset"),
    ("gpu reset required", "reset"),
    ("node reboot required", "reboot"),
)
"""nvidia-smi's and Xid 154's recovery action names (NVML's nvmlDeviceGpuRecoveryAction_t: None, GPU Reset
Required, Node Reboot Required, Drain P2P, Drain and Reset), the fleet's action for each; the rest: watch."""


def recovery_action(text: str) -> XidAction | None:
    """The action a recovery action's name asks for (the newest one a line names), None for none."""
    lower = text.lower()
    tail = lower.rsplit(" to ", 1)[-1]  # "changed from 0x0 (None) to 0x1 (GPU Reset Required)": the new one
    return next((action for name, action in RECOVERY_ACTIONS if name in tail), None)


def classify_line(code: int | None, text: str) -> XidCode:
    """classify, and Xid 154 read by the recovery action its line names."""
    row = classify(code)
    if code == 154 and (action := recovery_action(text)) is not None:
        return XidCode(row.code, row.mnemonic, f"{row.meaning}: {text.rsplit(' to ', 1)[-1][:80]}", row.bucket,
                       action, row.source)  # fmt: skip
    return row
