"""Cyborg's central section of the settings: the key that signs host action envelopes and their expiry, the
BMCs' out-of-band power control, and the clusters' scheduler hooks (docs/cyborg.md).

A subclass of the shared section (core.settings): the key's default path is in DATA_DIR, and only
development creates a missing one. The central root loads it with the other stages' sections in one class
(api/settings.py); the host agent never imports it (its settings are the shared section and its own
FLEETFIX_AGENT_* ones). The variables keep their FLEETFIX_ names.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from core.settings import Settings
from cyborg.drivers.image_url import not_content_addressed

BmcProtocol = Literal["ipmi", "redfish", "both"]


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
    bmc_username: str = Field("", description="IPMI and Redfish user on the BMCs.")
    bmc_password_file: Path | None = Field(
        None,
        description="File holding the BMC password; ipmitool reads it with -f, the Redfish driver when it opens a "
        "session (never on a command line, never logged).",
    )
    bmc_protocol: BmcProtocol = Field(
        "ipmi",
        description="How the BMCs are reached: ipmi (ipmitool), redfish (sushy), or both (Redfish first, IPMI when "
        "the Redfish service does not answer). A host's `bmc_protocol` label wins, then BMC_PROTOCOL_BY_CLASS.",
    )
    bmc_protocol_by_class: dict[str, BmcProtocol] = Field(
        default_factory=dict,
        description='BMC protocol per hardware class, JSON: {"r650": "redfish"}; classes not named use BMC_PROTOCOL.',
    )
    redfish_verify_tls: bool = Field(
        True, description="Verify the BMCs' and the image repository's TLS certificates (Redfish). Off only in a lab."
    )
    redfish_ca_file: Path | None = Field(
        None,
        description="CA bundle the BMCs' Redfish certificates and the image repository's are verified against. "
        "Empty: the system's CAs.",
    )
    redfish_system_id: str = Field(
        "",
        description="The ComputerSystem a BMC's Redfish service manages for its host. Empty: the only member of "
        "/Systems.",
    )
    redfish_connect_timeout_s: int = Field(10, ge=1, le=120, description="Redfish TCP connect timeout, seconds.")
    redfish_timeout_s: int = Field(60, ge=5, le=600, description="Redfish read timeout per request, seconds.")
    redfish_retries: int = Field(
        2,
        ge=1,
        le=5,
        description="Redfish attempts on a refused/reset connection, and retries of a GET answered 5xx (sushy).",
    )
    redfish_power_wait_s: int = Field(
        300, ge=10, le=1800, description="How long a power change may take to show in the BMC's PowerState."
    )
    redfish_task_wait_s: int = Field(
        1800, ge=30, le=14400, description="How long a SimpleUpdate's task is followed before the update fails."
    )
    redfish_require_content_addressed: bool = Field(
        True,
        description="A firmware or ISO URL a BMC is given must name its pinned SHA-256 in its path "
        "(content-addressed): the BMC fetches it again after the check. false allows other URLs.",
    )
    reimage_image_url: str = Field(
        "",
        description="https URL of the installer ISO for reinstalls over Redfish virtual media (with "
        "REIMAGE_IMAGE_DIGEST). Empty: a reinstall boots from PXE, as over IPMI.",
    )
    reimage_image_digest: str = Field(
        "", description="SHA-256 of REIMAGE_IMAGE_URL (64 hex characters), checked before the BMC is asked."
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

    @model_validator(mode="after")
    def _cyborg_reimage_image_pinned(self) -> CyborgSettings:
        url, digest = self.reimage_image_url, self.reimage_image_digest
        if bool(url) != bool(digest):
            raise ValueError("reimage_image_url and reimage_image_digest go together: the image is pinned by it")
        if url and not url.startswith("https://"):
            raise ValueError("reimage_image_url: an https URL (the operator's repository)")
        if digest and not re.fullmatch(r"[0-9a-f]{64}", digest):
            raise ValueError("reimage_image_digest: 64 lower-case hexadecimal characters")
        # Refused here, at start-up, rather than at every approved reinstall after its drain (review r2 finding 4)
        if url and self.redfish_require_content_addressed and (why := not_content_addressed(url, digest)) is not None:
            raise ValueError(
                f"reimage_image_url is not content-addressed ({why}); a reinstall would refuse it: use the "
                "repository's content-addressed URL, or set FLEETFIX_REDFISH_REQUIRE_CONTENT_ADDRESSED=false"
            )
        return self

    @property
    def effective_action_key_file(self) -> Path:
        return self.action_key_file or self.data_dir / "action-signing-key.pem"
