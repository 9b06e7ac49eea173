"""Cyborg's central section of the settings: the key that signs host action envelopes and their expiry, the
BMCs' out-of-band power control, and the clusters' scheduler hooks (docs/cyborg.md).

A subclass of the shared section (core.settings): the key's default path is in DATA_DIR, and only
development creates a missing one. The central root loads it with the other stages' sections in one class
(api/settings.py); the host agent never imports it (its settings are the shared section and its own
FLEETFIX_AGENT_* ones). The variables keep their FLEETFIX_ names.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator

from core.settings import Settings


class CyborgSettings(Settings):
    action_key_file: Path | None = Field(
        None,
        description=(
            "Ed25519 private key (PEM) that signs host action envelopes (`fleetfix keys generate`); agents hold "
            "its public key. Empty: DATA_DIR/action-signing-key.pem, created on first use in development."
        ),
    )
    action_expires_s: int = Field(
        300,
        ge=30,
        le=86400,
        description=(
            "An action envelope no host started within this many seconds is refused by the host (short: an "
            "aborted envelope whose revoke did not reach the host cannot start long after)."
        ),
    )
    bmc_address_template: str = Field(
        "",
        description=(
            "A host's BMC address for out-of-band power control (cold power cycle, reimage), e.g. "
            "{hostname}-ipmi.mgmt. A host's `bmc_address` label wins. Empty: only hosts with that label."
        ),
    )
    bmc_username: str = Field("", description="IPMI user on the BMCs.")
    bmc_password_file: Path | None = Field(
        None, description="File holding the BMC password; ipmitool reads it with -f (never on a command line)."
    )
    scheduler_hooks: dict[str, dict[str, str | list[str]]] = Field(
        default_factory=dict,
        description=(
            'Drain/undrain/restart_agent hooks by cluster (* for any), JSON: {"*": {"drain": '
            '["/usr/local/bin/sched", "drain", "{hostname}"], "undrain": "https://sched.example/undrain", '
            '"restart_agent": ["ssh", "{hostname}", "systemctl", "restart", "fleetfix-agent"]}}: an argv template, '
            "or a URL that is POSTed JSON. Unset: drain and undrain are recorded no-ops; an agent restart fails "
            "(and a ticket follows)."
        ),
    )

    @field_validator("scheduler_hooks")
    @classmethod
    def _cyborg_hook_shapes(cls, value: dict[str, dict[str, str | list[str]]]) -> dict[str, dict[str, str | list[str]]]:
        for cluster, hooks in value.items():
            for name, hook in hooks.items():
                if name not in ("drain", "undrain", "restart_agent"):
                    raise ValueError(f"{cluster}: {name!r} is not a hook (drain, undrain, restart_agent)")
                if isinstance(hook, str) and not hook.startswith(("http://", "https://")):
                    raise ValueError(f"{cluster}.{name}: a string hook is an http(s) URL; a command is an argv list")
                if isinstance(hook, list) and not (hook and all(isinstance(part, str) and part for part in hook)):
                    raise ValueError(f"{cluster}.{name}: an argv list of non-empty strings")
        return value

    @property
    def effective_action_key_file(self) -> Path:
        return self.action_key_file or self.data_dir / "action-signing-key.pem"
