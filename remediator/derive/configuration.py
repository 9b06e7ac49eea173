"""Signals about how a host is set up rather than what happened to it: emitted on every report
while the condition holds, so a rule sees them whenever it looks.

EDAC polling interval, CPU errata on an unpatched kernel, firmware below the class baseline;
CXL memory tiers are remediator.derive.tiers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from checker.parsers.edac import edac_poll_counts, edac_polls
from checker.schemas import EdacState, Firmware, Identity
from remediator.baselines import ClassBaseline, FirmwareBaselines, is_below
from remediator.errata import Erratum, matching_errata
from remediator.signals import SignalValue


def edac_poll_signals(edac: EdacState | None) -> list[SignalValue]:
    """The polling interval, and whether this host's EDAC driver polls at all (only then does it matter)."""
    if edac is None or edac.poll_msec is None:
        return []
    names = sorted({c.mc_name for c in edac.controllers if c.mc_name})
    verdicts = {edac_polls(name) for name in names}
    polls = True if True in verdicts else (False if verdicts == {False} else None)
    counting = {edac_poll_counts(name) for name in names} - {None}
    counts = "aggregates" if "aggregates" in counting else ("latches" if counting == {"latches"} else None)
    detail = {"poll_msec": edac.poll_msec, "polls": polls, "counts": counts, "controllers": names[:8]}
    return [SignalValue("edac_poll_interval", "edac", edac.poll_msec / 1000, detail)]


def errata_signals(
    identity: Identity | None, errata: Sequence[Erratum], baseline: ClassBaseline | None
) -> list[SignalValue]:
    """A CPU with a known erratum on a kernel that is not its class's configured fix. Whether a kernel
    is fixed comes from the class's configuration only (its release, or one it accepts); without one
    the signal says so (`configured: false`) instead of guessing from the release name."""
    # Without a kernel release there is no telling patched from unpatched: say nothing rather than guess.
    if identity is None or not identity.kernel:
        return []
    kernel = identity.kernel
    signals = []
    for erratum, cpu in matching_errata(identity.cpus, errata):
        fix = baseline.kernels.get(erratum.id) if baseline is not None else None
        if fix is not None and (kernel == fix.release or kernel in fix.accept):
            continue
        detail = {
            "cpu": {
                "vendor": cpu.vendor,
                "family": cpu.family,
                "model": cpu.model,
                "stepping": cpu.stepping,
                "microcode": f"0x{cpu.microcode:x}" if cpu.microcode is not None else None,
                "model_name": cpu.model_name,
            },
            "kernel": kernel,
            "remediation": erratum.remediation,
            "configured": fix is not None,
            "patched_kernel": {"release": fix.release, "package": fix.package} if fix is not None else None,
            "withdrawn": fix.withdrawn.get(kernel) if fix is not None else None,
            "source": erratum.source,
        }
        signals.append(SignalValue("errata_match", erratum.id, 1.0, detail))
    return signals


def firmware_signals(
    identity: Identity | None,
    hardware_class: str,
    baselines: FirmwareBaselines,
    *,
    served: Mapping[str, str] | None = None,
) -> list[SignalValue]:
    """Firmware below the class baseline. BIOS and BMC versions come from the host's own reading
    (dmidecode's SMBIOS table, written by the running BIOS at this boot; ipmitool mc info, asked of the
    running BMC); `served`, the versions the BMC's Redfish FirmwareInventory says run
    (remediator/derive/redfish.py), fills in only where the host's reading is missing: an inventory
    can list an image staged for the next reset, the host's reading cannot. NICs are compared per
    driver (ethtool -i), which Redfish does not name, so its NIC and drive versions are not used."""
    baseline = baselines.for_class(hardware_class)
    served = served or {}
    if baseline is None or (identity is None and not served):
        return []
    firmware = identity.firmware if identity is not None else Firmware()
    checks: list[tuple[str, str | None, str | None, str]] = []
    for subject, own, wanted in (
        ("bios", firmware.bios_version, baseline.bios),
        ("bmc", firmware.bmc_firmware, baseline.bmc),
    ):
        current = own or served.get(subject)
        checks.append((subject, current, wanted, "host" if own else "redfish"))
    for nic in firmware.nics:
        if nic.driver is not None and nic.driver in baseline.nic:
            checks.append((f"nic:{nic.interface}", nic.firmware, baseline.nic[nic.driver], "host"))
    signals = [
        SignalValue(
            "firmware_below_baseline",
            subject,
            1.0,
            {"current": current, "baseline": wanted, "hardware_class": hardware_class, "source": source},
        )
        for subject, current, wanted, source in checks
        if is_below(current, wanted)
    ]
    if identity is None:
        return signals
    revisions = [c.microcode for c in identity.cpus if c.microcode is not None]
    current = f"0x{min(revisions):x}" if revisions else None
    if baseline.microcode is not None and is_below(current, baseline.microcode):
        # Microcode is not flashed like a BIOS: it comes with the OS's microcode package (loaded early at boot)
        # or inside a BIOS update. A BIOS below its baseline is the one to fix first: it likely carries it.
        cpu = identity.cpus[0]
        detail = {
            "current": current,
            "baseline": baseline.microcode,
            "hardware_class": hardware_class,
            "vendor": cpu.vendor,
            "cpuid": f"{cpu.family:02x}-{cpu.model:02x}-{cpu.stepping if cpu.stepping is not None else '?'}",
            "package": MICROCODE_PACKAGES.get(cpu.vendor, "the vendor's microcode package"),
            "bios_below_baseline": any(s.subject == "bios" for s in signals),
        }
        signals.append(SignalValue("microcode_below_baseline", "microcode", 1.0, detail))
    return signals


MICROCODE_PACKAGES = {"GenuineIntel": "intel-microcode", "AuthenticAMD": "amd64-microcode"}
"""The Debian names; RHEL and SUSE ship them as microcode_ctl / ucode-intel / ucode-amd and linux-firmware."""
