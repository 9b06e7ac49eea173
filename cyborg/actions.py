"""The allow-list: every action cyborg can carry out, its parameters, time budget and safety facts.

Nothing outside this table runs on a host. Parameters are validated here on both sides: the
central service before it signs an envelope, the host again before it acts. `idempotent` must
agree with the remediator's contract table (remediator/actions.py; a test holds them together):
a non-idempotent action interrupted half-way is never started a second time. `restarts` actions
may end with the host restarting (the driver says when it did), so the agent that started them
reports their outcome after the boot.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

MAX_TIMEOUT_S = 4 * 3600
BOOKKEEPING_PARAMS = frozenset({"priority", "timeout_s", "dry_run"})
"""Step parameters that steer how an action is run rather than what it does."""


class ActionParams(BaseModel):
    # Each model's validator is built when it first validates, not at import: an agent builds only those
    # of the actions it is sent, where building them all (the image pattern's automaton most) held 0.9 MiB.
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class RebootParams(ActionParams):
    mode: Literal["warm", "cold"] = Field(
        "warm", description="warm: kexec into the kernel without firmware POST, where the kernel allows; cold: reboot."
    )


# Every value that reaches a command line starts with a letter or digit, so no tool can take it for
# an option ("--setopt=gpgcheck=0", "-r"), and holds only what its kind of name needs.
_COMPONENT = re.compile(r"^(bios|bmc|nic:[A-Za-z0-9][A-Za-z0-9_.\-]{0,14}|disk:/dev/[A-Za-z0-9][A-Za-z0-9_\-]{0,31})$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
VERSION_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._+\-:~]{0,63}$"
RELEASE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._+\-]{0,63}$"
PACKAGE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._+\-:=~]{0,127}$"
DIMM_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9 _.:#/\-]{0,127}$"
"""EDAC labels and SMBIOS locators: CPU_SrcID#1_MC#3_Chan#0_DIMM#0, mc#0csrow#0channel#0, CPU 0 DIMM 8."""
IMAGE_PATTERN = r"^(https://[^\s]+|/[A-Za-z0-9._+\-/]{1,1000})$"
"""An https URL, or an absolute path of plain name characters (the host confines it to its firmware directory)."""
IMAGE_MAX_LENGTH = len("https://") + 2000
"""A URL is bounded by a length rather than by a count in the pattern: a counted repeat of a Unicode class
compiles to megabytes of automaton, held by every process that imports this module (agents too)."""


class FirmwareTarget(ActionParams):
    component: str = Field(description="bios, bmc, nic:<interface> or disk:/dev/<device>.")
    version: str = Field(pattern=VERSION_PATTERN, description="The pinned version to flash.")
    image: str | None = Field(
        None,
        pattern=IMAGE_PATTERN,
        max_length=IMAGE_MAX_LENGTH,
        description="Image path (inside the host's FLEETFIX_AGENT_FIRMWARE_DIR) or https:// URL (real driver: needed).",
    )
    sha256: str | None = Field(None, description="The image's SHA-256, checked before flashing.")

    @field_validator("component")
    @classmethod
    def _known_component(cls, value: str) -> str:
        if not _COMPONENT.fullmatch(value):
            raise ValueError(f"{value!r} is not a flashable component (bios, bmc, nic:<iface>, disk:/dev/<dev>)")
        return value

    @field_validator("image")
    @classmethod
    def _no_parent_steps(cls, value: str | None) -> str | None:
        if value is not None and value.startswith("/") and ".." in value.split("/"):
            raise ValueError("an image path may not step out of its directory (..)")
        return value

    @field_validator("sha256")
    @classmethod
    def _hex_digest(cls, value: str | None) -> str | None:
        if value is not None and not _SHA256.fullmatch(value.lower()):
            raise ValueError("must be 64 hexadecimal characters")
        return value.lower() if value else value


class UpdateBmcFirmwareParams(ActionParams):
    """Firmware through the host's BMC (Redfish UpdateService.SimpleUpdate; docs/cyborg.md, "BMC protocols"): the
    BMC fetches the image itself, so only an https URL, pinned by its SHA-256, which the centre checks first."""

    component: Literal["bios", "bmc"] = Field(description="bios: the System's BIOS; bmc: the BMC's own firmware.")
    image: str = Field(
        pattern=r"^https://[^\s]+$",
        max_length=IMAGE_MAX_LENGTH,
        description="The image's https URL (the BMC fetches it; http is refused: the image would travel unchecked).",
    )
    sha256: str = Field(description="The image's SHA-256: fetched and checked before the BMC is asked.")
    version: str | None = Field(
        None,
        pattern=VERSION_PATTERN,
        description="The release the image carries, for the record (the simulated fleet's BMC installs it); the "
        "real driver reports the version the BMC reads back.",
    )

    @field_validator("sha256")
    @classmethod
    def _hex_digest(cls, value: str) -> str:
        if not _SHA256.fullmatch(value.lower()):
            raise ValueError("must be 64 hexadecimal characters")
        return value.lower()


class ReflashFirmwareParams(ActionParams):
    targets: list[FirmwareTarget] = Field(
        min_length=1, max_length=8, description="Flashed in order; the first failure aborts the rest."
    )

    @model_validator(mode="before")
    @classmethod
    def _single_target(cls, data: Any) -> Any:
        # A rule names one component (`component`, `version`, …) or several (`targets`).
        if isinstance(data, dict) and "targets" not in data and "component" in data:
            return {"targets": [data]}
        return data


class InstallKernelParams(ActionParams):
    release: str = Field(pattern=RELEASE_PATTERN, description="The kernel release `uname -r` must show afterwards.")
    package: str | None = Field(
        None, pattern=PACKAGE_PATTERN, description="Pinned package (name=version); default: by release."
    )
    erratum: str | None = Field(None, max_length=32, description="The erratum the kernel works around, if any.")


class HardPprParams(ActionParams):
    dimm: str = Field(pattern=DIMM_PATTERN, description="The DIMM (EDAC label or locator).")
    locations: list[Annotated[str, Field(pattern=DIMM_PATTERN)]] = Field(
        default_factory=list,
        max_length=8,
        description="Other names the firmware may print for this DIMM in a GHES record's `DIMM location:` or "
        "`fru_text:` (e.g. SMBIOS 'Bank Locator Locator', from the centre's label map). Only records naming "
        "the DIMM or one of these are repaired.",
    )
    capture_s: int = Field(
        600, ge=10, le=3600, description="How long to wait in firmware-first mode for an error with its address."
    )


class VerifyMemoryUnderLoadParams(ActionParams):
    seconds: int = Field(300, ge=10, le=3600, description="How long stressapptest runs (-s).")
    memory_percent: int = Field(
        60, ge=1, le=90, description="Memory tested (-M), as a share of MemAvailable: the host keeps the rest."
    )
    max_memory_mb: int | None = Field(None, ge=16, le=16 * 1024 * 1024, description="And at most this much.")
    stall_threshold_ms: float = Field(
        100.0, ge=1, le=10_000, description="A stall this long on the probed CPUs fails the verification."
    )
    dimm: str | None = Field(None, pattern=DIMM_PATTERN, description="The DIMM being verified (for the record).")
    min_coverage_percent: int = Field(
        50,
        ge=1,
        le=90,
        description="A run that tested less than this share of MemAvailable (read at its start) is a gap, never "
        "a pass: the kernel places the test's pages anywhere, so the share tested is about the chance that "
        "the repaired rows were among them.",
    )
    drained: bool = Field(
        False,
        description="Filled in by the centre, never by a plan: the host's scheduler hook drained it for this "
        "remediation. False: the action runs nothing and answers a gap (host not drained).",
    )

    @model_validator(mode="after")
    def _coverage_reachable(self) -> VerifyMemoryUnderLoadParams:
        if self.min_coverage_percent > self.memory_percent:
            raise ValueError(
                f"min_coverage_percent {self.min_coverage_percent} above memory_percent {self.memory_percent}: "
                "the run could never pass"
            )
        return self


class TuneErrorReportingParams(ActionParams):
    edac_poll_s: int = Field(37, ge=1, le=3600, description="EDAC polling interval (about 37 s is the sweet spot).")
    cmci: Literal["cmci"] | None = Field(
        None,
        description="cmci: turn corrected-error interrupts back on (a host left with CMCI disabled). There is no "
        "way to turn them off: polling alone loses the errors that show a failing DIMM.",
    )


class NoParams(ActionParams):
    pass


class PowerCycleParams(ActionParams):
    if_off: Literal["refuse", "power_on", "cycle_or_power_on"] = Field(
        "refuse",
        description="By the power state the BMC reads just before acting (cyborg/drivers/bmc.py, IfOff): refuse "
        "(the default) cycles a host that is on and sends nothing to one that is off (it may have been switched "
        "off on purpose: the remediation ends and the host goes to the silent-host probe); power_on turns on a "
        "host that is off and leaves one that is on alone (the host-powered-off rule); cycle_or_power_on cycles "
        "a host that is on and turns on one that is off.",
    )


MAX_CPU = 8191  # the largest NR_CPUS a kernel is built with (x86 MAXSMP)


class OfflineCpuParams(ActionParams):
    cpu: int = Field(strict=True, le=MAX_CPU, description="The logical CPU to take offline (cpuN in sysfs), 1 or more.")
    core: bool = Field(
        True,
        strict=True,
        description="Every CPU sharing its L1 or L2 too (SMT siblings, an E-core module's cores): the fault stays "
        "in use while any of them runs.",
    )

    @field_validator("cpu")
    @classmethod
    def _not_the_boot_cpu(cls, value: int) -> int:
        if value == 0:
            raise ValueError(
                "CPU 0 is the boot CPU: most kernels cannot take it offline (it has no online file in sysfs)"
            )
        if value < 0:
            raise ValueError("a CPU number is 1 or more")
        return value


MAX_GPU_INDEX = 63
GPU_BDF_PATTERN = r"^([0-9A-Fa-f]{4}|[0-9A-Fa-f]{8}):[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$"


class ResetGpuParams(ActionParams):
    gpu: int = Field(strict=True, ge=0, le=MAX_GPU_INDEX, description="nvidia-smi's index of the GPU (-i N).")
    bdf: str | None = Field(
        None,
        pattern=GPU_BDF_PATTERN,
        description="The GPU's PCI address as the signal named it: the reset is refused if index `gpu` is now "
        "another GPU (indexes follow enumeration and can move after a GPU is lost).",
    )
    uuid: str | None = Field(None, pattern=r"^GPU-[0-9a-fA-F-]{36}$", description="Likewise, its UUID.")
    drained: bool = Field(
        False,
        description="Filled in by the centre, never by a plan: the host's scheduler hook drained it for this "
        "remediation. False: nothing is reset (a reset kills every process on the GPU).",
    )


NumaNode = Annotated[str, Field(pattern=r"^\d{1,4}$")]
InterleaveWeight = Annotated[int, Field(ge=1, le=255)]


class InterleaveParams(ActionParams):
    weights: dict[NumaNode, InterleaveWeight] | None = Field(
        None,
        max_length=1024,
        description="NUMA node number -> weight 1..255 (the kernel's range). Left out of a rule, the central side "
        "fills in the host's class configuration (the interleave_weights_mismatch signal's `configured`); the host "
        "never guesses a ratio.",
    )


PAGE_SIZE = 4096
MAX_OFFLINED_PAGES = 64
"""Our own cap on poisoned pages per host (rasdaemon and mcelog have none): 256 KiB at most, and past it the
DIMM is a person's (the dimm-offlined-pages rule tickets one DIMM well before)."""


class SoftOfflinePageParams(ActionParams):
    address: str = Field(
        pattern=r"^0x[0-9a-f]{1,16}$",
        description="The page's physical address in lower-case hex, 4 KiB-aligned (page_ce_count's subject).",
    )
    max_offlined_pages: int = Field(
        MAX_OFFLINED_PAGES,
        strict=True,
        ge=1,
        le=4096,
        description="Refused when the host has this many poisoned 4 KiB pages already (meminfo HardwareCorrupted).",
    )

    @field_validator("address")
    @classmethod
    def _page_aligned(cls, value: str) -> str:
        if int(value, 16) % PAGE_SIZE:
            raise ValueError(f"{value} is not 4 KiB-aligned: give the page's address (the signal's subject)")
        if int(value, 16) == 0:
            raise ValueError("page 0 is never offlined")
        return value


ActionSite = Literal["host", "central"]


@dataclass(frozen=True)
class CyborgAction:
    name: str
    params: type[ActionParams]
    timeout_s: int
    idempotent: bool
    site: ActionSite = "host"
    restarts: bool = False
    description: str = ""

    def parse(self, params: dict[str, Any]) -> ActionParams:
        """The action's parameters, validated; bookkeeping keys (priority, timeout_s, dry_run) are not its own."""
        own = {k: v for k, v in params.items() if k not in BOOKKEEPING_PARAMS}
        try:
            return self.params.model_validate(own)
        except ValidationError as error:
            raise ActionRefused(f"{self.name}: bad parameters: {describe(error)}") from error


class ActionRefused(Exception):
    """An action or its parameters are not allowed; the message says which and why."""


def describe(error: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in item['loc']) or '(params)'}: {item['msg']}" for item in error.errors())


ACTIONS: dict[str, CyborgAction] = {
    a.name: a
    for a in (
        CyborgAction("reboot", RebootParams, 900, idempotent=False, restarts=True, description="kexec or reboot"),
        CyborgAction(
            "reflash_firmware",
            ReflashFirmwareParams,
            3600,
            idempotent=True,
            restarts=True,  # a BIOS update applies at the next boot
            description="fwupd or a vendor tool",
        ),
        CyborgAction(
            "install_kernel",
            InstallKernelParams,
            1800,
            idempotent=True,
            restarts=True,
            description="pinned package, default boot entry, boot it, verify uname -r",
        ),
        CyborgAction(
            "hard_ppr",
            HardPprParams,
            3600,
            idempotent=False,
            restarts=True,
            description="firmware-first capture, schedule hard PPR, reboot, back to CMCI",
        ),
        CyborgAction("tune_error_reporting", TuneErrorReportingParams, 120, idempotent=True),
        CyborgAction(
            "verify_memory_under_load",
            VerifyMemoryUnderLoadParams,
            3900,  # the longest run (3600 s) and the readings around it
            idempotent=True,
            description="stressapptest with the stall probe on; EDAC and kernel log before and after",
        ),
        CyborgAction(
            "restore_cmci", NoParams, 300, idempotent=True, description="the PPR tool's cmci command, then its mode"
        ),
        CyborgAction("repair_irq_affinity", NoParams, 120, idempotent=True),
        CyborgAction("enable_demotion", NoParams, 60, idempotent=True),
        CyborgAction("set_interleave_weights", InterleaveParams, 60, idempotent=True),
        CyborgAction(
            "set_numa_balancing", NoParams, 60, idempotent=True, description="turn on the memory-tiering bit (2)"
        ),
        CyborgAction("clear_sel", NoParams, 300, idempotent=True, description="archive the SEL, then clear it"),
        CyborgAction(
            "offline_cpu", OfflineCpuParams, 60, idempotent=True, description="take one CPU offline through sysfs"
        ),
        CyborgAction(
            "soft_offline_page",
            SoftOfflinePageParams,
            120,  # the kernel migrates the page's contents first
            idempotent=True,
            description="soft-offline one 4 KiB page through sysfs",
        ),
        CyborgAction(
            "reset_gpu",
            ResetGpuParams,
            300,
            idempotent=True,
            description="nvidia-smi -r -i N on a drained host, then the GPU checked back (pending remaps applied)",
        ),
        # Carried out from the central side: the host cannot do them for itself.
        CyborgAction("power_cycle", PowerCycleParams, 900, idempotent=False, site="central", restarts=True),
        CyborgAction("reimage", NoParams, 7200, idempotent=False, site="central", restarts=True),
        CyborgAction(
            "update_bmc_firmware",
            UpdateBmcFirmwareParams,
            3600,  # the image check, and the BMC's update task (FLEETFIX_REDFISH_TASK_WAIT_S, 1800 s by default)
            idempotent=False,  # a re-run mid-flash (a worker restart) would submit a second update to a BMC restarting
            site="central",
            restarts=False,  # the host runs on: a BIOS waits for the next boot, which is the plan's to order
            description="Redfish SimpleUpdate of the BIOS or BMC through the BMC, image pinned by SHA-256",
        ),
        CyborgAction("restart_agent", NoParams, 300, idempotent=True, site="central", description="cluster hook"),
        CyborgAction("drain", NoParams, 300, idempotent=True, site="central"),
        CyborgAction("undrain", NoParams, 300, idempotent=True, site="central"),
    )
}

HOST_ACTIONS = tuple(name for name, action in ACTIONS.items() if action.site == "host")


def timeout_of(action: CyborgAction, params: dict[str, Any]) -> int:
    """The step's own `timeout_s` if it sets one (1 s .. 4 h), else the action's."""
    value = params.get("timeout_s")
    if value is None:
        return action.timeout_s
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_TIMEOUT_S:
        raise ActionRefused(f"{action.name}: timeout_s must be 1..{MAX_TIMEOUT_S} seconds, not {value!r}")
    return value


def lookup(name: str) -> CyborgAction:
    action = ACTIONS.get(name)
    if action is None:
        raise ActionRefused(f"{name!r} is not a cyborg action (known: {', '.join(ACTIONS)})")
    return action
