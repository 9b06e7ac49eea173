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
SUSE_GHES = "kernel-log/syslog-ghes-recoverable-memory-fru-text-already-poisoned.log"  # x86, names its DIMM
TOOLS = {
    "firmware_first": ["/opt/oem/memmode", "--firmware-first"],
    "cmci": ["/opt/oem/memmode", "--cmci"],
    "schedule": ["/opt/oem/ppr", "--hard", "--address", "{address}", "--dimm", "{dimm}"],
}


def test_both_switches_are_recorded_across_the_ppr_reboot(tmp_path: Path) -> None:
    system = RecordedSystem(files={OSRELEASE: "6.1.0\n", BOOT_ID: "b-1\n"}, tools={"systemctl"})
    system.answer(["dmesg"], "")
    system.answer(["dmesg"], sample(SUSE_GHES))
    driver = linux(system, tmp_path, ppr_tool=TOOLS)
    changed, _ = run(driver, "hard_ppr", {"dimm": "CPU 1 DIMM 5"})
    assert [s["mode"] for s in changed["mode_switches"]] == ["firmware_first"]
    assert (driver.work_dir / SWITCHES_FILE).exists()  # kept on disk: the reboot ends this process
    system.files[BOOT_ID] = "b-2\n"
    spec = ACTIONS["hard_ppr"]
    after = LinuxDriver(system, work_dir=driver.work_dir, ppr_tool=TOOLS)  # the agent after the boot
    verified = after.verify(spec, spec.parse({"dimm": "CPU 1 DIMM 5"}), ActionContext(system, timeout_s=5), "b-1")
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


def other_dimm(text: str, record: int, location: str, address: str) -> list[str]:
    """The real record rewritten as another DIMM's (our derivation: same kernel format, other {n},
    DIMM location, fru_text and address)."""
    return [
        line.replace("{1}", f"{{{record}}}")
        .replace("CPU 1 DIMM 5", location)
        .replace("Card01, ChnA, DIMM0", location)
        .replace("0x0000000e16677000", address)
        for line in text.splitlines()
        if "[Hardware Error]" in line
    ]


def test_only_records_naming_the_dimm_are_repaired_with_another_dimms_interleaved(tmp_path: Path) -> None:
    mine = [line for line in sample(SUSE_GHES).splitlines() if "[Hardware Error]" in line]
    theirs = other_dimm(sample(SUSE_GHES), 7, "CPU 0 DIMM 2", "0x0000000123456000")
    interleaved = [line for pair in zip(theirs, mine, strict=True) for line in pair]
    system = RecordedSystem(files={OSRELEASE: "6.1.0\n"}, tools={"systemctl"})
    system.answer(["dmesg"], "")
    system.answer(["dmesg"], "\n".join(interleaved) + "\n")
    changed, ctx = run(linux(system, tmp_path, ppr_tool=TOOLS), "hard_ppr", {"dimm": "CPU 1 DIMM 5"})
    scheduled = [a for a in argvs(ctx) if a[0] == "/opt/oem/ppr"]
    assert scheduled == [["/opt/oem/ppr", "--hard", "--address", "0xe16677000", "--dimm", "CPU 1 DIMM 5"]]
    assert changed["addresses"] == ["0xe16677000"]
    assert any("CPU 0 DIMM 2" in r and "0x123456000" in r for r in changed["ignored_records"])


def test_records_of_other_dimms_only_switch_back_and_fail_with_the_records(tmp_path: Path) -> None:
    """Before the fix, the other DIMM's address was scheduled against CPU 1 DIMM 5."""
    theirs = other_dimm(sample(SUSE_GHES), 7, "CPU 0 DIMM 2", "0x0000000123456000")
    system = RecordedSystem(files={OSRELEASE: "6.1.0\n"}, tools={"systemctl"})
    system.answer(["dmesg"], "")
    system.answer(["dmesg"], "\n".join(theirs) + "\n")
    spec = ACTIONS["hard_ppr"]
    ctx = ActionContext(system, timeout_s=0.3)
    with pytest.raises(ActionFailed, match=r"name another DIMM or none.*0x123456000 at CPU 0 DIMM 2"):
        linux(system, tmp_path, ppr_tool=TOOLS).run(spec, spec.parse({"dimm": "CPU 1 DIMM 5"}), ctx)
    assert system.ran[-1] == ["/opt/oem/memmode", "--cmci"]
    assert not any(a[0] == "/opt/oem/ppr" for a in system.ran)


def test_a_record_that_names_no_dimm_is_never_repaired(tmp_path: Path) -> None:
    """The HiSilicon records carry an address but no DIMM location: nothing ties them to the step's DIMM."""
    system = RecordedSystem(files={OSRELEASE: "6.1.0\n"}, tools={"systemctl"})
    system.answer(["dmesg"], "")
    system.answer(["dmesg"], sample("kernel-log/ghes-apei-memory-ce-ghes-edac-hisilicon-arm64.log"))
    spec = ACTIONS["hard_ppr"]
    with pytest.raises(ActionFailed, match="no DIMM location"):
        linux(system, tmp_path, ppr_tool=TOOLS).run(
            spec, spec.parse({"dimm": "CPU0_DIMM_A1"}), ActionContext(system, timeout_s=0.3)
        )
    assert not any(a[0] == "/opt/oem/ppr" for a in system.ran)


def test_a_location_from_the_centre_matches_too(tmp_path: Path) -> None:
    system = RecordedSystem(files={OSRELEASE: "6.1.0\n"}, tools={"systemctl"})
    system.answer(["dmesg"], "")
    system.answer(["dmesg"], sample(SUSE_GHES))
    params = {"dimm": "CPU_SrcID#1_MC#0_Chan#2_DIMM#0", "locations": ["CPU 1 DIMM 5"]}
    changed, _ = run(linux(system, tmp_path, ppr_tool=TOOLS), "hard_ppr", params)
    assert changed["addresses"] == ["0xe16677000"]


def test_the_capture_gives_up_at_once_when_records_come_faster_than_one_a_second(tmp_path: Path) -> None:
    records = [line for n in range(2, 12) for line in other_dimm(sample(SUSE_GHES), n, "CPU 1 DIMM 5", "0x1000")]
    system = RecordedSystem(files={OSRELEASE: "6.1.0\n"}, tools={"systemctl"})
    system.answer(["dmesg"], "")
    system.answer(["dmesg"], "\n".join(records) + "\n")
    spec = ACTIONS["hard_ppr"]
    with pytest.raises(ActionFailed, match=r"10 memory records in 1 s .* above 1/s"):
        linux(system, tmp_path, ppr_tool=TOOLS).run(
            spec, spec.parse({"dimm": "CPU 1 DIMM 5"}), ActionContext(system, timeout_s=60)
        )
    assert system.ran[-1] == ["/opt/oem/memmode", "--cmci"]
    assert not any(a[0] == "/opt/oem/ppr" for a in system.ran)


def test_restore_cmci_refuses_a_template_that_needs_a_dimm(tmp_path: Path) -> None:
    system = RecordedSystem(files={CMCI_DISABLED: "0\n"})
    tools = {**TOOLS, "cmci": ["/opt/oem/memmode", "--cmci", "--dimm", "{dimm}"]}
    with pytest.raises(ActionFailed, match="needs \\{dimm\\}"):
        run(linux(system, tmp_path, ppr_tool=tools), "restore_cmci", {})
    assert system.ran == []
