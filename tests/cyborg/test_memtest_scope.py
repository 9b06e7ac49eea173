"""verify_memory_under_load runs only on a host the centre saw drained, in a scope of its own with explicit
limits (or, refused one, bounded in the agent's cgroup and then a gap), and a run that covered too little
of the memory is a gap, never a pass."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from cyborg.actions import ACTIONS, ActionRefused, VerifyMemoryUnderLoadParams
from cyborg.central.issuing import drain_confirmed, resolve_params
from cyborg.commands import ActionContext, LiveSystem
from cyborg.drivers.base import VerificationFailed
from cyborg.drivers.linux import LinuxDriver
from cyborg.drivers.memtest_scope import SCOPE_MARGIN_MB, cpu_list, place
from cyborg.envelope import Signer
from cyborg.host.executor import RESULT_TASK
from tests.builders.envelopes import envelope
from tests.cyborg.helpers import sim_executor
from tests.cyborg.test_memtest import LABELS, host_system, is_probe, probe_of, verify

SPEC = ACTIONS["verify_memory_under_load"]
HOOK_DRAIN = {"outcome": "succeeded", "hook": "command", "argv": ["/usr/local/bin/sched", "drain", "h1"]}
QUIET = [("[  1.0] boot\n", 0), ("[  1.0] boot\n", 0)]


def test_not_drained_runs_nothing_and_is_a_gap() -> None:
    system = host_system()
    ctx = ActionContext(system, timeout_s=4000)
    with pytest.raises(VerificationFailed, match="host not drained: load test not run") as failed:
        LinuxDriver(system).run(SPEC, SPEC.parse({"dimm": LABELS[0]}), ctx)  # drained: the default, False
    assert failed.value.findings["verdict"] == "gap"
    assert failed.value.findings["gap"].startswith("host not drained: load test not run")
    assert system.ran == []  # not even a scope, not dmesg: nothing ran next to production work


def test_the_run_gets_a_scope_of_its_own_on_the_housekeeping_cpus() -> None:
    system = host_system()
    system.outputs[("dmesg",)] = list(QUIET)
    found, _ = verify(system, seconds=60)
    check, placed = [argv for argv in system.ran if argv[0] == "systemd-run"]
    assert check[-1] == "true"  # asked first with `true`: a refusal is told from the test's own failure
    assert placed[: placed.index("--")] == [
        "systemd-run",
        "--scope",
        "--quiet",
        "--collect",
        f"--unit={found['coverage']['scope']}",
        "-p",
        f"MemoryMax={19200 + SCOPE_MARGIN_MB}M",
        "-p",
        "MemorySwapMax=0",
        "-p",
        "AllowedCPUs=0-3",  # 4-7 are isolated
    ]
    assert found["coverage"]["scope"].startswith("fleetfix-memtest-")
    after = placed[placed.index("--") + 1 :]
    assert after[:3] == ["taskset", "-c", "0-3"]
    assert probe_of(after)[-2:] == ["-M", "19200"]
    assert found["verdict"] == "pass"
    assert found["gaps"] == []


def test_a_refused_scope_runs_bounded_in_the_agents_cgroup_and_says_why() -> None:
    system = host_system()
    system.outputs[("dmesg",)] = list(QUIET)
    system.outputs[("systemd-run",)] = [("Failed to start transient scope unit: Access denied", 1)]  # no polkit rule
    unit = "/sys/fs/cgroup/system.slice/fleetfix-agent.service"
    system.files["/proc/self/cgroup"] = "0::/system.slice/fleetfix-agent.service\n"
    system.files[f"{unit}/memory.max"] = f"{512 * 1024 * 1024}\n"
    system.files[f"{unit}/memory.current"] = f"{100 * 1024 * 1024}\n"
    with pytest.raises(VerificationFailed) as failed:
        verify(system, seconds=60)
    found = failed.value.findings
    placed = next(argv for argv in system.ran if is_probe(argv))
    assert placed[0] == "taskset"
    assert found["verdict"] == "gap"
    assert "systemd-run --scope refused: Failed to start transient scope unit: Access denied" in found["gap"]
    assert found["coverage"]["scope"] is None
    assert found["coverage"]["tested_mb"] == 329


def test_no_scope_but_no_cgroup_limits_either_is_said_and_passes() -> None:
    system = host_system()
    system.tools.discard("systemd-run")  # e.g. the agent run by hand as root, on a host without systemd
    system.outputs[("dmesg",)] = list(QUIET)
    system.files["/proc/self/cgroup"] = "0::/user.slice\n"
    system.files["/sys/fs/cgroup/user.slice/memory.max"] = "max\n"
    system.files["/sys/fs/cgroup/user.slice/cpu.max"] = "max 100000\n"
    found, _ = verify(system, seconds=60)
    assert found["verdict"] == "pass"
    assert found["coverage"]["notes"] == [
        "ran inside the agent's own cgroup (systemd-run is not installed; see docs/agent.md, the polkit rule)"
    ]


def test_too_little_memory_covered_is_a_gap_even_in_a_scope() -> None:
    system = host_system()
    system.outputs[("dmesg",)] = list(QUIET)
    with pytest.raises(VerificationFailed, match="verification gap") as failed:
        verify(system, seconds=60, max_memory_mb=4096)
    found = failed.value.findings
    assert found["verdict"] == "gap"
    assert found["gaps"] == ["only 4096 MB of 32000 MB available tested (12.8%, below the 50% a pass needs)"]
    assert found["stressapptest"]["status"] == "PASS"  # what it tested passed: still not a verification
    # a floor the plan lowered, with the share it asked for: a pass
    system = host_system()
    system.outputs[("dmesg",)] = list(QUIET)
    found, _ = verify(system, seconds=60, memory_percent=12, min_coverage_percent=10)
    assert found["verdict"] == "pass"


def test_failures_are_still_failures_when_coverage_was_short() -> None:
    with pytest.raises(VerificationFailed, match="failed verification under load") as failed:
        verify(host_system(ce_after=2), seconds=60, max_memory_mb=4096)
    assert failed.value.findings["verdict"] == "fail"


def test_a_floor_above_the_share_tested_could_never_pass_and_is_refused() -> None:
    with pytest.raises(ActionRefused, match="could never pass"):
        SPEC.parse({"memory_percent": 40, "min_coverage_percent": 50})


def test_cpu_lists_are_written_as_ranges() -> None:
    assert cpu_list([0, 1, 2, 3, 8, 10, 11]) == "0-3,8,10-11"
    assert cpu_list([5]) == "5"


@pytest.mark.parametrize(
    ("evidence", "drained"),
    [
        ({"drain": {"at": "t", "before_step": 0, **HOOK_DRAIN, "commands": []}}, True),
        ({"drain": {"at": "t", "skipped": "no drain hook configured for cluster c1"}}, False),  # no hook: no drain
        ({"drain": {**HOOK_DRAIN, "commands": [{"argv": ["sched"], "kind": "dry_run"}]}}, False),
        ({"drain": {**HOOK_DRAIN, "commands": []}, "undrain": {"outcome": "succeeded"}}, False),
        ({"host_drain": {**HOOK_DRAIN, "commands": [], "remediation_id": 7}}, True),  # a repair's load test
        ({}, False),
    ],
)
def test_the_centre_fills_drained_from_the_real_drain(evidence: dict, drained: bool) -> None:  # type: ignore[type-arg]
    assert drain_confirmed(evidence) is drained
    # a plan cannot claim it: the centre's reading replaces whatever the step says
    params = resolve_params(SPEC, {"seconds": 60, "drained": True, "timeout_s": 900}, evidence)
    assert params["drained"] is drained


def test_the_simulated_host_answers_not_drained_and_bounded_as_the_real_one() -> None:
    signer = Signer(Ed25519PrivateKey.generate())
    executor, _, reports = sim_executor(signer, faults=())
    message = signer.sign(envelope("verify_memory_under_load", {"seconds": 60})).model_dump()
    assert executor.handle(message)["outcome"] == "failed"
    [result] = reports.of(RESULT_TASK)
    assert result["changed"]["verdict"] == "gap"
    assert result["changed"]["gap"].startswith("host not drained: load test not run")

    executor, _, reports = sim_executor(signer, faults=("verify_scope_refused",))
    message = signer.sign(envelope("verify_memory_under_load", {"seconds": 60, "drained": True})).model_dump()
    assert executor.handle(message)["outcome"] == "failed"
    [result] = reports.of(RESULT_TASK)
    changed = result["changed"]
    assert changed["verdict"] == "gap"
    assert changed["coverage"]["scope"] is None
    assert changed["coverage"]["tested_mb"] == 329
    assert "Access denied" in changed["gaps"][0]
    assert any("below the 50% a pass needs" in gap for gap in changed["gaps"])


def test_the_placement_on_this_machine_is_a_scope_or_a_gap_saying_why() -> None:
    """For real: systemd-run asked for a scope with `true` (harmless). Under systemd as root it is granted;
    in a container without systemd, or without the tool, the run would stay in this cgroup, and say so."""
    system = LiveSystem()
    params = SPEC.parse({"drained": True, "memory_percent": 1, "min_coverage_percent": 1})
    assert isinstance(params, VerifyMemoryUnderLoadParams)
    placement = place(LinuxDriver(system), params, ActionContext(system, timeout_s=120))
    if Path("/run/systemd/system").is_dir() and system.which("systemd-run"):
        assert placement.scope is not None, placement.gaps
    else:
        assert placement.scope is None
        said = [*placement.gaps, *placement.notes]
        assert said[0].startswith("ran inside the agent's own cgroup (systemd-run ")
    assert placement.megabytes > 0
