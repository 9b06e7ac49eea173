"""verify_memory_under_load: stressapptest's real output parsed (tests/cyborg/fixtures, captured here),
the real driver's argv and verdicts through a recorded system, the simulated host's answers through the
host executor, and a real short run when the tool is installed (CI installs it: .ci/run)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from checker.parsers.stressapptest import parse_stressapptest
from cyborg.actions import ACTIONS
from cyborg.commands import ActionContext
from cyborg.drivers.base import VerificationFailed
from cyborg.drivers.linux import LinuxDriver
from cyborg.envelope import Signer
from cyborg.host.executor import RESULT_TASK
from tests.builders.envelopes import envelope
from tests.cyborg.helpers import RecordedSystem, sim_executor

FIXTURES = Path(__file__).parent / "fixtures"
PROBE = (sys.executable, "-m", "checker.agent.stallprobe")
EDAC = "/sys/devices/system/edac/mc"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def test_stressapptest_pass_failure_and_procedural_error_are_told_apart() -> None:
    passed = parse_stressapptest(fixture("stressapptest-pass.txt"))
    assert passed.ok
    assert passed.value.passed
    assert (passed.value.status, passed.value.hardware_incidents, passed.value.errors) == ("PASS", 0, 0)
    failed = parse_stressapptest(fixture("stressapptest-force-errors.txt")).value
    assert (failed.status, failed.hardware_incidents, failed.procedural, failed.passed) == ("FAIL", 2, False, False)
    assert failed.hardware_lines[0].startswith("Report Error: miscompare : DIMM Unknown")
    broken = parse_stressapptest(fixture("stressapptest-cannot-allocate.txt")).value
    assert (broken.status, broken.procedural) == ("FAIL", True)
    assert "failed to allocate memory" in " ".join(broken.process_lines)
    cut = parse_stressapptest("Log: Commandline - stressapptest -s 600\nStats: Starting SAT, 64M, 600 seconds\n")
    assert cut.value.status is None
    assert not cut.value.passed
    assert cut.problems


LABELS = ("CPU_SrcID#0_MC#0_Chan#0_DIMM#0", "CPU_SrcID#0_MC#0_Chan#1_DIMM#0")
"""EDAC labels as skx/i10nm_edac write them (the sample corpus's edac-sysfs/i10nm-mc7-dimm0-ce4.txt)."""


def is_probe(argv: list[str]) -> bool:
    return "checker.agent.stallprobe" in argv


def probe_of(argv: list[str]) -> list[str]:
    """The stall probe's argv inside whatever the run was placed in (a scope, taskset)."""
    return argv[argv.index(sys.executable) :]


def host_system(
    *, ce_after: int = 0, output: str = "stressapptest-pass.txt", stall_ms: float = 2.0, erring: int = 0
) -> RecordedSystem:
    """A host with two DIMMs on mc0 (per-DIMM counts), systemd-run and taskset; `ce_after` new CEs on DIMM
    `erring` while the probe runs."""
    system = RecordedSystem(
        files={
            "/proc/meminfo": "MemTotal:       65536000 kB\nMemAvailable:   32768000 kB\n",
            "/sys/devices/system/cpu/online": "0-7\n",
            "/proc/cmdline": "BOOT_IMAGE=/vmlinuz root=/dev/sda1 isolcpus=4-7 nohz_full=4-7\n",
            f"{EDAC}/mc0/ce_count": "3\n",
            f"{EDAC}/mc0/ue_count": "0\n",
            **{f"{EDAC}/mc0/dimm{i}/dimm_label": f"{label}\n" for i, label in enumerate(LABELS)},
            **{f"{EDAC}/mc0/dimm{i}/dimm_ce_count": f"{3 if i == 0 else 0}\n" for i in range(2)},
            **{f"{EDAC}/mc0/dimm{i}/dimm_ue_count": "0\n" for i in range(2)},
        },
        tools={"stressapptest", "dmesg", "systemd-run", "taskset"},
        dirs={EDAC: ["mc0", "power"], f"{EDAC}/mc0": ["ce_count", "ue_count", "dimm0", "dimm1"]},
    )
    summary = {
        "cpus": {"0": {"max_ms": stall_ms, "total_ms": 0, "count": 0, "wakeups": 60000}, "2": {"max_ms": 1.0}},
        "coincident_count": 0,
        "run": {"exit_status": 0, "output": fixture(output)},
    }

    system.answer(["dmesg"], "[  1.0] boot\n")
    system.answer(["dmesg"], "[  1.0] boot\n" + ("[ 99.1] EDAC MC0: 1 CE memory read error on DIMM_A1 (page:0x1)\n"))
    for prefix in (list(PROBE), ["systemd-run"], ["taskset"]):  # wherever the run is placed
        system.answer(prefix, json.dumps(summary))
    if ce_after:
        original = system.run

        def run(argv: list[str], *, timeout_s: float):  # type: ignore[no-untyped-def]
            result = original(argv, timeout_s=timeout_s)
            if is_probe(argv):  # the errors the load found, counted by EDAC meanwhile
                dimm = f"{EDAC}/mc0/dimm{erring}/dimm_ce_count"
                system.files[dimm] = f"{int(system.files[dimm]) + ce_after}\n"
                system.files[f"{EDAC}/mc0/ce_count"] = f"{3 + ce_after}\n"
            return result

        system.run = run  # type: ignore[method-assign]
    return system


def verify(system: RecordedSystem, **params: object) -> tuple[dict, ActionContext]:  # type: ignore[type-arg]
    spec = ACTIONS["verify_memory_under_load"]
    ctx = ActionContext(system, timeout_s=4000)
    return LinuxDriver(system).run(spec, spec.parse({"dimm": LABELS[0], "drained": True, **params}), ctx), ctx


def test_a_clean_run_with_no_new_errors_and_short_stalls_passes() -> None:
    system = host_system()
    system.outputs[("dmesg",)] = [("[  1.0] boot\n", 0), ("[  1.0] boot\n", 0)]  # nothing new in the log
    found, _ctx = verify(system, seconds=60)
    assert found["verdict"] == "pass"
    assert found["failures"] == []
    placed = next(argv for argv in system.ran if is_probe(argv))
    probe = probe_of(placed)
    # the probe on housekeeping CPUs only (4-7 are isolated), stressapptest bounded in time and memory
    assert probe[probe.index("--cpus") + 1] == "0,2"
    assert probe[probe.index("--") + 1 :] == ["stressapptest", "-s", "60", "-M", "19200"]
    assert found["stressapptest"]["status"] == "PASS"
    assert found["coverage"]["percent_of_available"] == 60.0


def test_new_ces_under_load_fail_although_stressapptest_says_pass() -> None:
    system = host_system(ce_after=4)
    with pytest.raises(VerificationFailed) as failed:
        verify(system, seconds=60)
    findings = failed.value.findings
    assert findings["verdict"] == "fail"
    assert findings["edac_new"] == {"mc0_ce": 4}
    assert findings["dimms_erred"] == [
        {"label": LABELS[0], "mc": 0, "entry": "dimm0", "location": None, "ce": 4, "ue": 0}
    ]
    assert findings["dimm_erred"] is True
    assert f"new EDAC errors during the run on {LABELS[0]} (mc0/dimm0) +4 CE" in findings["failures"]
    assert findings["stressapptest"]["status"] == "PASS"  # ECC corrected them: the tool saw nothing
    assert findings["kernel_log_new"] == ["[ 99.1] EDAC MC0: 1 CE memory read error on DIMM_A1 (page:0x1)"]


def test_a_long_stall_or_a_miscompare_fails() -> None:
    with pytest.raises(VerificationFailed, match="250 ms stall"):
        verify(host_system(stall_ms=250.0), seconds=60)
    with pytest.raises(VerificationFailed, match="stressapptest FAIL: 2 hardware incidents"):
        verify(host_system(output="stressapptest-force-errors.txt"), seconds=60)
    with pytest.raises(VerificationFailed, match="could not test"):
        verify(host_system(output="stressapptest-cannot-allocate.txt"), seconds=60)


def test_stressapptest_missing_is_a_gap_never_a_pass() -> None:
    system = host_system()
    system.tools.discard("stressapptest")
    with pytest.raises(VerificationFailed, match="stressapptest is not installed") as failed:
        verify(system)
    assert failed.value.findings["verdict"] == "gap"
    assert f"DIMM {LABELS[0]} is not verified under load" in failed.value.findings["gap"]
    assert not any(is_probe(argv) for argv in system.ran)


@pytest.mark.parametrize(
    ("faults", "outcome", "verdict"),
    [
        ((), "succeeded", "pass"),
        (("dimm_ce_moderate",), "failed", "fail"),  # a DIMM whose PPR did not take: CEs under load
        (("verify_tool_missing",), "failed", "gap"),
    ],
)
def test_the_simulated_host_answers_through_the_executor(faults: tuple[str, ...], outcome: str, verdict: str) -> None:
    signer = Signer(Ed25519PrivateKey.generate())
    executor, _, reports = sim_executor(signer, faults=faults)
    message = signer.sign(envelope("verify_memory_under_load", {"seconds": 60, "drained": True})).model_dump()
    assert executor.handle(message)["outcome"] == outcome
    [result] = reports.of(RESULT_TASK)
    assert result["changed"]["verdict"] == verdict
    if verdict == "gap":
        assert "stressapptest is not installed" in result["error"]
        assert "stressapptest is not installed" in result["changed"]["gap"]


def test_a_real_short_run_under_the_real_probe_passes_here() -> None:
    import subprocess

    if shutil.which("stressapptest") is None:  # never a quiet skip: the command this test checks is then untested
        pytest.fail("stressapptest is not installed: install it with `apt-get install stressapptest` (.ci/run does)")

    argv = [*PROBE, "--cpus", "0", "--period-ms", "10", "--threshold-ms", "100", "--", "stressapptest", "-s", "2"]
    done = subprocess.run([*argv, "-M", "16"], capture_output=True, text=True, timeout=60, check=True)
    summary = json.loads(done.stdout)
    assert summary["run"]["exit_status"] == 0
    assert parse_stressapptest(summary["run"]["output"]).value.passed
    assert summary["cpus"]["0"]["wakeups"] > 50


def test_the_agents_cgroup_bounds_the_memory_tested_and_that_is_a_gap_never_a_pass() -> None:
    system = host_system()
    system.tools.discard("systemd-run")  # no scope to be had: the run stays in the agent's cgroup
    system.outputs[("dmesg",)] = [("[  1.0] boot\n", 0), ("[  1.0] boot\n", 0)]
    unit = "/sys/fs/cgroup/system.slice/fleetfix-agent.service"
    system.files["/proc/self/cgroup"] = "0::/system.slice/fleetfix-agent.service\n"
    system.files[f"{unit}/memory.max"] = f"{512 * 1024 * 1024}\n"
    system.files[f"{unit}/memory.current"] = f"{100 * 1024 * 1024}\n"
    system.files[f"{unit}/cpu.max"] = "50000 100000\n"
    with pytest.raises(VerificationFailed, match="verification gap") as failed:
        verify(system, seconds=60)
    found = failed.value.findings
    placed = next(argv for argv in system.ran if is_probe(argv))
    assert placed[:3] == ["taskset", "-c", "0-3"]  # the unit's CPUAffinity= widened to the housekeeping CPUs
    assert placed[-2:] == ["-M", "329"]  # four fifths of the 412 MB left under MemoryMax
    assert found["verdict"] == "gap"
    assert found["failures"] == []
    assert found["gaps"][0].startswith("ran inside the agent's own cgroup (systemd-run is not installed")
    assert found["gaps"][1].startswith("only 329 MB of the 19200 MB asked for tested")
    assert "throttled to 50% of one CPU" in found["gaps"][2]
    assert found["gaps"][3].startswith("only 329 MB of 32000 MB available tested (1.0%, below the 50%")
    assert found["gap"] == "; ".join(found["gaps"])


@pytest.mark.parametrize(("ppr_took", "verdict"), [(True, "pass"), (False, "fail")])
def test_after_hard_ppr_the_simulated_host_passes_only_if_the_repair_took(ppr_took: bool, verdict: str) -> None:
    signer = Signer(Ed25519PrivateKey.generate())
    executor, driver, reports = sim_executor(signer, faults=("dimm_ce_moderate",))
    [fault] = driver.host.faults
    fault.ppr_success = ppr_took
    dimm = driver.host.dimms[fault.dimm_index].locator
    ppr = signer.sign(envelope("hard_ppr", {"dimm": dimm}, step=0)).model_dump()
    assert executor.handle(ppr)["outcome"] == "succeeded"
    params = {"dimm": dimm, "seconds": 600, "drained": True}
    check = signer.sign(envelope("verify_memory_under_load", params, step=1)).model_dump()
    executor.handle(check)
    result = reports.of(RESULT_TASK)[-1]
    assert result["changed"]["verdict"] == verdict
    if not ppr_took:
        assert result["outcome"] == "failed"
        assert "new EDAC errors during the run" in result["error"]


def test_edac_readable_before_but_not_after_the_run_is_a_gap_never_a_pass() -> None:
    system = host_system()
    system.outputs[("dmesg",)] = [("[  1.0] boot\n", 0), ("[  1.0] boot\n", 0)]
    original = system.run

    def run(argv: list[str], *, timeout_s: float):  # type: ignore[no-untyped-def]
        result = original(argv, timeout_s=timeout_s)
        if is_probe(argv):  # the EDAC tree gone by the time the run ends (a driver unloaded, sysfs unreadable)
            for name in [n for n in system.files if n.startswith(EDAC)]:
                del system.files[name]
            system.dirs.pop(EDAC, None)
        return result

    system.run = run  # type: ignore[method-assign]
    with pytest.raises(VerificationFailed) as gap:
        verify(system, seconds=60)
    assert gap.value.findings["verdict"] == "gap"
    assert any("could not be read after the run" in g for g in gap.value.findings["gaps"])
