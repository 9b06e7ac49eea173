"""The simulated driver: actions act on a virtual host of the simulated fleet (checker/sim).

Used by `fleetfix up --simulate`, by agents run with `FLEETFIX_AGENT_DRIVER=simulated`, by the
tests and the benchmarks. Each action is `VirtualHost.apply` under the fleet's lock and is logged
like a command (`kind: simulated`). It can be told what goes wrong with the next action:

- `host.fail_next_action = "fail" | "hang" | "stay_down"` in-process, or
- a file `simulate-next-action` in the agent's state directory holding one of those words
  (read and removed by the next action), for an agent in its own process.

`fail`: the action fails; `hang`: the host stops answering and the action runs into its time
budget; `stay_down`: the action happens and the host then stays down (no reports, no results)
until its BMC power-cycles it. A restart keeps the host away for its simulated downtime (7 s warm,
60 s cold) times `time_scale`. With a state file, what actions changed survives agent restarts.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from pathlib import Path
from typing import Any

from checker.sim.actions import COLD_REBOOT_S, FAILURE_MODES, WARM_REBOOT_S
from checker.sim.host import VirtualHost
from checker.sim.standalone import load_host, save_host
from cyborg.actions import (
    ActionParams,
    CyborgAction,
    HardPprParams,
    InstallKernelParams,
    InterleaveParams,
    OfflineCpuParams,
    RebootParams,
    ReflashFirmwareParams,
    ResetGpuParams,
    SoftOfflinePageParams,
    TuneErrorReportingParams,
    VerifyMemoryUnderLoadParams,
)
from cyborg.commands import ActionContext, ActionFailed, ActionTimedOut, CommandRecord
from cyborg.drivers.base import HostWentDown, VerificationFailed, require_restarted

CONTROL_FILE = "simulate-next-action"


def _sim_params(params: ActionParams) -> list[dict[str, Any]]:
    """The virtual host's parameters for each application (a reflash applies once per target)."""
    if isinstance(params, RebootParams):
        return [{"kind": params.mode}]
    if isinstance(params, ReflashFirmwareParams):
        return [{"component": t.component, "version": t.version} for t in params.targets]
    if isinstance(params, InstallKernelParams):
        return [{"release": params.release}]
    if isinstance(params, HardPprParams):
        return [{"dimm": params.dimm}]
    if isinstance(params, TuneErrorReportingParams):
        return [{"poll_msec": params.edac_poll_s * 1000}]
    if isinstance(params, InterleaveParams):
        return [{"weights": params.weights} if params.weights else {}]
    if isinstance(params, OfflineCpuParams):
        return [{"cpu": params.cpu}]
    if isinstance(params, SoftOfflinePageParams):
        return [{"address": params.address, "max_offlined_pages": params.max_offlined_pages}]
    if isinstance(params, ResetGpuParams):
        return [params.model_dump(exclude_none=True)]  # drained too: the virtual host refuses as the real one
    if isinstance(params, VerifyMemoryUnderLoadParams):
        return [params.model_dump(exclude_none=True)]  # drained and coverage too: the virtual host answers as the real
    return [{}]


class SimulatedDriver:
    name = "simulated"

    def __init__(
        self,
        host: VirtualHost,
        *,
        lock: threading.RLock | None = None,
        time_scale: float = 0.0,
        state_dir: Path | None = None,
    ) -> None:
        self.host = host
        self.lock = lock or threading.RLock()
        self.time_scale = time_scale
        self.state_dir = state_dir
        self.applied: list[dict[str, Any]] = []  # every application, for tests: what ran, how often
        if state_dir is not None:
            self._load()

    # -- persistence ----------------------------------------------------------------

    def _load(self) -> None:
        assert self.state_dir is not None
        with self.lock:
            self.applied = load_host(self.state_dir, self.host)

    def _save(self) -> None:
        if self.state_dir is not None:
            with self.lock:
                save_host(self.state_dir, self.host, self.applied)

    def _failure_from_control_file(self) -> None:
        if self.state_dir is None:
            return
        path = self.state_dir / CONTROL_FILE
        try:
            mode = path.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            return
        path.unlink()
        if mode not in FAILURE_MODES:
            raise ActionFailed(f"{path}: {mode!r} is not one of {', '.join(FAILURE_MODES)}")
        self.host.fail_next_action = mode

    # -- the driver -----------------------------------------------------------------

    def boot_id(self) -> str | None:
        return self.host.boot_id

    def run(self, action: CyborgAction, params: ActionParams, ctx: ActionContext) -> dict[str, Any]:
        self._failure_from_control_file()
        changed: dict[str, Any] = {}
        for sim_params in _sim_params(params):
            argv = ["simulated", action.name, json.dumps(sim_params, sort_keys=True)]
            if ctx.dry_run:
                ctx.log.add(CommandRecord(argv, None, "not run (dry run)", kind="dry_run"))
                continue
            started = time.monotonic()
            if action.restarts and sim_params.get("component", "bios") == "bios":
                ctx.restart_issued()  # the virtual host restarts within apply (only a BIOS reflash does)
            with self.lock:
                try:
                    outcome = self.host.apply(action.name, sim_params)
                except ValueError as error:  # the virtual host has no such component or DIMM
                    ctx.log.add(CommandRecord(argv, 1, str(error), kind="simulated"))
                    raise ActionFailed(str(error)) from None
                down = self.host.down
            status = 0 if outcome["outcome"] == "done" else 1
            output = json.dumps(outcome["changed"] or {"error": outcome["error"]}, sort_keys=True, default=str)
            ctx.log.add(CommandRecord(argv, status, output, kind="simulated", duration_s=time.monotonic() - started))
            if outcome["outcome"] == "hang":
                ctx.note("waiting for the host to answer", str(outcome["error"]))
                time.sleep(max(0.0, ctx.remaining()))
                raise ActionTimedOut(f"{action.name}: the host did not answer within the action's time budget")
            if outcome["outcome"] == "failed":
                raise ActionFailed(f"{action.name}: {outcome['error']}")
            self.applied.append({"action": action.name, "params": sim_params, "boot_id": self.host.boot_id})
            self._save()
            changed = {**changed, **outcome["changed"]}
            if "boot_id" in outcome["changed"]:
                changed["restarting"] = True
            if down:
                raise HostWentDown(f"{action.name}: the host went down and stays down")
        if changed.get("verdict") in ("fail", "gap"):  # verify_memory_under_load: found, or could not look
            raise VerificationFailed("; ".join(changed.get("failures", [])) or str(changed["verdict"]), changed)
        return changed

    def await_restart(self, action: CyborgAction, ctx: ActionContext, boot_id_before: str | None) -> None:
        """The host is away for its downtime (scaled); its agent reports nothing meanwhile."""
        if ctx.dry_run:
            return
        downtime = (COLD_REBOOT_S if self._cold(action) else WARM_REBOOT_S) * self.time_scale
        if downtime <= 0:
            return
        with self.lock:
            self.host.down = True  # away: no reports (not saved: the restart itself has happened)
        try:
            ctx.sleep(downtime)
        finally:
            with self.lock:
                self.host.down = False

    def _cold(self, action: CyborgAction) -> bool:
        if action.name in ("hard_ppr", "power_cycle", "reflash_firmware"):
            return True
        return action.name == "reboot" and bool(self.applied) and self.applied[-1]["params"].get("kind") == "cold"

    def verify(
        self, action: CyborgAction, params: ActionParams, ctx: ActionContext, boot_id_before: str | None
    ) -> dict[str, Any]:
        if ctx.dry_run:
            return {}
        boot_id = require_restarted(self, boot_id_before)
        checks: dict[str, Any] = {"boot_id": boot_id}
        if isinstance(params, InstallKernelParams):
            if self.host.kernel != params.release:
                raise ActionFailed(f"uname -r is {self.host.kernel}, not {params.release}")
            checks["kernel"] = self.host.kernel
        ctx.note("verified after restart", json.dumps(checks, sort_keys=True), kind="simulated")
        return checks

    def applied_count(self, action: str) -> int:
        return sum(1 for entry in self.applied if entry["action"] == action)


def write_failure(state_dir: Path, mode: str) -> None:
    """Tell an agent's simulated driver (in another process) what goes wrong with its next action."""
    if mode not in FAILURE_MODES:
        raise ValueError(f"{mode!r}: one of {', '.join(FAILURE_MODES)}")
    with contextlib.suppress(FileExistsError):
        state_dir.mkdir(parents=True)
    (state_dir / CONTROL_FILE).write_text(mode, encoding="utf-8")
