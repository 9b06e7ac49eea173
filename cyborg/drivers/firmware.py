"""Reflashing firmware on the real host: BIOS, BMC, NIC and disk, each to a pinned version.

For each target in order: read the inventory (dmidecode, ipmitool mc info, ethtool -i, smartctl),
skip it if it already runs the version, copy the image into the agent's state directory (a local
image only from FLEETFIX_AGENT_FIRMWARE_DIR, a regular file; a download at most MAX_IMAGE_BYTES),
check the copy's SHA-256 and flash that copy — so what is flashed is what was checked — with
fwupdmgr or the vendor tool configured for its kind, and read the inventory again. A BMC restarts after its update
and drops off the network meanwhile: it is waited for, and a flash it dropped out of is tried once
more. The first target that fails stops the rest. A BIOS update takes effect at the next boot, so
the host is rebooted (cold: the firmware must run) and the version checked after it.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from checker.parsers.firmware import parse_ethtool_driver
from checker.parsers.ipmi import parse_mc_info
from cyborg.actions import FirmwareTarget, ReflashFirmwareParams
from cyborg.commands import ActionContext, ActionFailed

if TYPE_CHECKING:
    from cyborg.drivers.linux import LinuxDriver

FWUPD = ["fwupdmgr", "--assume-yes", "--no-reboot-check", "--no-device-prompt", "--allow-older", "--allow-reinstall"]
FLASH_TIMEOUT_S = 1800
MAX_IMAGE_BYTES = 1 << 30  # BIOS, BMC, NIC and disk images are tens of MB; /dev/zero is endless
CHUNK = 1 << 20


def kind_of(component: str) -> str:
    return component.split(":", 1)[0]


def device_of(component: str) -> str:
    return component.split(":", 1)[1] if ":" in component else ""


def same_version(current: str | None, wanted: str) -> bool:
    """ethtool appends a board id ("28.39.1002 (DEL0000000031)"): the version is its first word."""
    if current is None:
        return False
    return current.strip() == wanted or current.split()[0] == wanted


def installed_version(ctx: ActionContext, component: str) -> str | None:
    kind, device = kind_of(component), device_of(component)
    if kind == "bios":
        result = ctx.run(["dmidecode", "-s", "bios-version"], changes=False)
        return result.stdout.strip() or None if result.returncode == 0 else None
    if kind == "bmc":
        result = ctx.run(["ipmitool", "mc", "info"], changes=False)
        return parse_mc_info(result.stdout).value if result.returncode == 0 else None
    if kind == "nic":
        result = ctx.run(["ethtool", "-i", device], changes=False)
        nic = parse_ethtool_driver(result.stdout, device).value if result.returncode == 0 else None
        return nic.firmware if nic else None
    result = ctx.run(["smartctl", "--info", "--json", device], changes=False)
    try:
        return str(json.loads(result.stdout).get("firmware_version") or "") or None
    except ValueError:
        return None


def flash_argv(tools: dict[str, list[str]], target: FirmwareTarget, image: str) -> list[str]:
    template = tools.get(kind_of(target.component))
    if template is None:
        return [*FWUPD, "install", image]
    values = {
        "{image}": image,
        "{version}": target.version,
        "{component}": target.component,
        "{device}": device_of(target.component),
    }
    argv = []
    for part in template:
        for placeholder, value in values.items():
            part = part.replace(placeholder, value)
        argv.append(part)
    return argv


def _store(chunks: Iterable[bytes], copy: Path, what: str) -> None:
    """Write chunks to `copy` (atomically, fsynced), refusing more than MAX_IMAGE_BYTES."""
    copy.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    temporary = copy.with_suffix(".part")
    written = 0
    try:
        with temporary.open("wb") as handle:
            for chunk in chunks:
                written += len(chunk)
                if written > MAX_IMAGE_BYTES:
                    raise ActionFailed(f"{what}: larger than {MAX_IMAGE_BYTES} bytes: not a firmware image")
                handle.write(chunk)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, copy)
    finally:
        temporary.unlink(missing_ok=True)


def _local_chunks(driver: LinuxDriver, target: FirmwareTarget, image: str) -> Iterable[bytes]:
    """The bytes of a local image, which must be a regular file inside the firmware directory."""
    if driver.firmware_dir is None:
        raise ActionFailed(
            f"precondition: {target.component}: local image {image} refused: FLEETFIX_AGENT_FIRMWARE_DIR is not set"
        )
    base = driver.firmware_dir.resolve()
    try:
        source = Path(image).resolve(strict=True)
    except OSError as error:
        raise ActionFailed(f"{target.component}: cannot read image {image}: {error.strerror}") from None
    if not source.is_relative_to(base):
        raise ActionFailed(f"{target.component}: image {image} is not inside the firmware directory {base}")
    try:
        # Non-blocking: opening a FIFO must not hang; no symlink swapped in since it was resolved.
        descriptor = os.open(source, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError as error:
        raise ActionFailed(f"{target.component}: cannot read image {image}: {error.strerror}") from None
    with os.fdopen(descriptor, "rb") as handle:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):  # what was opened, not what the name was
            raise ActionFailed(f"{target.component}: image {image} is not a regular file")
        while chunk := handle.read(CHUNK):
            yield chunk


def _download_chunks(url: str) -> Iterable[bytes]:
    import httpx  # only for a download: the agent does not carry an HTTP client it rarely needs

    with httpx.stream("GET", url, timeout=60, follow_redirects=True) as response:
        response.raise_for_status()
        yield from response.iter_bytes(CHUNK)


def fetch_image(driver: LinuxDriver, target: FirmwareTarget, ctx: ActionContext) -> str:
    """The image copied into the state directory, its SHA-256 the pinned one: the copy is what is flashed."""
    if not target.image or not target.sha256:
        raise ActionFailed(f"precondition: {target.component} {target.version}: no image and sha256 pinned")
    copy = driver.work_dir / "firmware" / f"{target.sha256}.img"
    if target.image.startswith("https://"):
        if not copy.exists() and not ctx.dry_run:
            _store(_download_chunks(target.image), copy, target.image)
            ctx.note(f"downloaded {target.image}", str(copy), kind="run")
    elif target.image.startswith("/"):
        chunks = _local_chunks(driver, target, target.image)
        if ctx.dry_run:
            for _ in chunks:  # checked and read, not copied
                pass
            return str(copy)
        _store(chunks, copy, target.image)
        ctx.note(f"copied {target.image}", str(copy), kind="run")
    else:
        raise ActionFailed(f"{target.component}: image must be an absolute path or an https:// URL")
    if ctx.dry_run and not copy.exists():
        return str(copy)
    digest = hashlib.sha256()
    with copy.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    ctx.note(f"sha256 {copy}", digest.hexdigest(), kind="run")
    if digest.hexdigest() != target.sha256:
        copy.unlink(missing_ok=True)
        raise ActionFailed(
            f"{target.component}: image {target.image} has SHA-256 {digest.hexdigest()}, pinned {target.sha256}"
        )
    return str(copy)


def wait_for_bmc(driver: LinuxDriver, ctx: ActionContext) -> str | None:
    """Until `ipmitool mc info` answers again (the BMC restarts after an update), within the budgets."""
    give_up = time.monotonic() + driver.bmc_wait_s
    while True:
        result = ctx.run(["ipmitool", "mc", "info"], timeout_s=30, changes=False)
        if result.returncode == 0:
            return parse_mc_info(result.stdout).value
        if time.monotonic() >= give_up or ctx.remaining() <= driver.poll_s:
            raise ActionFailed(f"the BMC did not answer again within {driver.bmc_wait_s:.0f} s")
        ctx.sleep(driver.poll_s)


def flash(driver: LinuxDriver, target: FirmwareTarget, ctx: ActionContext) -> dict[str, Any]:
    before = installed_version(ctx, target.component)
    if same_version(before, target.version):
        ctx.note(f"{target.component} already at {target.version}", before or "")
        return {"component": target.component, "version": target.version, "previous": before, "flashed": False}
    image = fetch_image(driver, target, ctx)
    argv = flash_argv(driver.firmware_tools, target, image)
    result = ctx.run(argv, timeout_s=FLASH_TIMEOUT_S)
    is_bmc = kind_of(target.component) == "bmc"
    if result.returncode != 0 and is_bmc and not ctx.dry_run:
        # The BMC dropped off mid-update: wait for it and try once more.
        wait_for_bmc(driver, ctx)
        result = ctx.run(argv, timeout_s=FLASH_TIMEOUT_S)
    if result.returncode != 0 or result.timed_out:
        raise ActionFailed(f"{target.component}: {argv[0]} exited {result.returncode}")
    flashed: dict[str, Any] = {"component": target.component, "version": target.version, "previous": before}
    if ctx.dry_run:
        return {**flashed, "flashed": False}
    if is_bmc:
        wait_for_bmc(driver, ctx)
    if kind_of(target.component) == "bios":
        return {**flashed, "flashed": True, "applies_at_boot": True}
    after = installed_version(ctx, target.component)
    if not same_version(after, target.version):
        raise ActionFailed(f"{target.component}: flashed, but it reports {after!r}, not {target.version}")
    return {**flashed, "flashed": True, "after": after}


def reflash(driver: LinuxDriver, params: ReflashFirmwareParams, ctx: ActionContext) -> dict[str, Any]:
    done: list[dict[str, Any]] = []
    for index, target in enumerate(params.targets):
        try:
            done.append(flash(driver, target, ctx))
        except ActionFailed as error:
            rest = [t.component for t in params.targets[index + 1 :]]
            skipped = f"; not attempted: {', '.join(rest)}" if rest else ""
            raise ActionFailed(f"{error}{skipped}") from None
    changed: dict[str, Any] = {"targets": done}
    if any(t.get("applies_at_boot") for t in done):
        changed.update(driver.restart(ctx, warm=False, release=driver.release()))  # cold: firmware must run
    return changed


def after_boot(params: ReflashFirmwareParams, ctx: ActionContext) -> dict[str, Any]:
    """After the reboot that applies a BIOS update: every target must now run its version."""
    versions = {}
    for target in params.targets:
        current = installed_version(ctx, target.component)
        if not same_version(current, target.version):
            raise ActionFailed(f"{target.component} runs {current!r} after the reboot, not {target.version}")
        versions[target.component] = current
    return {"versions": versions}
