"""The hard-PPR flow records each switch of the reporting mode, across its reboot; restore_cmci runs
the PPR tool's cmci command and checks what the host shows afterwards."""

from __future__ import annotations

from pathlib import Path

import pytest

from cyborg.actions import ACTIONS
from cyborg.commands import ActionContext, ActionFailed
from cyborg.drivers.linux import OSRELEASE, LinuxDriver
from cyborg.drivers.ppr import CMCI_DISABLED, SWITCHES_FILE
from tests.cyborg.helpers import RecordedSystem
from tests.cyborg.test_linux_driver import argvs, linux, run, sample

BOOT_ID = "/proc/sys/kernel/random/boot_id"
TOOLS = {
    "firmware_first": ["/opt/oem/memmode", "--firmware-first"],
    "cmci": ["/opt/oem/memmode", "--cmci"],
    "schedule": ["/opt/oem/ppr", "--hard", "--address", "{address}", "--dimm", "{dimm}"],
}


def test_both_switches_are_recorded_across_the_ppr_reboot(tmp_path: Path) -> None:
    system = RecordedSystem(files={OSRELEASE: "6.1.0\n", BOOT_ID: "b-1\n"}, tools={"systemctl"})
    system.answer(["dmesg"], "")
    system.answer(["dmesg"], sample("kernel-log/ghes-apei-memory-ce-ghes-edac-hisilicon-arm64.log"))
    driver = linux(system, tmp_path, ppr_tool=TOOLS)
    changed, _ = run(driver, "hard_ppr", {"dimm": "CPU0_DIMM_A1"})
    assert [s["mode"] for s in changed["mode_switches"]] == ["firmware_first"]
    assert (driver.work_dir / SWITCHES_FILE).exists()  # kept on disk: the reboot ends this process
    system.files[BOOT_ID] = "b-2\n"
    spec = ACTIONS["hard_ppr"]
    after = LinuxDriver(system, work_dir=driver.work_dir, ppr_tool=TOOLS)  # the agent after the boot
    verified = after.verify(spec, spec.parse({"dimm": "CPU0_DIMM_A1"}), ActionContext(system, timeout_s=5), "b-1")
    assert [s["mode"] for s in verified["mode_switches"]] == ["firmware_first", "cmci"]
    assert verified["error_reporting"] == "cmci"
    assert ["/opt/oem/memmode", "--cmci"] in system.ran
    assert not (driver.work_dir / SWITCHES_FILE).exists()


def test_giving_up_switches_back_and_says_when(tmp_path: Path) -> None:
    system = RecordedSystem(files={OSRELEASE: "6.1.0\n"}, tools={"systemctl"})
    system.answer(["dmesg"], "")
    spec = ACTIONS["hard_ppr"]
    ctx = ActionContext(system, timeout_s=0.3)  # the action's budget runs out before capture_s
    with pytest.raises(ActionFailed, match=r"firmware_first at .*, back to cmci at "):
        linux(system, tmp_path, ppr_tool=TOOLS).run(spec, spec.parse({"dimm": "CPU0_DIMM_A1"}), ctx)
    assert system.ran[-1] == ["/opt/oem/memmode", "--cmci"]


def test_restore_cmci_turns_the_kernels_cmci_on_and_checks_the_tools_mode(tmp_path: Path) -> None:
    system = RecordedSystem(files={CMCI_DISABLED: "1\n"})
    tools = {**TOOLS, "mode": ["/opt/oem/memmode", "--show"]}
    system.answer(["/opt/oem/memmode", "--show"], "CMCI\n")
    changed, ctx = run(linux(system, tmp_path, ppr_tool=tools), "restore_cmci", {})
    assert argvs(ctx)[0] == ["/opt/oem/memmode", "--cmci"]
    assert (CMCI_DISABLED, "0") in system.written
    assert changed["verified_by"] == "/opt/oem/memmode --show"
    assert changed["mode_switches"][0]["mode"] == "cmci"
    system.answer(["/opt/oem/memmode", "--show"], "Firmware First\n")
    system.outputs[("/opt/oem/memmode", "--show")] = [("Firmware First\n", 0)]
    with pytest.raises(ActionFailed, match="did not take"):
        run(linux(system, tmp_path, ppr_tool=tools), "restore_cmci", {})


def test_restore_cmci_without_the_tool_is_refused_and_without_mode_left_to_the_reports(tmp_path: Path) -> None:
    system = RecordedSystem(files={CMCI_DISABLED: "0\n"})
    with pytest.raises(ActionFailed, match="PPR_TOOL has no 'cmci'"):
        run(linux(system, tmp_path), "restore_cmci", {})
    changed, _ = run(linux(system, tmp_path, ppr_tool=TOOLS), "restore_cmci", {})
    assert changed["verified_by"].startswith("the next reports")
    assert system.written == []
