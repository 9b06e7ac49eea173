"""NVIDIA GPUs: `nvidia-smi -q -x`, through the command runner with a timeout.

First a cheap look at /sys/bus/pci/devices/*/vendor for NVIDIA's 0x10de (a few small sysfs reads),
so a host without an NVIDIA device never spawns a process. nvidia-smi is the one process this
collector starts per cycle; it can hang behind a wedged GPU or driver (a GPU fallen off the bus
holds it for tens of seconds), so its timeout is its own (cycle.DEFAULT_TIMEOUTS["gpu"]) and a hang
is the collector's `timeout`, not the cycle's. Display controllers (class 0x03xxxx) only: an NVIDIA
NVSwitch or bridge (class 0x068000) is not a GPU. A GPU sysfs lists and nvidia-smi does not is kept in
the section's `missing` (one uevent read each; one bound to vfio-pci or pci-stub is a VM's, left out): after
a reboot the driver's fallen-off-the-bus line is gone, and this is what is left of it.

The agent runs no DCGM diagnostic (a level-3 run loads every GPU for ~15 minutes: the site's to schedule,
around its workloads). When the site's own run leaves its table in the agent's state directory
(`dcgmi diag -r 3 > STATE_DIR/dcgmi-diag.txt`), it is read (one file read) and parsed into the section's
`diag`, with when this output was first seen (its digest kept in the collector state) and when the file
was written (its mtime, which a lost agent state does not reset): evidence on the GPU tickets, never a
rule's trigger (docs/gpus.md). Only the file's tail and its last table are read (runs appended with `>>`);
the board serial at each index when the output was first seen is kept, so a GPU swapped since is said
(`replaced_gpus`) and the run's results are not credited to the new board.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib

from checker.collectors.base import FileStat
from checker.collectors.context import BudgetExceeded, Context, ParseFailed, Unavailable, command_failure
from checker.parsers.dcgmi_diag import last_table, parse_dcgmi_diag
from checker.parsers.nvidia_smi import parse_nvidia_smi_xml
from checker.sections.gpu import DcgmDiag, MissingGpu

PCI_DEVICES = "/sys/bus/pci/devices"
NVIDIA_VENDOR = "0x10de"
DISPLAY_CLASS_PREFIX = "0x03"  # PCI base class 03h: display controller (VGA 0300, 3D controller 0302)
NVIDIA_SMI = ["nvidia-smi", "-q", "-x"]
NVIDIA_SMI_TIMEOUT_S = 20.0
MAX_PCI_DEVICES = 4096
PASSED_THROUGH = frozenset({"vfio-pci", "pci-stub"})  # a GPU handed to a VM: the host's nvidia-smi never lists it
DIAG_NAME = "dcgmi-diag.txt"  # in the agent's state directory: the site's own `dcgmi diag` output
DEFAULT_STATE_DIR = "/var/lib/fleetfix-agent"  # FLEETFIX_AGENT_STATE_DIR's default
DIAG_STATE = "gpu_diag"
MAX_DIAG_CHARS = 200_000
# The boards nvidia-smi lists when the agent first reads a run are the run's only when read soon after it was
# written: within a few report cycles (core/settings.py report_interval_s, 60 s by default). Wrong if a run is
# left while the agent is stopped for longer and no board changes meanwhile: its per-GPU results go uncredited.
DIAG_BOARDS_KNOWN_WITHIN = dt.timedelta(minutes=10)


def nvidia_gpus(ctx: Context) -> list[str]:
    """The PCI addresses of NVIDIA display controllers sysfs lists (empty: none, or no sysfs)."""
    found: list[str] = []
    for name in (ctx.host.list_dir(PCI_DEVICES) or [])[:MAX_PCI_DEVICES]:
        vendor = ctx.host.read_text(f"{PCI_DEVICES}/{name}/vendor")
        if vendor is None or vendor.strip().lower() != NVIDIA_VENDOR:
            continue
        pci_class = (ctx.host.read_text(f"{PCI_DEVICES}/{name}/class") or "").strip().lower()
        if pci_class and not pci_class.startswith(DISPLAY_CLASS_PREFIX):
            continue
        found.append(name)
    return found


def collect(ctx: Context) -> None:
    devices = nvidia_gpus(ctx)
    if not devices:
        raise Unavailable(f"no NVIDIA GPU ({NVIDIA_VENDOR} display controller) in {PCI_DEVICES}")
    result = ctx.run(NVIDIA_SMI, NVIDIA_SMI_TIMEOUT_S)
    ctx.source = "nvidia-smi"
    if result.missing:
        raise Unavailable(f"{len(devices)} NVIDIA GPU(s) on the PCI bus but nvidia-smi is not installed")
    if result.timed_out:
        raise BudgetExceeded(command_failure(result))
    if not result.stdout.strip():
        # the driver is not loaded, or every GPU fell off the bus: nvidia-smi says so on stdout or stderr
        raise ParseFailed(command_failure(result), result.stderr or result.stdout)
    state = ctx.take(parse_nvidia_smi_xml(result.stdout), "nvidia-smi -q -x", result.stdout)
    if state is None:
        raise ParseFailed("nvidia-smi -q -x: nothing read", result.stdout)
    if result.returncode != 0:
        ctx.problem(command_failure(result))
    if len(state.gpus) < len(devices):
        state.missing = not_listed(ctx, devices, [gpu.bdf for gpu in state.gpus])
        if state.missing:
            ctx.problem(f"on the PCI bus but not in nvidia-smi: {', '.join(m.bdf for m in state.missing[:8])}")
    state.diag = read_diag(ctx, {gpu.index: gpu.serial for gpu in state.gpus})
    ctx.observations.gpu = state


def read_diag(ctx: Context, serials: dict[int, str | None] | None = None) -> DcgmDiag | None:
    """The site's last `dcgmi diag` output left in the state directory, parsed, with when the agent first saw
    this output and when the file was written; None without one (module docstring). Only the file's tail is
    read where the host can say its size (at most MAX_DIAG_CHARS), and only its last table is parsed: runs
    appended with `>>` were parsed together (review r4, finding 6). `serials`: nvidia-smi's board serial by
    index now; an index whose board changed since this output was first seen is in `replaced_gpus`."""
    directory = str(ctx.state.path.parent) if ctx.state.path is not None else DEFAULT_STATE_DIR
    path = f"{directory}/{DIAG_NAME}"
    stat = getattr(ctx.host, "stat", None)  # not every host can say (checker.collectors.base.LiveHost can)
    found: FileStat | None = stat(path) if callable(stat) else None
    if found is not None:
        piece = ctx.host.read_from(path, max(0, found.size - MAX_DIAG_CHARS), MAX_DIAG_CHARS)
        text = piece.text if piece is not None else None
    else:
        whole = ctx.host.read_text(path)
        text = whole[-MAX_DIAG_CHARS:] if whole else whole
    if not text or not text.strip():
        return None
    parsed = parse_dcgmi_diag(last_table(text))
    for item in parsed.problems[:5]:
        ctx.problem(f"{DIAG_NAME}: {item}")
    if parsed.value is None:
        return None
    # the file's mtime and size are the run's identity too: a byte-identical re-run after a swap is a new run,
    # whose boards are those of now (review r7, finding 4)
    identity = last_table(text) + (f"\0{found.mtime}\0{found.size}" if found is not None else "")
    digest = hashlib.sha256(identity.encode("utf-8", "replace")).hexdigest()[:16]
    saved = ctx.state.get(DIAG_STATE)
    seen = dt.datetime.now(dt.UTC)
    same = saved.get("digest") == digest
    if same and isinstance(saved.get("first_seen"), str):
        with contextlib.suppress(ValueError):
            seen = dt.datetime.fromisoformat(saved["first_seen"])
    then = saved.get("serials") if same and isinstance(saved.get("serials"), dict) else None
    if then is None:
        then = {str(index): serial for index, serial in (serials or {}).items()}
    ctx.state.stage(DIAG_STATE, {"digest": digest, "first_seen": seen.isoformat(), "serials": then})
    parsed.value.first_seen = seen if seen.tzinfo else seen.replace(tzinfo=dt.UTC)
    if found is not None:
        parsed.value.written_at = dt.datetime.fromtimestamp(found.mtime, dt.UTC)
    written = parsed.value.written_at
    # review r7, finding 4: a baseline taken long after the run (the agent's state lost, the agent stopped) or
    # with no serial read is of the boards now, not of the run's: the boards at run time are unknown
    late = written is None or parsed.value.first_seen - written > DIAG_BOARDS_KNOWN_WITHIN
    known = {} if late else {int(index): str(serial)[:64] for index, serial in then.items() if serial}
    parsed.value.run_serials = dict(sorted(known.items())[:64]) or None
    parsed.value.replaced_gpus = sorted(
        index for index, serial in (serials or {}).items() if serial and known.get(index) and known.get(index) != serial
    )[:64]
    return parsed.value


def _uevent(ctx: Context, name: str) -> dict[str, str]:
    text = ctx.host.read_text(f"{PCI_DEVICES}/{name}/uevent") or ""
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def not_listed(ctx: Context, devices: list[str], listed_bdfs: list[str]) -> list[MissingGpu]:
    """The NVIDIA GPUs sysfs lists and nvidia-smi does not (fallen off the bus and back, failed to initialise,
    or not bound), less those bound to vfio-pci or pci-stub (given to a VM). One uevent read each."""
    listed = {bdf.lower()[-12:] for bdf in listed_bdfs}
    missing: list[MissingGpu] = []
    for name in devices:
        if name.lower()[-12:] in listed:
            continue
        uevent = _uevent(ctx, name)
        driver = uevent.get("DRIVER") or None
        if driver in PASSED_THROUGH:
            continue
        device = (ctx.host.read_text(f"{PCI_DEVICES}/{name}/device") or "").strip() or None
        missing.append(MissingGpu(bdf=name[:32], device_id=device[:16] if device else None, driver=driver))
    return missing[:64]
