"""A BMC firmware update ends with the BMC restarting into its new image (review r5 finding 8): its task
monitor is gone (404) while it comes back. For component `bmc` that is the normal end, judged by the firmware
inventory once the BMC answers again; for `bios` (the BMC does not restart) it stays a failure. Against our
small Redfish service (tests/checker/redfish_server.py); the image from a local HTTPS repository
(tests/cyborg/redfish_emulator.py)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cyborg.commands import ActionContext, ActionFailed
from cyborg.drivers.redfish import RedfishBmc
from cyborg.drivers.redfish_client import RedfishConfig
from tests.checker.redfish_server import (  # noqa: F401  (fixtures)
    USER,
    RedfishService,
    collection,
    redfish_password_fixture,
    redfish_service_fixture,
    skeleton,
)
from tests.cyborg.redfish_emulator import ImageServer, LabCa

IMAGE = b"BMC image 7.10 " * 64
BMC_FILE = f"bmc-7.10-{hashlib.sha256(IMAGE).hexdigest()}.bin"  # content-addressed, as the driver requires
SYSTEM, MANAGER = "/redfish/v1/Systems/1", "/redfish/v1/Managers/1"
SIMPLE_UPDATE = "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate"
MONITOR = "/redfish/v1/TaskService/TaskMonitors/JID_1"
INVENTORY = "/redfish/v1/UpdateService/FirmwareInventory"
ADDRESS = "bmc-1.example"


@pytest.fixture
def repository(tmp_path: Path) -> Iterator[tuple[ImageServer, LabCa]]:
    ca = LabCa(tmp_path)
    images = tmp_path / "images"
    images.mkdir()
    (images / BMC_FILE).write_bytes(IMAGE)
    server = ImageServer(images, ca)
    yield server, ca
    server.stop()


def serve(service: RedfishService) -> None:
    """A System, its Manager, an UpdateService whose SimpleUpdate answers 202 with a task monitor that is
    gone when asked (the BMC restarted), and an inventory that reads 7.10 once the update was sent."""
    skeleton(service, systems={"1": {}}, managers={"1": {}}, firmware=[])
    service.add(
        {
            "@odata.id": SYSTEM,
            "Id": "1",
            "Name": "System",
            "BiosVersion": "2.1",
            "Links": {"ManagedBy": [{"@odata.id": MANAGER}]},
        },
        {
            "@odata.id": "/redfish/v1/UpdateService",
            "Id": "UpdateService",
            "Name": "Update Service",
            "FirmwareInventory": {"@odata.id": INVENTORY},
            "Actions": {
                "#UpdateService.SimpleUpdate": {
                    "target": SIMPLE_UPDATE,
                    "TransferProtocol@Redfish.AllowableValues": ["HTTPS"],
                }
            },
        },
        collection(INVENTORY, [f"{INVENTORY}/BMC"]),
    )

    def bmc_firmware() -> dict[str, Any]:
        sent = any(r.method == "POST" and r.path == SIMPLE_UPDATE for r in service.requests)
        return {"@odata.id": f"{INVENTORY}/BMC", "Id": "BMC", "Name": "BMC", "Version": "7.10" if sent else "7.00"}

    service.resources[f"{INVENTORY}/BMC"] = bmc_firmware
    service.accepted[SIMPLE_UPDATE] = MONITOR  # and no resource at MONITOR: 404


def driver(service: RedfishService, password_file: Path, ca: LabCa, **overrides: Any) -> RedfishBmc:
    values: dict[str, Any] = {"poll_s": 0.1, "task_wait_s": 10, "vanish_settle_s": 0.5, **overrides}
    config = RedfishConfig(username=USER, password_file=password_file, ca_file=ca.ca_file, **values)
    bmc = RedfishBmc(config)
    bmc.clients.get(ADDRESS).url = service.url  # our test service speaks http; the driver refuses it elsewhere
    return bmc


def test_a_bmc_update_whose_task_monitor_is_gone_after_the_restart_is_judged_by_the_inventory(
    service: RedfishService, password_file: Path, repository: tuple[ImageServer, LabCa]
) -> None:
    serve(service)
    images, ca = repository
    bmc = driver(service, password_file, ca)
    image, digest = f"{images.url}/{BMC_FILE}", hashlib.sha256(IMAGE).hexdigest()
    done = bmc.update_firmware("h1", ADDRESS, "bmc", image, digest, ActionContext(None, timeout_s=60))
    assert (done["version_before"], done["version_after"]) == ("7.00", "7.10")
    assert "restarted" in done["task"]
    assert [r.path for r in service.requests if r.method == "POST"].count(SIMPLE_UPDATE) == 1
    bmc.close()


def serve_bios(service: RedfishService, *, applies: bool) -> None:
    """As `serve`, the inventory listing a BIOS that reads 2.2 once the update was sent (`applies`), else 2.1."""
    serve(service)
    service.add(collection(INVENTORY, [f"{INVENTORY}/BMC", f"{INVENTORY}/BIOS"]))

    def bios_firmware() -> dict[str, Any]:
        sent = any(r.method == "POST" and r.path == SIMPLE_UPDATE for r in service.requests)
        version = "2.2" if sent and applies else "2.1"
        return {"@odata.id": f"{INVENTORY}/BIOS", "Id": "BIOS", "Name": "BIOS", "Version": version}

    service.resources[f"{INVENTORY}/BIOS"] = bios_firmware


def test_a_bios_update_whose_task_monitor_vanished_is_verified_by_the_inventory(
    service: RedfishService, password_file: Path, repository: tuple[ImageServer, LabCa]
) -> None:
    """Issue 19 item 7: a 404 on the monitor after the BMC accepted the update used to fail the step (the update
    may well have run). The inventory reading the target version now verifies it."""
    serve_bios(service, applies=True)
    images, ca = repository
    bmc = driver(service, password_file, ca)
    image, digest = f"{images.url}/{BMC_FILE}", hashlib.sha256(IMAGE).hexdigest()
    done = bmc.update_firmware("h1", ADDRESS, "bios", image, digest, ActionContext(None, timeout_s=60), "2.2")
    assert (done["task"].split(":")[0], done["outcome"], done["version_after"]) == ("unverified", "verified", "2.2")
    assert not done["pending_reboot"]
    assert [r.path for r in service.requests if r.method == "POST"].count(SIMPLE_UPDATE) == 1
    bmc.close()


def test_a_bios_update_whose_task_monitor_vanished_and_reads_the_old_version_is_unverified(
    service: RedfishService, password_file: Path, repository: tuple[ImageServer, LabCa]
) -> None:
    serve_bios(service, applies=False)
    images, ca = repository
    bmc = driver(service, password_file, ca)
    image, digest = f"{images.url}/{BMC_FILE}", hashlib.sha256(IMAGE).hexdigest()
    done = bmc.update_firmware("h1", ADDRESS, "bios", image, digest, ActionContext(None, timeout_s=60), "2.2")
    assert (done["outcome"], done["pending_reboot"], done["version_after"]) == ("unverified", True, "2.1")
    bmc.close()


def test_a_bios_update_whose_monitor_vanished_reading_a_third_version_fails(
    service: RedfishService, password_file: Path, repository: tuple[ImageServer, LabCa]
) -> None:
    serve_bios(service, applies=True)
    images, ca = repository
    bmc = driver(service, password_file, ca)
    image, digest = f"{images.url}/{BMC_FILE}", hashlib.sha256(IMAGE).hexdigest()
    with pytest.raises(ActionFailed, match="neither the version before"):
        bmc.update_firmware("h1", ADDRESS, "bios", image, digest, ActionContext(None, timeout_s=60), "2.3")
    bmc.close()


TASKS = "/redfish/v1/TaskService/Tasks"


def serve_tasks(service: RedfishService, running_for: int) -> None:
    """A TaskService listing the update's task JID_1: Running for its first `running_for` reads, then Completed
    (the BMC goes on flashing after its task monitor answered 404)."""
    service.resources["/redfish/v1"]["Tasks"] = {"@odata.id": "/redfish/v1/TaskService"}
    service.add(
        {"@odata.id": "/redfish/v1/TaskService", "Id": "TaskService", "Name": "Tasks", "Tasks": {"@odata.id": TASKS}},
        collection(TASKS, [f"{TASKS}/JID_1"]),
    )

    def task() -> dict[str, Any]:
        reads = sum(1 for r in service.requests if r.method == "GET" and r.path == f"{TASKS}/JID_1")
        state = "Running" if reads <= running_for else "Completed"
        return {"@odata.id": f"{TASKS}/JID_1", "Id": "JID_1", "Name": "BIOS update", "TaskState": state}

    service.resources[f"{TASKS}/JID_1"] = task


def test_a_vanished_bios_monitor_waits_for_the_task_service_and_a_stable_inventory(
    service: RedfishService, password_file: Path, repository: tuple[ImageServer, LabCa]
) -> None:
    """Review r2 finding 8: the monitor 404s at once while the BMC's TaskService still lists the update running.
    Nothing is judged until the task ended and the BIOS version read the same for vanish_settle_s; the
    executor's step outcome then says `unverified`, not `succeeded`."""
    serve_bios(service, applies=False)
    serve_tasks(service, running_for=3)
    images, ca = repository
    bmc = driver(service, password_file, ca)
    image, digest = f"{images.url}/{BMC_FILE}", hashlib.sha256(IMAGE).hexdigest()
    done = bmc.update_firmware("h1", ADDRESS, "bios", image, digest, ActionContext(None, timeout_s=60), "2.2")
    assert (done["outcome"], done["pending_reboot"]) == ("unverified", True)
    task_reads = [r for r in service.requests if r.path == f"{TASKS}/JID_1"]
    assert len(task_reads) > 3  # asked until it ended
    assert done["settled"]["waited_s"] >= 0.5
    bmc.close()


def test_a_vanished_bios_monitor_whose_task_runs_past_the_budget_fails(
    service: RedfishService, password_file: Path, repository: tuple[ImageServer, LabCa]
) -> None:
    serve_bios(service, applies=False)
    serve_tasks(service, running_for=10_000)
    images, ca = repository
    bmc = driver(service, password_file, ca, task_wait_s=1.5)
    image, digest = f"{images.url}/{BMC_FILE}", hashlib.sha256(IMAGE).hexdigest()
    with pytest.raises(ActionFailed, match=r"task\(s\) JID_1 still running"):
        bmc.update_firmware("h1", ADDRESS, "bios", image, digest, ActionContext(None, timeout_s=60), "2.2")
    bmc.close()
