"""The host agent's own settings: FLEETFIX_AGENT_* environment variables.

They are the agent's alone (state directory, spool, delivery fallback, CPU pinning, collector
budgets), so they live here rather than in core.settings; the service-wide ones (broker URL,
report interval, hostname) stay there. Bad values and unknown FLEETFIX_AGENT_* names stop the agent
at start-up with a message naming the variable.
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, ValidationError, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from checker.collectors.redfish_client import RedfishSettings
from checker.parsers.common import parse_cpu_list

ENV_PREFIX = "FLEETFIX_AGENT_"


def _on_link(url: str, allowed: bool) -> bool:
    """Whether plain http to `url` is allowed: only behind the explicit opt-in, and only to an address that
    never leaves the host or its link (link-local: the Redfish Host Interface, DSP0270; loopback)."""
    try:
        address = ipaddress.ip_address(urlsplit(url).hostname or "")
    except ValueError:
        return False
    return allowed and (address.is_link_local or address.is_loopback)


HOST_ACTIONS_DEFAULT = (
    "reboot",
    "reflash_firmware",
    "install_kernel",
    "hard_ppr",
    "tune_error_reporting",
    "repair_irq_affinity",
    "enable_demotion",
    "set_interleave_weights",
    "set_numa_balancing",
    "clear_sel",
    "offline_cpu",
    "soft_offline_page",
    "restore_cmci",
    "verify_memory_under_load",
    "reset_gpu",
)
"""Cyborg's host actions (cyborg.actions.HOST_ACTIONS; the agent does not import cyborg to say so)."""
CPUS_UNPINNED = "all"
"""FLEETFIX_AGENT_CPUS's value that turns pinning off (the agent may run on every CPU, isolated ones too)."""
CPUS_MEANING = f"a cpu list such as 0-1,64; {CPUS_UNPINNED!r}: not pinned; empty: the housekeeping CPUs"


class AgentConfigError(Exception):
    """An agent setting has a bad value; the message names the variable."""


class AgentConfig(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid", validate_default=True)

    state_dir: Path = Field(
        Path("/var/lib/fleetfix-agent"),
        description="Where the agent keeps its collector cursors and its report spool.",
    )
    fallback_url: str = Field(
        "",
        description=(
            "Central service base URL (https://fleetfix.example). When the broker cannot take a report, "
            "it is sent as POST {url}/api/v1/reports. Empty: no HTTP fallback."
        ),
    )
    http_timeout_s: float = Field(10.0, gt=0, le=300, description="Timeout of one HTTP fallback request.")
    token: SecretStr = Field(
        SecretStr(""),
        description=(
            "This host's own API token (`fleetfix tokens issue --host HOSTNAME`), sent with the HTTP fallback; "
            "it may submit only this host's reports. Prefer TOKEN_FILE: the environment is easier to leak."
        ),
    )
    token_file: Path | None = Field(
        None, description="A file holding this host's API token (mode 0600); used when TOKEN is empty."
    )
    spool_max_reports: int = Field(
        1440,
        ge=1,
        le=100_000,
        description="Reports kept on disk while the central side is unreachable; beyond it the oldest are dropped.",
    )
    cpus: str = Field(
        "",
        description=(
            "Housekeeping CPUs to pin the agent to, as a cpu list ('0-1,64'). Empty: the online CPUs that are "
            f"neither isolated nor nohz_full, found at start-up (not pinned when there are none); {CPUS_UNPINNED!r}: "
            "not pinned."
        ),
    )
    collector_timeout_s: float = Field(15.0, gt=0, le=600, description="Time budget of each collector per cycle.")
    collector_timeouts: dict[str, float] = Field(
        default_factory=dict,
        description='Budgets for single collectors, JSON: {"sel": 60, "smart": 60} (those two are the defaults).',
    )
    inventory_refresh_s: float = Field(
        3600.0,
        ge=0,
        le=86_400,
        description="How long dmidecode, ipmitool mc info and ethtool -i answers are reused (0: run every cycle).",
    )
    max_report_bytes: int = Field(
        1_000_000, ge=50_000, le=50_000_000, description="Largest report sent; older log events are cut first."
    )
    delta_reports: bool = Field(
        False,
        description="Send a report as its changed sections against the base the centre last named, over HTTP, "
        "once the centre has named one (docs/report-schema.md, 'Delta reports'). Off by default in stage 1: a "
        "delta costs the intake ~3.7x a full report's parse, not yet measured against the intake replica.",
    )
    full_report_every: int = Field(
        60, ge=1, le=10_000, description="Cycles after which a report is sent in full again (a safety net)."
    )
    benchmark_window: str = Field(
        "01:00-05:00",
        description=(
            "Local time window HH:MM-HH:MM in which the agent runs its short benchmark once a day, at a minute of "
            "the window fixed per host, on one housekeeping CPU (docs/agent.md, 'Benchmark'). Empty: never."
        ),
    )
    # -- the BMC over Redfish (checker/collectors/redfish.py; docs/agent.md, "Redfish") --
    bmc_protocol: Literal["ipmi", "redfish", "both"] = Field(
        "ipmi",
        description=(
            "How the agent reads the BMC: ipmi (ipmitool/FreeIPMI in-band), redfish (the BMC's Redfish service), or "
            "both (Redfish preferred: the ipmi sel/sensors collectors fill only what Redfish did not this cycle)."
        ),
    )
    redfish_http_host_interface: bool = Field(
        False,
        description=(
            "Allow http:// for REDFISH_URL, and only to a link-local (169.254.0.0/16, fe80::/10: the Redfish Host "
            "Interface, DMTF DSP0270) or loopback address: the login would otherwise cross the network in clear."
        ),
    )
    redfish_url: str = Field(
        "",
        description=(
            "The BMC's Redfish service, https://ADDRESS (the Redfish Host Interface address, DMTF DSP0270, or the "
            "BMC's LAN address). Required with bmc_protocol redfish or both; empty: the redfish collector is off."
        ),
    )
    redfish_username: str = Field("", description="The BMC account the agent reads with (a read-only role is enough).")
    redfish_password_file: Path | None = Field(
        None, description="A file holding that account's password (mode 0600); read when a session is opened."
    )
    redfish_verify_tls: bool = Field(
        True, description="Verify the BMC's TLS certificate (off only for a BMC with a self-signed certificate)."
    )
    redfish_ca_bundle: Path | None = Field(
        None, description="A CA bundle to verify the BMC's certificate with (instead of the system's)."
    )
    redfish_timeout_s: float = Field(10.0, gt=0, le=120, description="Timeout of one Redfish request.")
    redfish_max_entries: int = Field(
        200,
        ge=1,
        le=1000,
        description="New log entries reported per BMC log service per cycle: the oldest unread, the rest in the "
        "next cycles (a first read: the newest).",
    )
    # -- the stall probe (checker/agent/stallprobe.py; docs/agent.md, "Stall probe") --
    stall_probe: bool = Field(
        True,
        description="Run the stall probe on the housekeeping CPUs (never isolated or nohz_full ones) and report it.",
    )
    stall_probe_period_ms: float = Field(
        100.0,
        ge=1,
        le=1000,
        description=(
            "The probe threads' wake-up period: every stall this long or longer is seen (its length to within one "
            "period), shorter ones only by chance; each wake-up costs CPU (docs/agent.md, 'Stall probe')."
        ),
    )
    stall_probe_threshold_ms: float = Field(
        5.0, gt=0, le=10_000, description="An overshoot at or over this counts as a stall (count and total)."
    )
    stall_probe_max_cpus: int = Field(
        2, ge=1, le=64, description="Housekeeping CPUs probed, spread over them (two tell all-core stalls from one's)."
    )
    stall_probe_window_s: float = Field(10.0, ge=1, le=600, description="How often the probe writes its results.")
    stall_probe_active_share: float = Field(
        1.0,
        ge=0.05,
        le=1,
        description=(
            "The share of every window the probe is awake (a duty cycle): its CPU cost scales with it, and stalls "
            "in the rest go unseen. 1: always awake, so every all-core stall of the period or longer is seen."
        ),
    )
    # -- cyborg: actions on this host (docs/cyborg.md) --
    action_public_key: Path | None = Field(
        None,
        description="PEM file of the central service's action-signing public key. Unset: every action is refused.",
    )
    allowed_actions: list[str] = Field(
        default_factory=lambda: list(HOST_ACTIONS_DEFAULT),
        description="The host's own allow-list: actions outside it are refused even when signed.",
    )
    driver: Literal["linux", "simulated"] = Field(
        "linux", description="linux: the real tools; simulated: act on (and report) a virtual host."
    )
    warm_reboot: bool = Field(True, description="Reboot through kexec where the kernel allows it.")
    firmware_tools: dict[str, list[str]] = Field(
        default_factory=dict,
        description=(
            'Vendor flash tools as argv templates by component kind (bios, bmc, nic, disk): {"bmc": '
            '["/opt/vendor/flash", "--file", "{image}"]}. Placeholders: {image} {version} {component} {device}. '
            "Unset kinds use fwupdmgr."
        ),
    )
    firmware_dir: Path | None = Field(
        None,
        description=(
            "Where local firmware images may come from: a reflash whose image is a path outside it (or not a "
            "regular file) is refused; the image is copied into the state directory, checked and that copy "
            "flashed. Unset: only https:// images."
        ),
    )
    ppr_tool: dict[str, list[str]] = Field(
        default_factory=dict,
        description=(
            "The vendor/BMC tool of the hard-PPR flow as argv templates: firmware_first, cmci (switch memory error "
            "reporting), schedule (one per address: {address} {dimm}), optionally mode (prints the current mode, "
            "checked after a switch back to CMCI). Unset: hard_ppr and restore_cmci fail their precondition."
        ),
    )
    simulate_hardware_class: str = Field("", description="driver=simulated: the virtual host's hardware class.")
    simulate_faults: list[str] = Field(default_factory=list, description="driver=simulated: faults it starts with.")
    simulate_time_scale: float = Field(
        1.0, ge=0, le=10, description="driver=simulated: restart downtime multiplier (0: restarts take no time)."
    )

    @field_validator("fallback_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if value and not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL, or empty")
        return value.rstrip("/")

    @field_validator("redfish_url")
    @classmethod
    def _redfish_url(cls, value: str, info: ValidationInfo) -> str:
        protocol = info.data.get("bmc_protocol", "ipmi")
        if protocol != "ipmi" and not value:
            raise ValueError(f"needed with {ENV_PREFIX}BMC_PROTOCOL={protocol}")
        if value and not value.startswith(("http://", "https://")):
            raise ValueError("must be an https:// URL, or empty")
        if value.startswith("http://") and not _on_link(value, info.data.get("redfish_http_host_interface", False)):
            # The session login (or Basic auth) would carry the password in clear; central refuses http too
            # (cyborg/drivers/redfish_client.py base_url). Review r5 finding 13.
            raise ValueError(
                "http:// is refused (the BMC password would travel in clear): use https://, or set "
                f"{ENV_PREFIX}REDFISH_HTTP_HOST_INTERFACE=true for a link-local Host Interface address"
            )
        if value and urlsplit(value).username is not None:
            raise ValueError("must not carry credentials: use REDFISH_USERNAME and REDFISH_PASSWORD_FILE")
        return value.rstrip("/")

    @field_validator("redfish_password_file", "redfish_ca_bundle")
    @classmethod
    def _readable_file(cls, value: Path | None) -> Path | None:
        if value is not None and not value.is_file():
            raise ValueError(f"{str(value)!r} is not a readable file")
        return value

    @property
    def redfish_settings(self) -> RedfishSettings | None:
        """How the redfish collector reaches the BMC; None when it is off."""
        if not self.redfish_url:
            return None
        return RedfishSettings(
            url=self.redfish_url,
            username=self.redfish_username,
            password_file=self.redfish_password_file,
            verify_tls=self.redfish_verify_tls,
            ca_bundle=self.redfish_ca_bundle,
            timeout_s=self.redfish_timeout_s,
            max_entries=self.redfish_max_entries,
            inventory_every_s=max(self.inventory_refresh_s, 60.0),
        )

    @field_validator("cpus")
    @classmethod
    def _cpu_list(cls, value: str) -> str:
        value = value.strip()
        if not value or value == CPUS_UNPINNED:
            return value
        parsed = parse_cpu_list(value)
        if parsed.problems:
            raise ValueError(f"{parsed.problems[0]} ({CPUS_MEANING})")
        if not parsed.value:
            raise ValueError(f"names no CPU ({CPUS_MEANING})")
        return value

    @field_validator("benchmark_window")
    @classmethod
    def _window(cls, value: str) -> str:
        from checker.agent.benchmark import parse_window

        parse_window(value)  # its WindowError is a ValueError: the message names the format
        return value.strip()

    @field_validator("collector_timeouts")
    @classmethod
    def _known_collectors(cls, value: dict[str, float]) -> dict[str, float]:
        from checker.cycle import COLLECTORS, OPTIONAL_COLLECTORS

        for name, seconds in value.items():
            if name not in COLLECTORS and name not in OPTIONAL_COLLECTORS:
                raise ValueError(f"no collector {name!r} (collectors: {', '.join(COLLECTORS)})")
            if not 0 < seconds <= 600:
                raise ValueError(f"{name}: a budget is 0-600 seconds, not {seconds}")
        return value

    @field_validator("token_file")
    @classmethod
    def _token_file_readable(cls, value: Path | None) -> Path | None:
        if value is not None:
            try:
                text = value.read_text(encoding="utf-8").strip()
            except OSError as error:
                raise ValueError(f"cannot read {str(value)!r}: {error.strerror}") from None
            if not text:
                raise ValueError(f"{str(value)!r} is empty")
        return value

    @property
    def http_token(self) -> str:
        """The bearer token for the HTTP fallback: TOKEN, else the contents of TOKEN_FILE, else none."""
        if self.token.get_secret_value():
            return self.token.get_secret_value()
        if self.token_file is not None:
            return self.token_file.read_text(encoding="utf-8").strip()
        return ""

    @field_validator("allowed_actions")
    @classmethod
    def _host_actions(cls, value: list[str]) -> list[str]:
        unknown = [name for name in value if name not in HOST_ACTIONS_DEFAULT]
        if unknown:
            raise ValueError(f"{unknown[0]!r} is not a host action ({', '.join(HOST_ACTIONS_DEFAULT)})")
        return value

    @property
    def cpu_set(self) -> set[int]:
        """The CPUs the setting names; empty when it names none (empty: found at start-up; 'all': not pinned)."""
        if self.cpus == CPUS_UNPINNED:
            return set()
        return set(parse_cpu_list(self.cpus).value)

    @property
    def pinning_off(self) -> bool:
        """FLEETFIX_AGENT_CPUS=all: the operator wants the agent on every CPU, isolated ones included."""
        return self.cpus == CPUS_UNPINNED


def load_agent_config(**overrides: object) -> AgentConfig:
    """The agent's settings from the environment (and overrides, from command-line options)."""
    known = {f"{ENV_PREFIX}{name.upper()}" for name in AgentConfig.model_fields}
    unknown = sorted(key for key in os.environ if key.startswith(ENV_PREFIX) and key not in known)
    if unknown:
        raise AgentConfigError(f"{unknown[0]}: unknown agent setting (known: {', '.join(sorted(known))})")
    try:
        return AgentConfig(**overrides)  # type: ignore[arg-type]
    except ValidationError as error:
        described = []
        for item in error.errors():
            field = str(item["loc"][0]) if item["loc"] else ""
            described.append(f"{ENV_PREFIX}{field.upper()}: {item['msg']} (got {item.get('input')!r})")
        raise AgentConfigError("; ".join(described)) from error
