"""Issuing host actions: the signing key, the parameters a plan leaves to cyborg, and envelopes.

The central executor (cyborg.central.executor) calls these when a step is a host action. A rule pack
may leave the pinned target to cyborg: a firmware reflash takes the baseline version from the signal
that justified it, a kernel install takes the patched kernel configured for the host's class (the
errata signal carries it, from the class baselines), interleave weights those the class is configured
for (the interleave_weights_mismatch signal carries them); a load test learns whether a scheduler hook
really drained the host. Nothing here touches the database.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from cyborg.actions import BOOKKEEPING_PARAMS, ActionRefused, CyborgAction, timeout_of
from cyborg.central.settings import CyborgSettings
from cyborg.envelope import Envelope, SignedMessage, Signer, generate_keypair, load_signer

DELIVERY_GRACE_S = 3600
"""How long past its envelope's expiry a message stays deliverable. Celery drops an expired message
without running its task, so the broker's expiry is the envelope's plus this grace: a host that
comes back late still sees the envelope, refuses it as `expired` and says so centrally."""


def message_expires_s(envelope_expires_s: int) -> int:
    """The Celery `expires` of an envelope's message: later than the envelope's own expiry."""
    return envelope_expires_s + DELIVERY_GRACE_S


class SigningKeyMissing(Exception):
    """No action signing key where the settings say; the message names the file and the command."""


def signer_for(settings: CyborgSettings) -> Signer:
    """The action signing key, read from its file (a CentralCyborg keeps the one it read). In development a
    missing default key is created (with its .pub beside it)."""
    path = settings.effective_action_key_file
    if path.exists():
        return load_signer(path)
    if settings.environment == "production" or settings.action_key_file is not None:
        raise SigningKeyMissing(f"{path}: no action signing key (create one with `fleetfix keys generate {path}`)")
    try:
        return generate_keypair(path, path.with_suffix(".pub"))
    except FileExistsError:  # another process made it first
        return load_signer(path)


def resolve_params(action: CyborgAction, params: dict[str, Any], evidence: dict[str, Any]) -> dict[str, Any]:
    """The action's own parameters with what the plan left to cyborg filled in, validated."""
    own = {k: v for k, v in params.items() if k not in BOOKKEEPING_PARAMS}
    signal = evidence.get("signal") or {}
    if action.name == "reflash_firmware" and "targets" not in own and "version" not in own:
        detail = signal.get("detail") or {}
        if signal.get("kind") == "firmware_below_baseline" and signal.get("subject") == own.get("component"):
            own["version"] = detail.get("baseline")
        if not own.get("version"):
            raise ActionRefused(f"reflash_firmware {own.get('component')!r}: no pinned version (set `version`)")
    if action.name == "install_kernel" and "release" not in own:
        detail = signal.get("detail") or {}
        pin = detail.get("patched_kernel") if signal.get("kind") == "errata_match" else None
        if not isinstance(pin, dict) or not pin.get("release"):
            raise ActionRefused(
                f"install_kernel: no release given and no patched kernel configured for {own.get('erratum')!r} "
                "on this host's hardware class (kernels in the class baselines)"
            )
        own["release"] = pin["release"]
        if pin.get("package") and "package" not in own:
            own["package"] = pin["package"]
    if action.name == "set_interleave_weights" and "weights" not in own:
        detail = signal.get("detail") or {}
        configured = detail.get("configured") if signal.get("kind") == "interleave_weights_mismatch" else None
        if not isinstance(configured, dict) or not configured:
            raise ActionRefused(
                "set_interleave_weights: no weights given and none configured for this host's hardware class "
                "(tiering.interleave in the class baselines)"
            )
        own["weights"] = configured
    if action.name == "offline_cpu" and "cpu" not in own:
        detail = signal.get("detail") or {}
        cpu = detail.get("cpu") if signal.get("kind") == "mce_cpu_corrected" else None
        if detail.get("scope") != "core" or not isinstance(cpu, int) or isinstance(cpu, bool):
            raise ActionRefused(
                "offline_cpu: no cpu given and the signal does not name one core (only an error in a core's own "
                "L0/L1 cache or TLB does; a shared cache's bank is logged by any CPU)"
            )
        own["cpu"] = cpu
    if action.name == "reset_gpu":
        own.update(gpu_target(own, signal))
        own["drained"] = drain_confirmed(evidence)  # what the centre knows, never what a plan claims
    if action.name == "soft_offline_page" and "address" not in own:
        page = signal.get("subject") if signal.get("kind") == "page_ce_count" else None
        if not isinstance(page, str) or not page:
            raise ActionRefused("soft_offline_page: no address given and the signal does not name a page")
        own["address"] = page
    if action.name == "verify_memory_under_load":
        own["drained"] = drain_confirmed(evidence)  # what the centre knows, never what a plan claims
    return action.parse(own).model_dump(mode="json", exclude_none=True)


GPU_SIGNALS_PREFIX = "gpu_"


def gpu_target(own: dict[str, Any], signal: dict[str, Any]) -> dict[str, Any]:
    """reset_gpu's GPU: the plan's own `gpu`, else the one the justifying GPU signal names (its detail's
    index, with the BDF and UUID so the host refuses a GPU whose index moved)."""
    detail = signal.get("detail") or {}
    if not str(signal.get("kind") or "").startswith(GPU_SIGNALS_PREFIX):
        detail = {}
    index = own.get("gpu", detail.get("index"))
    if not isinstance(index, int) or isinstance(index, bool):
        raise ActionRefused("reset_gpu: no gpu given and the signal does not name a GPU index (nvidia-smi's)")
    found: dict[str, Any] = {"gpu": index}
    if "gpu" not in own or own.get("gpu") == detail.get("index"):
        for key in ("bdf", "uuid"):
            if key not in own and isinstance(detail.get(key), str):
                found[key] = detail[key]
    return found


def drain_confirmed(evidence: dict[str, Any]) -> bool:
    """Whether a scheduler hook really drained the host and nothing undrained it since: the remediation's own
    `drain` record (remediator.draining), or `host_drain`, that of the remediation whose drain still holds the
    host. A cluster with no hook records `skipped`, a dry-run drain called nothing: neither is a drain."""
    if evidence.get("undrain"):
        return False
    record = evidence.get("drain") or evidence.get("host_drain")
    if not isinstance(record, dict) or record.get("outcome") != "succeeded":
        return False
    if "skipped" in record or "error" in record:
        return False
    commands = record.get("commands") or []
    return not any(isinstance(c, dict) and c.get("kind") == "dry_run" for c in commands)


def issue(
    signer: Signer,
    *,
    hostname: str,
    remediation_id: int,
    step: int,
    attempt: int,
    action: CyborgAction,
    params: dict[str, Any],
    step_params: dict[str, Any],
    expires_s: int,
    now: dt.datetime,
) -> tuple[Envelope, SignedMessage]:
    """A new envelope (a fresh id every attempt), signed."""
    envelope = Envelope(
        id=uuid.uuid4(),
        hostname=hostname,
        remediation_id=remediation_id,
        step=step,
        attempt=attempt,
        action=action.name,
        params=params,
        timeout_s=timeout_of(action, step_params),
        dry_run=bool(step_params.get("dry_run", False)),
        issued_at=now,
        expires_at=now + dt.timedelta(seconds=expires_s),
    )
    return envelope, signer.sign(envelope)
