"""The Redfish BMC driver (cyborg/drivers/redfish.py) against a real Redfish service: sushy-emulator running as a
process on 127.0.0.1 over HTTPS with Basic auth (tests/cyborg/redfish_emulator.py). Power cycles with the
state read before and after, a SimpleUpdate with a pinned image (and one whose checksum is wrong: refused
before the BMC is asked), a reinstall from virtual media through the central executor, one kept session
per BMC, a BMC that does not answer (and IPMI taking over under `both`), and no credential in any log."""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from cyborg.central import CentralCyborg, Done, HandedOver, Order, StepFailed, Target
from cyborg.central.bmcs import BmcChoice
from cyborg.central.settings import CyborgSettings
from cyborg.commands import ActionContext, ActionFailed
from cyborg.drivers.bmc import IpmitoolBmc
from cyborg.drivers.redfish import RedfishBmc
from cyborg.drivers.redfish_client import RedfishConfig, RedfishUnreachable, request_body
from tests.cyborg.helpers import RecordedSystem
from tests.cyborg.redfish_emulator import SYSTEM_UUID, ImageServer, LabCa, RedfishEmulator
from tests.processes import free_port

USER = "fleetfix-bmc"
PASSWORD = "s3cret-PW-7731"
FIRMWARE = b"BIOS image 1.1.0 " * 64
ISO = b"installer ISO " * 256
BIOS_FILE = f"bios-1.1.0-{hashlib.sha256(FIRMWARE).hexdigest()}.bin"  # content-addressed, as the driver requires
ISO_FILE = f"installer-{hashlib.sha256(ISO).hexdigest()}.iso"
WRONG_FILE = f"bios-{'0' * 64}.bin"
SYSTEM = f"/redfish/v1/Systems/{SYSTEM_UUID}"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A CA, the BMC password file and the operator's image repository (HTTPS), shared by the module."""
    directory = tmp_path_factory.mktemp("redfish")
    ca = LabCa(directory)
    password_file = directory / "bmc-password"
    password_file.write_text(PASSWORD + "\n")
    images = directory / "images"
    images.mkdir()
    (images / BIOS_FILE).write_bytes(FIRMWARE)
    (images / ISO_FILE).write_bytes(ISO)
    (images / WRONG_FILE).write_bytes(FIRMWARE)
    server = ImageServer(images, ca)
    yield {"dir": directory, "ca": ca, "password_file": password_file, "images": server}
    server.stop()


def start(lab: dict[str, Any], tmp_path: Path, power_state: str = "Off") -> RedfishEmulator:
    return RedfishEmulator(tmp_path / "bmc", lab["ca"], username=USER, password=PASSWORD, power_state=power_state)


@pytest.fixture
def bmc_off(lab: dict[str, Any], tmp_path: Path) -> Iterator[RedfishEmulator]:
    emulator = start(lab, tmp_path, "Off")
    yield emulator
    emulator.stop()


@pytest.fixture
def bmc_on(lab: dict[str, Any], tmp_path: Path) -> Iterator[RedfishEmulator]:
    emulator = start(lab, tmp_path, "On")
    yield emulator
    emulator.stop()


def driver(lab: dict[str, Any], **overrides: Any) -> RedfishBmc:
    config = {"username": USER, "password_file": lab["password_file"], "ca_file": lab["ca"].ca_file, "poll_s": 0.5}
    return RedfishBmc(RedfishConfig(**{**config, **overrides}))


def context(timeout_s: float = 120, *, dry_run: bool = False) -> ActionContext:
    return ActionContext(None, timeout_s=timeout_s, dry_run=dry_run)


def http_calls(ctx: ActionContext) -> list[tuple[str, str, int | None]]:
    """(method, path, status) of each request the action logged."""
    out = []
    for record in ctx.log.records:
        if record.kind == "http" and len(record.argv) == 2:
            method, url = record.argv
            out.append((method, "/" + url.split("/", 3)[3] if url.count("/") >= 3 else url, record.exit_status))
    return out


def settings_for(lab: dict[str, Any], tmp_path: Path, **values: Any) -> CyborgSettings:
    return CyborgSettings(
        data_dir=tmp_path,
        scheduler_hooks={},
        bmc_username=USER,
        bmc_password_file=lab["password_file"],
        redfish_ca_file=lab["ca"].ca_file,
        **values,
    )


# -- power --------------------------------------------------------------------------------------------


def test_a_host_that_is_off_is_turned_on_and_its_state_read_before_and_after(
    lab: dict[str, Any], bmc_off: RedfishEmulator
) -> None:
    bmc, ctx = driver(lab), context()
    assert bmc.power_state("h1", bmc_off.address, ctx) == "off"
    done = bmc.power_cycle("h1", bmc_off.address, ctx, if_off="power_on")
    assert done == {"bmc": bmc_off.address, "protocol": "redfish", "was": "off", "power": "on", "now": "on"}
    assert bmc_off.system()["PowerState"] == "On"  # as the service itself says, not the driver
    resets = [r for r in ctx.log.records if r.argv[-1].endswith("ComputerSystem.Reset")]
    assert [json.loads(r.output) for r in resets] == [{"ResetType": "On"}]  # no ForceOff for a host already off
    assert resets[0].exit_status == 204
    assert ctx.log.records[-1].argv == ["wait for power on"]
    bmc.close()


def test_power_on_leaves_a_host_that_is_on_alone_and_cycle_or_power_on_cycles_it(
    lab: dict[str, Any], bmc_on: RedfishEmulator
) -> None:
    """Review r2 finding 9: host-powered-off's `if_off: power_on` finds the host on (it came on since the probe):
    nothing is sent, its boot is not cut short. A reinstall's cycle_or_power_on cycles it."""
    bmc, ctx = driver(lab), context()
    done = bmc.power_cycle("h1", bmc_on.address, ctx, if_off="power_on")
    assert done == {"bmc": bmc_on.address, "protocol": "redfish", "was": "on", "power": "none"}
    assert not [r for r in ctx.log.records if r.argv[-1].endswith("ComputerSystem.Reset")]  # nothing sent
    cycled = bmc.power_cycle("h1", bmc_on.address, context(), if_off="cycle_or_power_on")
    assert cycled["power"] in ("cycle", "off_on")
    bmc.close()


def test_a_host_that_is_off_is_not_turned_on_by_a_plain_power_cycle(
    lab: dict[str, Any], bmc_off: RedfishEmulator
) -> None:
    """Issue 19 item 1: an operator may have switched the host off; the power_cycle action's default refuses."""
    bmc, ctx = driver(lab), context()
    with pytest.raises(ActionFailed, match=r"h1 is off .* if_off is refuse"):
        bmc.power_cycle("h1", bmc_off.address, ctx)
    assert bmc_off.system()["PowerState"] == "Off"
    assert not [r for r in ctx.log.records if r.argv[-1].endswith("ComputerSystem.Reset")]  # nothing sent
    bmc.close()


def test_a_running_host_goes_off_and_on_again_each_state_read_back(
    lab: dict[str, Any], bmc_on: RedfishEmulator
) -> None:
    """sushy-emulator's System offers no PowerCycle, so the driver uses ForceOff, waits for Off, then On."""
    bmc, ctx = driver(lab), context()
    done = bmc.power_cycle("h1", bmc_on.address, ctx)
    assert (done["was"], done["power"], done["now"]) == ("on", "off_on", "on")
    steps = [
        json.loads(r.output)["ResetType"] if r.kind == "http" else r.argv[0]
        for r in ctx.log.records
        if r.argv[-1].endswith("ComputerSystem.Reset") or r.kind == "wait"
    ]
    assert steps == ["ForceOff", "wait for power off", "On", "wait for power on"]
    assert bmc_on.system()["PowerState"] == "On"
    bmc.close()


def test_a_dry_run_reads_the_state_and_sends_no_reset(lab: dict[str, Any], bmc_on: RedfishEmulator) -> None:
    bmc, ctx = driver(lab), context(dry_run=True)
    done = bmc.power_cycle("h1", bmc_on.address, ctx)
    assert done["was"] == "on"
    assert [r.argv[0] for r in ctx.log.records if r.kind == "dry_run"] == ["POST", "POST"]
    assert "Actions/ComputerSystem.Reset" not in bmc_on.output()
    bmc.close()


# -- firmware -----------------------------------------------------------------------------------------


def test_a_simple_update_with_a_pinned_image_is_followed_to_its_end(
    lab: dict[str, Any], bmc_off: RedfishEmulator
) -> None:
    bmc, ctx = driver(lab), context()
    image = f"{lab['images'].url}/{BIOS_FILE}"
    done = bmc.update_firmware("h1", bmc_off.address, "bios", image, hashlib.sha256(FIRMWARE).hexdigest(), ctx)
    assert (done["version_before"], done["version_after"]) == ("1.0.0", "1.1.0")
    assert done["changed"] == {"bios": {"before": "1.0.0", "after": "1.1.0"}}
    assert done["task"] == "Completed OK"
    assert done["pending_reboot"] is False
    # sushy-emulator has no FirmwareInventory collection (404): the System's BiosVersion and the Manager's
    # FirmwareVersion stand in, and the result says so.
    assert done["inventory_source"] == "ComputerSystem.BiosVersion, Manager.FirmwareVersion"
    assert done["before"]["bmc"] == done["after"]["bmc"] == {"name": "BMC", "version": "1.00"}
    assert bmc_off.system()["BiosVersion"] == "1.1.0"
    # The image was fetched and checked first, before any request reached the BMC.
    first = ctx.log.records[0]
    assert (first.argv, first.exit_status) == (["GET", image], 200)
    assert first.output == f"{len(FIRMWARE)} bytes, sha256 {hashlib.sha256(FIRMWARE).hexdigest()}"
    [update] = [r for r in ctx.log.records if r.argv[0] == "POST" and "SimpleUpdate" in r.argv[1]]
    assert json.loads(update.output) == {"ImageURI": image, "Targets": [SYSTEM], "TransferProtocol": "HTTPS"}
    assert ("GET", "/redfish/v1/TaskService/Tasks/42", 200) in http_calls(ctx)
    bmc.close()


def test_an_image_whose_checksum_differs_is_refused_before_the_bmc_is_asked(
    lab: dict[str, Any], bmc_off: RedfishEmulator
) -> None:
    bmc, ctx = driver(lab), context()
    image = f"{lab['images'].url}/{WRONG_FILE}"  # a content-addressed name serving other bytes
    roots = bmc_off.requests("GET", "/redfish/v1/")  # the fixture's own probe that the service is up
    with pytest.raises(ActionFailed, match=r"not the pinned 0{64}: the BMC was not asked"):
        bmc.update_firmware("h1", bmc_off.address, "bios", image, "0" * 64, ctx)
    assert [r.argv for r in ctx.log.records] == [["GET", image]]  # the image, and nothing of the BMC
    assert bmc_off.requests("GET", "/redfish/v1/") == roots
    assert "SimpleUpdate" not in bmc_off.output()
    assert bmc_off.system()["BiosVersion"] == "1.0.0"


def test_an_update_the_bmc_refuses_fails_with_its_answer(lab: dict[str, Any], bmc_off: RedfishEmulator) -> None:
    """sushy-emulator updates only the BIOS: a Manager target is answered 400, which the step says."""
    bmc, ctx = driver(lab), context()
    image = f"{lab['images'].url}/{BIOS_FILE}"
    with pytest.raises(ActionFailed, match=r"UpdateService\.SimpleUpdate: the BMC answered 400"):
        bmc.update_firmware("h1", bmc_off.address, "bmc", image, hashlib.sha256(FIRMWARE).hexdigest(), ctx)
    bmc.close()


# -- sessions, credentials, TLS, a BMC that does not answer --------------------------------------------


def test_one_session_per_bmc_is_kept_for_every_call_and_closed(lab: dict[str, Any], bmc_off: RedfishEmulator) -> None:
    """sushy-emulator offers no SessionService, so sushy's SessionOrBasicAuth settles on Basic auth: the client
    (its login and the service root it read) is what is kept, and it is opened once for many calls."""
    bmc = driver(lab)
    roots = bmc_off.requests("GET", "/redfish/v1/")  # the fixture's own probe that the service is up
    assert bmc.power_state("h1", bmc_off.address, context()) == "off"
    assert bmc.power_state("h1", bmc_off.address, context()) == "off"
    client = bmc.clients.get(bmc_off.address)
    assert (len(bmc.clients), client.opened, bmc_off.requests("GET", "/redfish/v1/")) == (1, 1, roots + 1)
    bmc.close()
    assert len(bmc.clients) == 0
    bmc.power_state("h1", bmc_off.address, context())
    assert bmc_off.requests("GET", "/redfish/v1/") == roots + 2  # closed: a new login
    bmc.close()


def test_no_credential_reaches_the_command_log_or_the_logs(
    lab: dict[str, Any], bmc_off: RedfishEmulator, caplog: pytest.LogCaptureFixture
) -> None:
    bmc, ctx = driver(lab), context()
    with caplog.at_level(logging.DEBUG):
        bmc.power_cycle("h1", bmc_off.address, ctx, if_off="power_on")
        bmc.boot_device("h1", bmc_off.address, "pxe", ctx)
        bmc.close()
    logged = json.dumps(ctx.log.as_json())
    # sushy tries a SessionService login first (the emulator has none, so Basic auth follows): its body is masked.
    [login] = [r for r in ctx.log.records if r.argv[-1].endswith("/SessionService/Sessions")]
    assert (login.argv[0], login.exit_status, login.output.splitlines()[0]) == (
        "POST",
        401,
        '{"Password": "***", "UserName": "***"}',
    )
    assert "Boot" in logged
    assert PASSWORD not in logged
    assert PASSWORD not in caplog.text  # sushy's own DEBUG lines included
    # Bodies that carry credentials (a SessionService login, InsertMedia with UserName) are masked.
    masked = request_body(json.dumps({"UserName": USER, "Password": PASSWORD, "Image": "https://i/x.iso"}))
    assert json.loads(masked) == {"Image": "https://i/x.iso", "Password": "***", "UserName": "***"}


def test_tls_is_verified_by_default(lab: dict[str, Any], bmc_off: RedfishEmulator) -> None:
    """Without the CA bundle the emulator's certificate (our own CA's) is not trusted: nothing is sent."""
    bmc = driver(lab, ca_file=None)
    with pytest.raises(RedfishUnreachable, match="its TLS certificate did not verify"):
        bmc.power_state("h1", bmc_off.address, context())
    with pytest.raises(ActionFailed, match=r"Redfish over http:// is refused"):
        bmc.power_state("h1", f"http://{bmc_off.address}", context())


def test_a_bmc_that_does_not_answer_is_said_so_quickly(lab: dict[str, Any]) -> None:
    nobody = f"127.0.0.1:{free_port()}"
    bmc, ctx = driver(lab, retries=2), context()
    started = time.monotonic()
    with pytest.raises(RedfishUnreachable, match=rf"power state: the BMC at https://{nobody} did not answer"):
        bmc.power_state("h1", nobody, ctx)
    assert time.monotonic() - started < 10  # bounded: two attempts, a second apart
    [record] = ctx.log.records
    assert (record.argv[:2], record.exit_status) == (["redfish", "power state"], None)


def test_under_both_ipmi_answers_when_redfish_does_not(lab: dict[str, Any], tmp_path: Path) -> None:
    nobody = f"127.0.0.1:{free_port()}"
    target = Target("h1", "dc1", "c1", {"bmc_address": nobody}, hardware_class="r650")
    ipmi_system = RecordedSystem()
    ipmi_system.answer(["ipmitool"], "Chassis Power is on\n")
    settings = settings_for(lab, tmp_path, bmc_protocol="ipmi", bmc_protocol_by_class={"r650": "both"})
    executor = CentralCyborg(settings)
    executor.bmcs = BmcChoice(settings, ipmi=IpmitoolBmc(USER, lab["password_file"], ipmi_system))
    done = executor.execute(Order(target, 7, 0, 1, "power_cycle", {}))
    assert isinstance(done, Done)
    changed = done.result["changed"]
    assert (changed["protocol"], changed["power"]) == ("ipmi", "cycle")
    assert "did not answer (connection refused)" in changed["redfish_error"]
    assert [c["argv"][-3:] for c in done.result["commands"] if c["argv"][0] == "ipmitool"] == [
        ["chassis", "power", "status"],
        ["chassis", "power", "cycle"],
    ]
    assert executor.look(target).power == "on"  # the look from outside falls back too
    # Redfish alone: the step fails, saying why; nothing is asked of IPMI.
    alone = CentralCyborg(settings_for(lab, tmp_path, bmc_protocol="redfish"))
    with pytest.raises(StepFailed, match=r"power cycle through the BMC: power state: the BMC at .* did not answer"):
        alone.execute(Order(Target("h1", labels={"bmc_address": nobody}), 7, 0, 1, "power_cycle", {}))
    executor.close()


def test_which_protocol_a_host_gets(lab: dict[str, Any], tmp_path: Path) -> None:
    settings = settings_for(lab, tmp_path, bmc_protocol="ipmi", bmc_protocol_by_class={"r650": "redfish"})
    choice = BmcChoice(settings)
    assert choice.protocol(Target("a")) == "ipmi"
    assert choice.protocol(Target("a", hardware_class="r650")) == "redfish"
    assert choice.protocol(Target("a", labels={"bmc_protocol": "both"}, hardware_class="r650")) == "both"
    assert choice.for_target(Target("a")).name == "ipmitool"
    assert choice.for_target(Target("a", hardware_class="r650")) is choice.for_target(
        Target("b", hardware_class="r650")
    )
    with pytest.raises(ActionFailed, match="bmc_protocol label is 'snmp'"):
        choice.for_target(Target("a", labels={"bmc_protocol": "snmp"}))
    with pytest.raises(ValidationError, match="go together"):
        settings_for(lab, tmp_path, reimage_image_url="https://repo/x.iso")
    # review r2 finding 4: refused at start-up, not at each approved reinstall after its drain
    digest = "ef" * 32
    with pytest.raises(ValidationError, match="reimage_image_url is not content-addressed"):
        settings_for(lab, tmp_path, reimage_image_url="https://repo/installer.iso", reimage_image_digest=digest)
    settings_for(lab, tmp_path, reimage_image_url=f"https://repo/installer-{digest}.iso", reimage_image_digest=digest)
    lax = {"redfish_require_content_addressed": False}
    settings_for(lab, tmp_path, reimage_image_url="https://repo/installer.iso", reimage_image_digest=digest, **lax)
    with pytest.raises(ValidationError, match="bmc_protocol"):
        settings_for(lab, tmp_path, bmc_protocol="snmp")


def test_the_remediators_order_carries_the_hosts_class(lab: dict[str, Any], tmp_path: Path) -> None:
    """FLEETFIX_BMC_PROTOCOL_BY_CLASS works only if the step's target names the host's class."""
    from remediator.handoff import target_of
    from remediator.models import Host

    host = Host(hostname="r650-01", datacenter="ams1", cluster="c1", hardware_class="r650", labels={})
    target = target_of(host)
    assert target.hardware_class == "r650"
    settings = settings_for(lab, tmp_path, bmc_protocol="ipmi", bmc_protocol_by_class={"r650": "redfish"})
    assert BmcChoice(settings).protocol(target) == "redfish"
    other = target_of(Host(hostname="x-01", datacenter="ams1", cluster="c1", hardware_class="x11", labels={}))
    assert BmcChoice(settings).protocol(other) == "ipmi"


# -- reinstall from virtual media, through the central executor ----------------------------------------


def test_a_reinstall_from_virtual_media_inserts_boots_cycles_and_ejects(
    lab: dict[str, Any], bmc_on: RedfishEmulator, tmp_path: Path
) -> None:
    iso = f"{lab['images'].url}/{ISO_FILE}"
    settings = settings_for(
        lab,
        tmp_path,
        bmc_protocol="redfish",
        reimage_image_url=iso,
        reimage_image_digest=hashlib.sha256(ISO).hexdigest(),
    )
    executor = CentralCyborg(settings)
    order = Order(Target("h1", labels={"bmc_address": bmc_on.address}), 7, 0, 1, "reimage", {})
    fetched_before = lab["images"].served.get(f"/{ISO_FILE}", 0)
    handed = executor.execute(order)
    assert isinstance(handed, HandedOver)
    assert handed.awaits == "first_report"
    done = handed.record["bmc"]
    assert (done["reimage"], done["bootdev"], done["was"], done["now"]) == ("virtual_media", "cd", "on", "on")
    assert done["media"] == {"image": iso, "sha256": hashlib.sha256(ISO).hexdigest(), "bytes": len(ISO), "device": "Cd"}
    # What the service holds now: the ISO in its virtual CD (the emulator fetched it), a boot override to Cd.
    cd = bmc_on.get(f"{SYSTEM}/VirtualMedia/Cd")
    assert (cd["Image"], cd["Inserted"]) == (iso, True)
    assert lab["images"].served[f"/{ISO_FILE}"] == fetched_before + 2  # our check, then the BMC's own fetch
    assert bmc_on.system()["Boot"]["BootSourceOverrideTarget"] == "Cd"
    order_of_steps = [
        r["argv"][1].rsplit("/", 1)[-1]
        for r in handed.record["commands"]
        if r["argv"][0] in ("POST", "PATCH") and not r["argv"][1].endswith("/Sessions")
    ]
    assert order_of_steps == ["VirtualMedia.InsertMedia", SYSTEM_UUID, "ComputerSystem.Reset", "ComputerSystem.Reset"]

    finished = executor.finish_reimage(order)
    assert "warning" not in finished
    assert finished["bmc"] == {"bmc": bmc_on.address, "protocol": "redfish", "ejected": ["Cd"], "bootdev": "disk"}
    cd = bmc_on.get(f"{SYSTEM}/VirtualMedia/Cd")
    assert (cd["Image"], cd["Inserted"]) == ("", False)
    assert bmc_on.system()["Boot"]["BootSourceOverrideTarget"] == "Hdd"
    executor.close()
    assert len(executor.bmcs.redfish.clients) == 0


def test_media_someone_else_inserted_is_neither_replaced_nor_ejected(
    lab: dict[str, Any], bmc_on: RedfishEmulator
) -> None:
    """Issue 19 item 6: a reinstall used to eject whatever the virtual CD held, and finish_media every device
    holding an image. Only what fleetfix inserted (its Image URL) is ejected; another image fails the step."""
    from cyborg.drivers import redfish_media

    bmc = driver(lab)
    theirs = f"{lab['images'].url}/{BIOS_FILE}"  # an operator's media, inserted by someone else
    redfish_media.insert_media(bmc.client(bmc_on.address), theirs, hashlib.sha256(FIRMWARE).hexdigest(), context())
    iso, digest = f"{lab['images'].url}/{ISO_FILE}", hashlib.sha256(ISO).hexdigest()
    ctx = context()
    with pytest.raises(ActionFailed, match=r"holds another image .*not ejected, since fleetfix did not insert it"):
        bmc.reimage_from_media("h1", bmc_on.address, iso, digest, ctx)
    cd = bmc_on.get(f"{SYSTEM}/VirtualMedia/Cd")
    assert (cd["Image"], cd["Inserted"]) == (theirs, True)
    assert not [r for r in ctx.log.records if r.argv[-1].endswith(("EjectMedia", "ComputerSystem.Reset"))]
    finished = bmc.finish_media("h1", bmc_on.address, iso, context())
    assert finished["ejected"] == []  # theirs is left in
    assert bmc_on.get(f"{SYSTEM}/VirtualMedia/Cd")["Image"] == theirs
    assert bmc.finish_media("h1", bmc_on.address, theirs, context())["ejected"] == ["Cd"]  # the owner's finish
    bmc.close()


def test_a_console_mounted_cd_and_an_iso_chosen_by_its_query_are_not_ours() -> None:
    """Review r2 note 12: a CD mounted from the operator's console (Inserted, no Image, ConnectedVia Applet) is
    someone else's; with content addressing off, another ISO from the same endpoint (`?file=rescue.iso`) is not
    ours, while a pre-signed URL read back without its token still is."""
    from types import SimpleNamespace

    from sushy.resources.manager.constants import ConnectedVia

    from cyborg.drivers.redfish_media import _other_image, same_image

    ours = "https://repo/get?file=installer.iso"
    console = SimpleNamespace(inserted=True, image=None, connected_via=ConnectedVia.APPLET)
    assert _other_image(console, ours) == "media connected via Applet"
    unnamed = SimpleNamespace(inserted=True, image="", connected_via=None)
    assert _other_image(unnamed, ours) is not None
    empty = SimpleNamespace(inserted=False, image=None, connected_via=ConnectedVia.NOT_CONNECTED)
    assert _other_image(empty, ours) is None
    assert not same_image("https://repo/get?file=rescue.iso", ours)
    assert not same_image("https://repo/get", ours)  # its query chose the file: without it, not known to be ours
    signed = f"https://repo/installer-{'ab' * 32}.iso?X-Amz-Signature=abc&X-Amz-Expires=600"
    assert same_image(signed.partition("?")[0], signed)
    theirs = SimpleNamespace(inserted=True, image=signed.partition("?")[0], connected_via=ConnectedVia.URI)
    assert _other_image(theirs, signed) is None


def test_without_an_image_a_redfish_reinstall_boots_from_pxe(
    lab: dict[str, Any], bmc_off: RedfishEmulator, tmp_path: Path
) -> None:
    executor = CentralCyborg(settings_for(lab, tmp_path, bmc_protocol="redfish"))
    order = Order(Target("h1", labels={"bmc_address": bmc_off.address}), 7, 0, 1, "reimage", {})
    handed = executor.execute(order)
    assert isinstance(handed, HandedOver)
    assert "bmc" not in handed.record
    assert bmc_off.system()["Boot"]["BootSourceOverrideTarget"] == "Pxe"
    assert "InsertMedia" not in bmc_off.output()
    executor.finish_reimage(order)
    assert bmc_off.system()["Boot"]["BootSourceOverrideTarget"] == "Hdd"
    executor.close()


# -- update_bmc_firmware, the central action, through the executor ---------------------------------------


def test_the_update_bmc_firmware_action_updates_the_bios_through_the_executor(
    lab: dict[str, Any], bmc_off: RedfishEmulator, tmp_path: Path
) -> None:
    """The action as a plan runs it (cyborg/central/executor.py): the host's class picks Redfish, the image is
    pinned by its digest, the BIOS the service reads back is the version the step names."""
    settings = settings_for(lab, tmp_path, bmc_protocol="ipmi", bmc_protocol_by_class={"r650": "redfish"})
    executor = CentralCyborg(settings)
    image, digest = f"{lab['images'].url}/{BIOS_FILE}", hashlib.sha256(FIRMWARE).hexdigest()
    params = {"component": "bios", "image": image, "sha256": digest, "version": "1.1.0"}
    target = Target("h1", labels={"bmc_address": bmc_off.address}, hardware_class="r650")
    done = executor.execute(Order(target, 7, 0, 1, "update_bmc_firmware", params))
    assert isinstance(done, Done)
    changed = done.result["changed"]
    assert (changed["protocol"], changed["version_before"], changed["version_after"]) == ("redfish", "1.0.0", "1.1.0")
    assert changed["pending_reboot"] is False  # sushy-emulator applies the BIOS at once
    assert bmc_off.system()["BiosVersion"] == "1.1.0"
    assert any(c["argv"][0] == "POST" and "SimpleUpdate" in c["argv"][1] for c in done.result["commands"])
    # a host of another class stays on IPMI: refused before anything is fetched or asked
    ipmi = Target("h2", labels={"bmc_address": bmc_off.address}, hardware_class="x11")
    fetched = lab["images"].served.get(f"/{BIOS_FILE}", 0)
    with pytest.raises(StepFailed, match="driven over IPMI"):
        executor.execute(Order(ipmi, 7, 2, 1, "update_bmc_firmware", params))
    assert lab["images"].served.get(f"/{BIOS_FILE}", 0) == fetched
    executor.close()
