"""The real driver's memory-tier actions leave an owner's choices alone: NUMA balancing turned off (0), a
kernel.numa_balancing another sysctl file sets, and weights the kernel sets itself (weighted_interleave/auto)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cyborg.actions import ACTIONS
from cyborg.commands import ActionContext, ActionFailed
from cyborg.drivers.linux import LinuxDriver
from cyborg.drivers.tiers import NUMA_BALANCING, NUMA_BALANCING_CONF, WEIGHTED_INTERLEAVE
from tests.cyborg.helpers import RecordedSystem

OSRELEASE = {"/proc/sys/kernel/osrelease": "6.8.0-45-generic\n"}


def run(system: RecordedSystem, tmp_path: Path, action: str, params: dict[str, object]) -> dict[str, object]:
    driver = LinuxDriver(system, work_dir=tmp_path / "state", poll_s=0.01, firmware_dir=tmp_path / "images")
    spec = ACTIONS[action]
    return driver.run(spec, spec.parse(params), ActionContext(system, timeout_s=60, dry_run=False))


def test_balancing_turned_off_is_not_overridden(tmp_path: Path) -> None:
    system = RecordedSystem(files={NUMA_BALANCING: "0\n", **OSRELEASE})
    with pytest.raises(ActionFailed, match=r"numa_balancing is 0: NUMA balancing was turned off on this host"):
        run(system, tmp_path, "set_numa_balancing", {})
    assert system.written == []  # neither the sysctl nor a drop-in that would make it permanent


@pytest.mark.parametrize(
    ("directory", "name", "line"),
    [
        ("/etc/sysctl.d", "99-latency.conf", "kernel.numa_balancing = 0"),
        ("/usr/lib/sysctl.d", "50-default.conf", "kernel/numa_balancing=1"),
        ("/run/sysctl.d", "10-tuned.conf", "-kernel.numa_balancing = 1"),
        ("/etc", "sysctl.conf", "  kernel.numa_balancing=1"),
    ],
)
def test_another_file_setting_it_is_named_and_nothing_is_written(
    tmp_path: Path, directory: str, name: str, line: str
) -> None:
    path = f"{directory}/{name}"
    files = {NUMA_BALANCING: "1\n", **OSRELEASE, path: f"# tuned by the owner\n{line}\nvm.swappiness = 10\n"}
    dirs = {directory: [name]} if directory != "/etc" else {}
    system = RecordedSystem(files=files, dirs=dirs)
    with pytest.raises(ActionFailed, match=rf"precondition: {path} sets kernel.numa_balancing"):
        run(system, tmp_path, "set_numa_balancing", {})
    assert system.written == []


def test_other_keys_comments_and_our_own_drop_in_are_no_conflict(tmp_path: Path) -> None:
    files = {
        NUMA_BALANCING: "1\n",
        **OSRELEASE,
        "/etc/sysctl.d/99-other.conf": "# kernel.numa_balancing = 0\n; kernel.numa_balancing = 0\nvm.numa_stat = 1\n",
        "/etc/sysctl.d/99-other.conf.bak": "kernel.numa_balancing = 0\n",  # not a .conf: sysctl ignores it
        NUMA_BALANCING_CONF: "kernel.numa_balancing = 3\n",  # ours, from an earlier run
    }
    dirs = {"/etc/sysctl.d": ["99-other.conf", "99-other.conf.bak", NUMA_BALANCING_CONF.rsplit("/", 1)[1]]}
    system = RecordedSystem(files=files, dirs=dirs)
    changed = run(system, tmp_path, "set_numa_balancing", {})
    assert changed == {"numa_balancing": 3, "previous": 1, "persisted": NUMA_BALANCING_CONF}


@pytest.mark.parametrize("auto", ["true\n", "Y\n", "1\n"])
def test_weights_the_kernel_sets_itself_are_not_switched_to_manual(tmp_path: Path, auto: str) -> None:
    system = RecordedSystem(
        files={f"{WEIGHTED_INTERLEAVE}/auto": auto}, dirs={WEIGHTED_INTERLEAVE: ["auto", "node0", "node2"]}
    )
    with pytest.raises(ActionFailed, match=r"weighted_interleave/auto is .*not switched to manual"):
        run(system, tmp_path, "set_interleave_weights", {"weights": {"0": 3, "2": 1}})
    assert system.written == []
    system.files[f"{WEIGHTED_INTERLEAVE}/auto"] = "false\n"  # manual mode: the class's weights are written
    assert run(system, tmp_path, "set_interleave_weights", {"weights": {"0": 3, "2": 1}}) == {
        "weights": {"0": 3, "2": 1}
    }
