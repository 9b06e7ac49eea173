"""The agent keeps off isolated cores by default: which CPUs it pins itself to (read from a fake sysfs tree),
what FLEETFIX_AGENT_CPUS changes, what it logs, and the real sched_setaffinity call in a child process."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from checker.agent.config import AgentConfig, AgentConfigError, load_agent_config
from checker.agent.worker import AgentStartError, Pinning, choose_pinning, pin_agent
from checker.collectors.base import SnapshotHost
from tests.conftest import REPO

EVERY = set(range(8))  # the CPUs the agent was started on, unless a test says otherwise


def fake_sys(
    root: Path, online: str | None = "0-7", isolated: str | None = "", nohz_full: str | None = "(null)"
) -> SnapshotHost:
    """A sysfs tree with these cpulist files (None: the file is missing) under root/root, as the agent reads it."""
    cpu = root / "root" / "sys" / "devices" / "system" / "cpu"
    cpu.mkdir(parents=True, exist_ok=True)
    for name, text in (("online", online), ("isolated", isolated), ("nohz_full", nohz_full)):
        if text is not None:
            (cpu / name).write_text(f"{text}\n")
    return SnapshotHost(root)


def choose(host: SnapshotHost, cpus: str = "", allowed: set[int] = EVERY) -> Pinning:
    return choose_pinning(AgentConfig(cpus=cpus), host, allowed)


def test_isolated_cpus_found_pin_the_agent_to_the_rest(tmp_path: Path) -> None:
    pinning = choose(fake_sys(tmp_path, isolated="2-5"))
    assert pinning == Pinning(frozenset({0, 1, 6, 7}), "isolated CPUs found", (2, 3, 4, 5))


def test_isolated_and_nohz_full_cpus_both_count(tmp_path: Path) -> None:
    pinning = choose(fake_sys(tmp_path, isolated="2-3", nohz_full="3-5"))
    assert (pinning.cpus, pinning.isolated) == (frozenset({0, 1, 6, 7}), (2, 3, 4, 5))


@pytest.mark.parametrize("isolated", ["", None], ids=["isolated-empty", "isolated-missing"])
def test_nohz_full_cpus_alone_are_kept_off(tmp_path: Path, isolated: str | None) -> None:
    pinning = choose(fake_sys(tmp_path, isolated=isolated, nohz_full="1-3"))
    assert pinning == Pinning(frozenset({0, 4, 5, 6, 7}), "isolated CPUs found", (1, 2, 3))


def test_a_kernel_without_nohz_full_support_still_pins(tmp_path: Path) -> None:
    pinning = choose(fake_sys(tmp_path, isolated="4-7", nohz_full=None))  # no nohz_full file at all
    assert pinning.cpus == frozenset({0, 1, 2, 3})


@pytest.mark.parametrize(("isolated", "nohz_full"), [("", "(null)"), ("", ""), ("", None), ("9-11", "(null)")])
def test_no_isolated_cpus_no_pinning(tmp_path: Path, isolated: str, nohz_full: str | None) -> None:
    # 9-11 are isolated but not online (offline or absent): nothing to keep off
    pinning = choose(fake_sys(tmp_path, isolated=isolated, nohz_full=nohz_full))
    assert pinning == Pinning(None, "no isolated CPUs")


def test_pinning_narrows_the_cpus_the_agent_was_started_on_and_never_widens_them(tmp_path: Path) -> None:
    host = fake_sys(tmp_path, isolated="2-5")
    assert choose(host, allowed={0, 2, 3}).cpus == frozenset({0})  # a unit's CPUAffinity= is kept
    # started on isolated CPUs only (inherited from whatever launched it): moved off them
    assert choose(host, allowed={2, 3}).cpus == frozenset({0, 1, 6, 7})


def test_an_explicit_cpu_list_wins(tmp_path: Path) -> None:
    host = fake_sys(tmp_path, isolated="2-5")
    assert choose(host, cpus="3,7") == Pinning(frozenset({3, 7}), "FLEETFIX_AGENT_CPUS")
    assert choose(fake_sys(tmp_path / "unreadable", online=None), cpus="1").cpus == frozenset({1})


def test_all_turns_pinning_off(tmp_path: Path) -> None:
    assert choose(fake_sys(tmp_path, isolated="2-5"), cpus="all") == Pinning(None, "FLEETFIX_AGENT_CPUS=all")
    assert AgentConfig(cpus=" all ").cpu_set == set()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("none", "not a cpu or cpu range"),
        ("ALL", "not a cpu or cpu range"),
        ("auto", "not a cpu or cpu range"),
        (",", "names no CPU"),
        ("3-1", "bad cpu range"),
    ],
)
def test_nonsense_is_refused_naming_what_is_accepted(monkeypatch: pytest.MonkeyPatch, value: str, message: str) -> None:
    monkeypatch.setenv("FLEETFIX_AGENT_CPUS", value)
    with pytest.raises(AgentConfigError, match=rf"^FLEETFIX_AGENT_CPUS: Value error, {message}.*'all': not pinned"):
        load_agent_config()


def test_every_cpu_isolated_is_not_pinned_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(os, "sched_setaffinity", lambda *args: pytest.fail("must not pin"))
    host = fake_sys(tmp_path, online="0-3", isolated="0-1", nohz_full="2-3")
    with caplog.at_level(logging.INFO, logger="checker.agent.worker"):
        pinning = pin_agent(AgentConfig(cpus=""), host)
    assert pinning.cpus is None
    assert logged(caplog) == [
        (
            logging.WARNING,
            "checker.agent.not_pinned",
            {"reason": "every online CPU is isolated or nohz_full", "isolated": [0, 1, 2, 3]},
        )
    ]


@pytest.mark.parametrize(
    ("files", "reason"),
    [
        ({"online": None}, "/sys/devices/system/cpu/online cannot be read"),
        ({"online": ""}, "/sys/devices/system/cpu/online names no CPU"),
        (
            {"isolated": None, "nohz_full": None},
            "/proc/cmdline, /sys/devices/system/cpu/isolated and /sys/devices/system/cpu/nohz_full cannot be read",
        ),
        ({"isolated": "2-x"}, "/sys/devices/system/cpu/isolated: not a cpu or cpu range"),
    ],
    ids=["online-missing", "online-empty", "both-missing", "garbled"],
)
def test_unreadable_files_leave_the_agent_unpinned_and_running(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    files: dict[str, Any],
    reason: str,
) -> None:
    monkeypatch.setattr(os, "sched_setaffinity", lambda *args: pytest.fail("must not pin"))
    with caplog.at_level(logging.INFO, logger="checker.agent.worker"):
        pinning = pin_agent(AgentConfig(cpus=""), fake_sys(tmp_path, **files))
    assert pinning.cpus is None
    [(level, event, fields)] = logged(caplog)
    assert (level, event) == (logging.WARNING, "checker.agent.not_pinned")
    assert fields["reason"].startswith(reason)


def test_pin_agent_sets_the_computed_affinity_and_logs_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[set[int]] = []
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(EVERY))
    monkeypatch.setattr(os, "sched_setaffinity", lambda pid, cpus: calls.append(set(cpus)))
    with caplog.at_level(logging.INFO, logger="checker.agent.worker"):
        pin_agent(AgentConfig(cpus=""), fake_sys(tmp_path, isolated="2-5"))
    assert calls == [{0, 1, 6, 7}]
    assert logged(caplog) == [
        (
            logging.INFO,
            "checker.agent.pinned",
            {"cpus": [0, 1, 6, 7], "reason": "isolated CPUs found", "isolated": [2, 3, 4, 5]},
        )
    ]


def test_no_isolated_cpus_is_logged_quietly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(os, "sched_setaffinity", lambda *args: pytest.fail("must not pin"))
    with caplog.at_level(logging.INFO, logger="checker.agent.worker"):
        pin_agent(AgentConfig(cpus=""), fake_sys(tmp_path))
        pin_agent(AgentConfig(cpus="all"), fake_sys(tmp_path))
    assert logged(caplog) == [
        (logging.INFO, "checker.agent.not_pinned", {"reason": "no isolated CPUs"}),
        (logging.INFO, "checker.agent.not_pinned", {"reason": "FLEETFIX_AGENT_CPUS=all"}),
    ]


def test_a_refused_affinity_stops_the_agent_only_when_the_operator_set_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def refuse(pid: int, cpus: set[int]) -> None:
        raise OSError(22, "Invalid argument")

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(EVERY))
    monkeypatch.setattr(os, "sched_setaffinity", refuse)
    host = fake_sys(tmp_path, isolated="2-5")
    with pytest.raises(AgentStartError, match=r"cannot pin to CPUs \[7\]: Invalid argument"):
        pin_agent(AgentConfig(cpus="7"), host)
    with caplog.at_level(logging.INFO, logger="checker.agent.worker"):
        assert pin_agent(AgentConfig(cpus=""), host).cpus is None
    [(level, event, fields)] = logged(caplog)
    assert (level, event, fields["reason"]) == (
        logging.WARNING,
        "checker.agent.not_pinned",
        "cannot pin to CPUs [0, 1, 6, 7]: Invalid argument",
    )


PIN_IN_CHILD = """
import os, sys, threading
from pathlib import Path
from checker.agent.config import AgentConfig
from checker.agent.worker import pin_agent
from checker.collectors.base import SnapshotHost
pin_agent(AgentConfig(cpus=""), SnapshotHost(Path(sys.argv[1])))
seen = []
thread = threading.Thread(target=lambda: seen.append(os.sched_getaffinity(0)))
thread.start()
thread.join()
print(sorted(os.sched_getaffinity(0)), sorted(seen[0]))
"""


def test_the_agent_really_moves_off_the_isolated_cpus(tmp_path: Path) -> None:
    """In a child process, on this machine's own CPUs: the last one it may use plays the isolated core."""
    mine = sorted(os.sched_getaffinity(0))
    if len(mine) < 2:
        pytest.skip("needs two CPUs to keep one off")
    fake_sys(tmp_path, online=",".join(map(str, mine)), isolated=str(mine[-1]))
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETFIX_AGENT_")}
    done = subprocess.run(
        [sys.executable, "-c", PIN_IN_CHILD, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=REPO,
        env=env,
    )
    assert done.stdout.strip() == f"{mine[:-1]} {mine[:-1]}"  # and every thread started after it


def logged(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str, dict[str, Any]]]:
    return [
        (r.levelno, r.getMessage(), getattr(r, "fields", {}))
        for r in caplog.records
        if r.name == "checker.agent.worker" and r.getMessage().startswith("checker.agent.")
    ]
