"""offline_cpu: the allow-list's parameters, the real driver's sysfs reads and write through a recorded system
(and every refusal, with nothing written), and the simulated driver."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from cyborg.actions import ACTIONS, ActionRefused
from cyborg.commands import ActionContext, ActionFailed
from cyborg.drivers.cpus import ISOLATED, NOHZ_FULL, ONLINE, SELF_STATUS, online_file
from cyborg.drivers.linux import LinuxDriver
from cyborg.envelope import Signer
from remediator.actions import ACTIONS as CONTRACT
from tests.builders.envelopes import envelope
from tests.cyborg.helpers import RecordedSystem, sim_executor

SOCKETS = {cpu: cpu // 4 for cpu in range(8)}  # two sockets of four CPUs


class CpuSystem(RecordedSystem):
    """A recorded system whose kernel takes a CPU out of the online list when its online file gets 0."""

    def write_text(self, path: str, text: str) -> None:
        super().write_text(path, text)
        if path.endswith("/online") and path != ONLINE and text.strip() == "0":
            cpu = int(path.rsplit("/", 2)[1].removeprefix("cpu"))
            online = sorted(int(c) for c in _expand(self.files[ONLINE]) if int(c) != cpu)
            self.files[ONLINE] = ",".join(str(c) for c in online) + "\n"


def _expand(text: str) -> list[int]:
    cpus: list[int] = []
    for part in text.strip().split(","):
        start, _, end = part.partition("-")
        cpus += range(int(start), int(end or start) + 1)
    return cpus


def host(
    system: type[RecordedSystem] = CpuSystem,
    *,
    online: str = "0-7",
    isolated: str = "",
    nohz_full: str = "(null)",
    agent: str = "0-7",
    smt: bool = False,
) -> RecordedSystem:
    files = {ONLINE: f"{online}\n", ISOLATED: f"{isolated}\n", NOHZ_FULL: f"{nohz_full}\n"}
    files[SELF_STATUS] = f"Name:\tfleetfix\nCpus_allowed:\tff\nCpus_allowed_list:\t{agent}\n"
    for cpu in _expand(online):
        files[f"/sys/devices/system/cpu/cpu{cpu}/topology/physical_package_id"] = f"{SOCKETS[cpu]}\n"
        if smt:  # two threads per core: 0-1, 2-3, 4-5, 6-7
            files[f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list"] = f"{cpu & ~1}-{cpu | 1}\n"
    for cpu in range(1, 8):  # cpu0 has no online file: the boot CPU
        files[online_file(cpu)] = "1\n" if cpu in _expand(online) else "0\n"
    return system(files=files)


def offline(
    system: RecordedSystem, cpu: int, *, dry_run: bool = False, core: bool = True
) -> tuple[dict[str, object], ActionContext]:
    spec = ACTIONS["offline_cpu"]
    ctx = ActionContext(system, timeout_s=30, dry_run=dry_run)
    return LinuxDriver(system).run(spec, spec.parse({"cpu": cpu, "core": core}), ctx), ctx


def test_offlines_the_cpu_and_checks_the_kernel_took_it() -> None:
    system = host()
    changed, ctx = offline(system, 3)
    assert system.written == [("/sys/devices/system/cpu/cpu3/online", "0")]
    assert changed == {
        "cpu": 3,
        "cpus": "3",
        "online": False,
        "socket": "0",
        "isolated": False,
        "online_before": "0-7",
        "online_after": "0-2,4-7",
    }
    assert [r.argv for r in ctx.log.records] == [["write", "/sys/devices/system/cpu/cpu3/online", "0"]]
    # idempotent: a second run finds it offline and writes nothing
    again, _ = offline(system, 3)
    assert again == {"cpu": 3, "cpus": "3", "online": False, "already_offline": True}
    assert len(system.written) == 1


def test_the_whole_core_goes_its_smt_siblings_share_the_faulty_cache() -> None:
    system = host(smt=True)
    changed, _ = offline(system, 3)
    assert system.written == [
        ("/sys/devices/system/cpu/cpu2/online", "0"),
        ("/sys/devices/system/cpu/cpu3/online", "0"),
    ]
    assert changed["cpus"] == "2-3"
    assert changed["online_after"] == "0-1,4-7"
    # one thread only, when the plan says so
    single = host(smt=True)
    offline(single, 5, core=False)
    assert single.written == [("/sys/devices/system/cpu/cpu5/online", "0")]


def test_an_e_core_module_sharing_its_l2_goes_whole() -> None:
    """Four cores without SMT sharing one L2 (an Intel E-core module): an error there is in every one."""
    system = host()
    for cpu in range(4, 8):
        base = f"/sys/devices/system/cpu/cpu{cpu}/cache"
        system.files[f"{base}/index0/level"], system.files[f"{base}/index0/shared_cpu_list"] = "1\n", f"{cpu}\n"
        system.files[f"{base}/index1/level"], system.files[f"{base}/index1/shared_cpu_list"] = "2\n", "4-7\n"
        system.files[f"{base}/index2/level"], system.files[f"{base}/index2/shared_cpu_list"] = "3\n", "0-7\n"
    system.files["/sys/devices/system/cpu/online"] = "0-9\n"
    for cpu in (8, 9):  # two more CPUs of socket 1, so the module is not its last
        system.files[online_file(cpu)] = "1\n"
        system.files[f"/sys/devices/system/cpu/cpu{cpu}/topology/physical_package_id"] = "1\n"
    changed, _ = offline(system, 6)
    assert [path for path, _ in system.written] == [online_file(cpu) for cpu in (4, 5, 6, 7)]
    assert changed["cpus"] == "4-7"  # the L3 (shared by all) is no reason to take the socket


def test_a_core_holding_cpu0_is_refused() -> None:
    system = host(smt=True)
    with pytest.raises(ActionFailed, match="cpu1's core holds CPU 0, the boot CPU"):
        offline(system, 1)
    assert system.written == []


def test_the_last_core_of_a_socket_is_refused_even_with_its_sibling_online() -> None:
    system = host(smt=True, online="0-5")
    with pytest.raises(ActionFailed, match=r"cpu5's core \(4-5\) is the last online in socket 1"):
        offline(system, 5)
    assert system.written == []


def test_a_dry_run_writes_nothing() -> None:
    system = host()
    changed, ctx = offline(system, 5, dry_run=True)
    assert system.written == []
    assert [r.kind for r in ctx.log.records] == ["dry_run"]
    assert changed["online"] is False


@pytest.mark.parametrize(
    ("params", "reason"),
    [
        ({"cpu": 0}, "CPU 0 is the boot CPU"),
        ({"cpu": -1}, "1 or more"),
        ({"cpu": "3"}, "valid integer"),
        ({"cpu": True}, "valid integer"),
        ({"cpu": 9000}, "less than or equal to 8191"),
        ({}, "cpu: Field required"),
        ({"cpu": 3, "all": True}, "all: Extra inputs"),
    ],
)
def test_parameters_refused(params: dict[str, object], reason: str) -> None:
    with pytest.raises(ActionRefused, match=reason):
        ACTIONS["offline_cpu"].parse(params)


@pytest.mark.parametrize(
    ("system", "cpu", "reason"),
    [
        (host(online="0-4"), 4, r"refused: cpu4's core \(4\) is the last online in socket 1"),
        (host(online="1-7", isolated="2-7"), 1, r"refused: cpu1's core \(1\) holds the last housekeeping CPUs online"),
        (host(online="1-7", nohz_full="2-7"), 1, "isolated or nohz_full"),
        (host(agent="5"), 5, r"refused: the agent may run on cpu5's core only \(Cpus_allowed_list 5"),
        (host(), 12, "precondition: /sys/devices/system/cpu/cpu12/online is not there"),
        (host(online="1-7", isolated="2-7"), 6, r"refused: cpu6's core \(6\) is isolated or nohz_full \(6\)"),
        (host(smt=True, nohz_full="5"), 4, r"refused: cpu4's core \(4-5\) is isolated or nohz_full \(5\)"),
    ],
    ids=["last-of-socket", "last-housekeeping", "nohz_full", "agent-pinned", "no-such-cpu", "isolated", "sibling"],
)
def test_cpus_the_host_needs_are_refused_and_nothing_is_written(system: RecordedSystem, cpu: int, reason: str) -> None:
    with pytest.raises(ActionFailed, match=reason):
        offline(system, cpu)
    assert system.written == []


def test_a_cpu_without_a_known_socket_is_not_taken_offline_blind() -> None:
    system = host()
    del system.files["/sys/devices/system/cpu/cpu3/topology/physical_package_id"]
    with pytest.raises(ActionFailed, match="cannot tell cpu3's socket"):
        offline(system, 3)
    assert system.written == []


def test_an_online_file_that_refuses_the_write_is_a_failed_precondition() -> None:
    system = host()
    system.refuse_writes.add(online_file(3))  # EIO: a CPU the kernel will not take offline
    with pytest.raises(ActionFailed, match=r"cpu3/online is not writable \(cannot write"):
        offline(system, 3)


def test_a_cpu_still_listed_online_after_the_write_fails_the_action() -> None:
    system = host(RecordedSystem)  # a kernel that accepted the write and kept the CPU
    system.files[online_file(3)] = "1\n"
    system.refuse_writes.clear()
    original = system.write_text

    def keep_online(path: str, text: str) -> None:
        original(path, text)
        system.files[path] = "1\n"

    system.write_text = keep_online  # type: ignore[method-assign]
    with pytest.raises(ActionFailed, match="cpu3 is still online after writing 0"):
        offline(system, 3)


def test_the_contract_calls_it_idempotent_and_not_disruptive() -> None:
    assert ACTIONS["offline_cpu"].idempotent is CONTRACT["offline_cpu"].idempotent is True
    assert CONTRACT["offline_cpu"].disruptive is False
    assert ACTIONS["offline_cpu"].site == "host"


def test_the_simulated_host_records_the_cpu_offline(tmp_path: Path) -> None:
    signer = Signer(Ed25519PrivateKey.generate())
    executor, driver, reports = sim_executor(signer)
    message = signer.sign(envelope("offline_cpu", {"cpu": 3})).model_dump()
    assert executor.handle(message) == {"outcome": "succeeded", "error": None}
    assert driver.host.offline_cpus == {3}
    [result] = reports.of("remediator.step_result")
    assert result["commands"][0]["argv"] == ["simulated", "offline_cpu", '{"cpu": 3}']
    missing = signer.sign(envelope("offline_cpu", {"cpu": 999})).model_dump()
    assert executor.handle(missing)["outcome"] == "failed"  # the virtual host has no CPU 999
    assert driver.host.offline_cpus == {3}
