"""soft_offline_page: the allow-list's parameters, the real driver's reads and its one sysfs write through a
recorded system (every refusal with nothing written), the central side filling in the page, and the simulated
driver. The /proc/iomem layout is ours, in the kernel's format (the corpus has none)."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from checker.agent.config import HOST_ACTIONS_DEFAULT
from cyborg.actions import ACTIONS, HOST_ACTIONS, ActionRefused
from cyborg.central.issuing import resolve_params
from cyborg.commands import ActionContext, ActionFailed
from cyborg.drivers.linux import LinuxDriver
from cyborg.drivers.pages import IOMEM, MEMINFO, MEMORY_DIR, SOFT_OFFLINE, system_ram
from cyborg.envelope import Signer
from remediator.actions import ACTIONS as CONTRACT
from tests.builders.envelopes import envelope
from tests.cyborg.helpers import RecordedSystem, sim_executor

IOMEM_TEXT = """\
00000000-00000fff : Reserved
00001000-0009ffff : System RAM
000a0000-000fffff : Reserved
00100000-6d7fffff : System RAM
  01000000-01e02816 : Kernel code
  02000000-0260dfff : Kernel rodata
6d800000-6fffffff : Reserved
80000000-8fffffff : PCI MMCONFIG 0000 [bus 00-ff]
  80000000-8fffffff : Reserved
c0000000-fbffffff : PCI Bus 0000:00
100000000-107fffffff : System RAM
"""
MEMINFO_TEXT = "MemTotal:       65843236 kB\nMemFree:        1843236 kB\nHardwareCorrupted:     {kb} kB\n"
PAGE = "0x849923000"


class KernelSystem(RecordedSystem):
    """A recorded system whose kernel poisons a page written to soft_offline_page (HardwareCorrupted grows)."""

    def write_text(self, path: str, text: str) -> None:
        super().write_text(path, text)
        if path == SOFT_OFFLINE:
            pages = self.__dict__.setdefault("poisoned", set())
            if text not in pages:
                pages.add(text)
                kb = int(self.files[MEMINFO].split("HardwareCorrupted:")[1].split()[0]) + 4
                self.files[MEMINFO] = MEMINFO_TEXT.format(kb=kb)


def host(*, corrupted_kb: int = 0, iomem: str = IOMEM_TEXT) -> RecordedSystem:
    system = KernelSystem(files={IOMEM: iomem, MEMINFO: MEMINFO_TEXT.format(kb=corrupted_kb)})
    system.dirs[MEMORY_DIR] = ["auto_online_blocks", "block_size_bytes", "hard_offline_page", "soft_offline_page"]
    return system


def offline(system: RecordedSystem, address: str = PAGE, **extra: object) -> tuple[dict[str, object], ActionContext]:
    spec = ACTIONS["soft_offline_page"]
    dry_run = bool(extra.pop("dry_run", False))
    ctx = ActionContext(system, timeout_s=30, dry_run=dry_run)
    return LinuxDriver(system).run(spec, spec.parse({"address": address, **extra}), ctx), ctx


def test_offlines_the_page_and_sees_the_kernel_count_it() -> None:
    system = host()
    changed, ctx = offline(system)
    assert system.written == [(SOFT_OFFLINE, PAGE)]
    assert changed == {
        "address": PAGE,
        "pfn": "0x849923",
        "system_ram": "0x100000000-0x107fffffff",
        "hardware_corrupted_kb_before": 0,
        "hardware_corrupted_kb_after": 4,
        "offlined": True,
        "already_offlined": False,
    }
    assert [r.argv for r in ctx.log.records] == [["write", SOFT_OFFLINE, PAGE]]
    again, _ = offline(system)  # idempotent: the kernel accepts a poisoned page and counts nothing new
    assert again["already_offlined"] is True


def test_a_dry_run_writes_nothing() -> None:
    system = host()
    changed, ctx = offline(system, dry_run=True)
    assert system.written == []
    assert [r.kind for r in ctx.log.records] == ["dry_run"]
    assert "offlined" not in changed


@pytest.mark.parametrize(
    ("system", "address", "reason"),
    [
        (host(), "0x70000000", r"refused: 0x70000000 is in no System RAM range of /proc/iomem"),
        (host(), "0x80000000", "a device's or the firmware's memory"),
        (host(corrupted_kb=256), PAGE, r"refused: the host has 64 poisoned pages already \(HardwareCorrupted 256 kB\)"),
        (host(iomem=IOMEM_TEXT.replace("100000000-107fffffff", "00000000-00000000")), PAGE, "no System RAM range"),
        (host(iomem="00000000-00000000 : System RAM\n"), PAGE, "read without CAP_SYS_ADMIN it shows zeros"),
    ],
    ids=["reserved", "pci", "cap", "not-ram", "zeros"],
)
def test_pages_it_must_not_touch_are_refused_and_nothing_is_written(
    system: RecordedSystem, address: str, reason: str
) -> None:
    with pytest.raises(ActionFailed, match=reason):
        offline(system, address)
    assert system.written == []


def test_a_kernel_without_memory_failure_support_is_a_failed_precondition() -> None:
    system = host()
    system.dirs[MEMORY_DIR] = ["block_size_bytes"]
    with pytest.raises(ActionFailed, match="no /sys/devices/system/memory/soft_offline_page"):
        offline(system)
    no_count = host()
    no_count.files[MEMINFO] = "MemTotal:       65843236 kB\n"
    with pytest.raises(ActionFailed, match="no HardwareCorrupted line"):
        offline(no_count)
    assert system.written == no_count.written == []


def test_a_page_the_kernel_cannot_migrate_fails_the_step() -> None:
    system = host()
    system.refuse_writes.add(SOFT_OFFLINE)  # EBUSY/EIO from soft_offline_page(): the page stays in use
    with pytest.raises(ActionFailed, match=r"the kernel did not offline 0x849923000 \(cannot write"):
        offline(system)


def test_the_cap_is_a_parameter() -> None:
    system = host(corrupted_kb=8)
    with pytest.raises(ActionFailed, match="the cap is 2"):
        offline(system, max_offlined_pages=2)


@pytest.mark.parametrize(
    ("params", "reason"),
    [
        ({"address": "0x849923380"}, "not 4 KiB-aligned"),
        ({"address": "0x0"}, "page 0 is never offlined"),
        ({"address": "849923000"}, "should match pattern"),
        ({"address": "0X849923000"}, "should match pattern"),
        ({"address": "-0x1000"}, "should match pattern"),
        ({"address": 0x849923000}, "valid string"),
        ({}, "address: Field required"),
        ({"address": PAGE, "max_offlined_pages": 0}, "greater than or equal to 1"),
        ({"address": PAGE, "hard": True}, "hard: Extra inputs"),
    ],
)
def test_parameters_refused(params: dict[str, object], reason: str) -> None:
    with pytest.raises(ActionRefused, match=reason):
        ACTIONS["soft_offline_page"].parse(params)


def test_the_central_side_takes_the_page_from_the_signal_and_nothing_else() -> None:
    spec = ACTIONS["soft_offline_page"]
    signal = {"kind": "page_ce_count", "subject": PAGE, "detail": {"page": PAGE}}
    assert resolve_params(spec, {}, {"signal": signal}) == {"address": PAGE, "max_offlined_pages": 64}
    with pytest.raises(ActionRefused, match="the signal does not name a page"):
        resolve_params(spec, {}, {"signal": {"kind": "dimm_ce_rate", "subject": "DIMM_A1"}})


def test_the_contract_the_allow_lists_and_the_iomem_parser_agree() -> None:
    assert ACTIONS["soft_offline_page"].idempotent is CONTRACT["soft_offline_page"].idempotent is True
    assert CONTRACT["soft_offline_page"].disruptive is False
    assert "soft_offline_page" in HOST_ACTIONS
    assert "soft_offline_page" in HOST_ACTIONS_DEFAULT
    assert system_ram(IOMEM_TEXT) == [(0x1000, 0x9FFFF), (0x100000, 0x6D7FFFFF), (0x100000000, 0x107FFFFFFF)]


def test_the_simulated_host_takes_the_page_out_of_use() -> None:
    signer = Signer(Ed25519PrivateKey.generate())
    executor, driver, reports = sim_executor(signer, faults=("dimm_ce_page",))
    message = signer.sign(envelope("soft_offline_page", {"address": "0x100002000"})).model_dump()
    assert executor.handle(message) == {"outcome": "succeeded", "error": None}
    assert driver.host.ras.offlined == {0x100002000}
    [result] = reports.of("remediator.step_result")
    assert result["changed"]["offlined"] is True
    outside = signer.sign(envelope("soft_offline_page", {"address": "0x2000"})).model_dump()
    assert executor.handle(outside)["outcome"] == "failed"  # below the sim's RAM: refused
    driver.host.reboot()
    assert driver.host.ras.offlined == set()  # a reboot brings the page back
