"""The real driver and the central BMC driver: the argv they build for the real tools, fed recorded
tool outputs (the shared corpus, read in place) through a recorded system. Nothing here runs a tool."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from cyborg.actions import ACTIONS, ActionRefused
from cyborg.commands import ActionContext, ActionFailed, ActionTimedOut
from cyborg.drivers.bmc import FoundOff, IpmitoolBmc
from cyborg.drivers.linux import (
    CMCI_DISABLED,
    EDAC_CORE_INITSTATE,
    EDAC_MODPROBE,
    EDAC_POLL,
    KEXEC_DISABLED,
    OSRELEASE,
    LinuxDriver,
    cpu_list,
    cpu_mask,
)
from cyborg.drivers.ppr import physical_addresses
from cyborg.drivers.tiers import DEMOTION, NUMA_BALANCING, NUMA_BALANCING_CONF
from tests.conftest import samples_dir
from tests.cyborg.helpers import RecordedSystem


def sample(path: str) -> str:
    return (samples_dir() / path).read_text(encoding="utf-8")


def run(
    driver: LinuxDriver, action: str, params: dict[str, object], *, dry_run: bool = False
) -> tuple[dict, ActionContext]:  # type: ignore[type-arg]
    spec = ACTIONS[action]
    ctx = ActionContext(driver.system, timeout_s=60, dry_run=dry_run)
    return driver.run(spec, spec.parse(params), ctx), ctx


def argvs(ctx: ActionContext) -> list[list[str]]:
    return [r.argv for r in ctx.log.records if r.kind in ("run", "dry_run")]


def linux(system: RecordedSystem, tmp_path: Path, **options: object) -> LinuxDriver:
    options.setdefault("firmware_dir", tmp_path / "images")
    return LinuxDriver(system, work_dir=tmp_path / "state", poll_s=0.01, **options)  # type: ignore[arg-type]


def test_warm_reboot_kexecs_the_running_kernel_where_allowed(tmp_path: Path) -> None:
    system = RecordedSystem(
        files={KEXEC_DISABLED: "0\n", OSRELEASE: "6.1.0-28-amd64\n"},
        tools={"kexec", "systemctl"},
        dirs={"/boot": ["vmlinuz-6.1.0-28-amd64", "initrd.img-6.1.0-28-amd64"]},
    )
    changed, ctx = run(linux(system, tmp_path), "reboot", {"mode": "warm"})
    assert argvs(ctx) == [
        [
            "kexec",
            "--load",
            "/boot/vmlinuz-6.1.0-28-amd64",
            "--initrd=/boot/initrd.img-6.1.0-28-amd64",
            "--reuse-cmdline",
        ],
        ["systemctl", "kexec"],
    ]
    assert changed == {"mode": "warm", "via": "kexec", "release": "6.1.0-28-amd64", "restarting": True}
    system.files[KEXEC_DISABLED] = "1\n"  # kexec_load_disabled: the kernel does not allow it
    changed, ctx = run(linux(system, tmp_path), "reboot", {"mode": "warm"})
    assert argvs(ctx) == [["systemctl", "reboot"]]
    _, ctx = run(linux(system, tmp_path, warm_reboot=False), "reboot", {"mode": "warm"})
    assert argvs(ctx) == [["systemctl", "reboot"]]


def test_a_reboot_that_does_not_happen_runs_into_its_budget(tmp_path: Path) -> None:
    system = RecordedSystem(files={"/proc/sys/kernel/random/boot_id": "b-1\n"}, tools={"systemctl"})
    driver = linux(system, tmp_path)
    ctx = ActionContext(system, timeout_s=0.05)
    with pytest.raises(ActionTimedOut, match="did not restart"):
        driver.await_restart(ACTIONS["reboot"], ctx, "b-1")
    with pytest.raises(ActionFailed, match="did not restart"):
        driver.verify(ACTIONS["reboot"], ACTIONS["reboot"].parse({}), ActionContext(system, timeout_s=5), "b-1")


@pytest.mark.parametrize(
    ("tools", "install", "default"),
    [
        (
            {"apt-get", "grub-set-default", "kexec", "systemctl"},
            [
                "env",
                "DEBIAN_FRONTEND=noninteractive",
                "apt-get",
                "install",
                "-y",
                "--no-install-recommends",
                "--",
                "linux-image-2.6.23.17-amdpatch",
            ],
            [["grub-set-default", "Advanced options for SLES>SLES, with Linux 2.6.23.17-amdpatch"], ["update-grub"]],
        ),
        (
            {"zypper", "grubby", "kexec", "systemctl"},
            ["zypper", "--non-interactive", "install", "--", "kernel-2.6.23.17-amdpatch"],
            [["grubby", "--set-default", "/boot/vmlinuz-2.6.23.17-amdpatch"]],
        ),
    ],
    ids=["apt-grub", "zypper-grubby"],
)
def test_install_kernel_pins_the_package_makes_it_default_and_kexecs_into_it(
    tmp_path: Path, tools: set[str], install: list[str], default: list[list[str]]
) -> None:
    system = RecordedSystem(
        files={OSRELEASE: "2.6.16.60-0.21-smp\n", KEXEC_DISABLED: "0", "/etc/os-release": 'NAME="SLES"\n'},
        tools=tools,
        dirs={"/boot": ["vmlinuz-2.6.23.17-amdpatch", "initrd.img-2.6.23.17-amdpatch"]},
    )
    changed, ctx = run(
        linux(system, tmp_path), "install_kernel", {"release": "2.6.23.17-amdpatch", "erratum": "AMD-298"}
    )
    assert argvs(ctx) == [
        install,
        *default,
        [
            "kexec",
            "--load",
            "/boot/vmlinuz-2.6.23.17-amdpatch",
            "--initrd=/boot/initrd.img-2.6.23.17-amdpatch",
            "--reuse-cmdline",
        ],
        ["systemctl", "kexec"],
    ]
    assert changed["previous"] == "2.6.16.60-0.21-smp"
    # after the boot, uname -r decides
    system.answer(["uname", "-r"], "2.6.16.60-0.21-smp\n")
    spec = ACTIONS["install_kernel"]
    with pytest.raises(ActionFailed, match="did not boot"):
        linux(system, tmp_path).verify(
            spec, spec.parse({"release": "2.6.23.17-amdpatch"}), ActionContext(system, timeout_s=5), None
        )


def test_tune_error_reporting_writes_sysfs_and_the_next_boots_setting(tmp_path: Path) -> None:
    module = {EDAC_POLL: "1000\n", EDAC_CORE_INITSTATE: "live\n", CMCI_DISABLED: "1\n"}
    polling = {"/sys/devices/system/edac/mc/mc0/mc_name": "ie31200\n"}
    system = RecordedSystem(files={**module, **polling}, dirs={"/sys/devices/system/edac/mc": ["mc0", "power"]})
    changed, ctx = run(linux(system, tmp_path), "tune_error_reporting", {"edac_poll_s": 37, "cmci": "cmci"})
    assert system.written == [
        (EDAC_POLL, "37000"),
        (EDAC_MODPROBE, "options edac_core edac_mc_poll_msec=37000\n"),
        (CMCI_DISABLED, "0"),  # back on; there is no way to turn it off
    ]
    assert changed == {"edac_poll_msec": 37000, "previous": 1000, "persisted": EDAC_MODPROBE, "cmci": "on"}
    assert [r.argv[0] for r in ctx.log.records] == ["write", "write", "write"]
    # dry run: the same plan, nothing written
    dry = RecordedSystem(files={EDAC_POLL: "1000\n", EDAC_CORE_INITSTATE: "live\n"})
    _, ctx = run(linux(dry, tmp_path), "tune_error_reporting", {}, dry_run=True)
    assert dry.written == []
    assert [r.kind for r in ctx.log.records] == ["dry_run", "dry_run"]


def test_cmci_cannot_be_turned_off() -> None:
    with pytest.raises(ActionRefused, match="cmci"):
        ACTIONS["tune_error_reporting"].parse({"edac_poll_s": 37, "cmci": "poll"})


def test_a_built_in_edac_core_is_tuned_now_and_says_what_the_next_boot_needs(tmp_path: Path) -> None:
    system = RecordedSystem(files={EDAC_POLL: "1000\n"})  # no /sys/module/edac_core/initstate: built in
    changed, _ = run(linux(system, tmp_path), "tune_error_reporting", {"edac_poll_s": 37})
    assert system.written == [(EDAC_POLL, "37000")]  # no modprobe.d file a built-in edac_core never reads
    assert changed["persisted"] is None
    assert "edac_core.edac_mc_poll_msec=37000 on the kernel command line" in changed["note"]


def test_a_driver_that_does_not_poll_is_not_tuned(tmp_path: Path) -> None:
    names = {f"/sys/devices/system/edac/mc/mc{i}/mc_name": f"Skylake Socket#{i} IMC#0\n" for i in range(2)}
    system = RecordedSystem(
        files={EDAC_POLL: "1000\n", EDAC_CORE_INITSTATE: "live\n", **names},
        dirs={"/sys/devices/system/edac/mc": ["mc0", "mc1"]},
    )
    with pytest.raises(ActionFailed, match="does not poll"):
        run(linux(system, tmp_path), "tune_error_reporting", {})
    assert system.written == []
    with pytest.raises(ActionFailed, match="no EDAC driver"):
        run(linux(RecordedSystem(), tmp_path), "tune_error_reporting", {})


def test_irq_affinity_moves_device_irqs_to_housekeeping_cores(tmp_path: Path) -> None:
    system = RecordedSystem(
        files={
            "/sys/devices/system/cpu/isolated": "4-7,12-15\n",
            "/sys/devices/system/cpu/online": "0-15\n",
            "/proc/irq/24/smp_affinity_list": "0-15\n",
            "/proc/irq/25/smp_affinity_list": "0-3\n",
            "/proc/irq/31/smp_affinity_list": "6\n",
            "/etc/default/irqbalance": "#IRQBALANCE_ONESHOT=\nIRQBALANCE_BANNED_CPULIST=\n",
        },
        dirs={"/proc/irq": ["0", "24", "25", "31", "default_smp_affinity"]},
        tools={"irqbalance"},
        refuse_writes={"/proc/irq/31/smp_affinity_list"},  # a managed IRQ: the kernel says EIO
    )
    system.answer(["irqbalance", "--version"], "irqbalance version 1.9.0\n", 1)
    changed, ctx = run(linux(system, tmp_path), "repair_irq_affinity", {})
    assert changed == {"moved": [24], "managed": [31], "housekeeping": "0-3,8-11", "banned": "4-7,12-15"}
    assert ("/proc/irq/24/smp_affinity_list", "0-3,8-11") in system.written
    assert system.files["/etc/default/irqbalance"] == "#IRQBALANCE_ONESHOT=\nIRQBALANCE_BANNED_CPULIST=4-7,12-15\n"
    assert ["systemctl", "restart", "irqbalance"] in argvs(ctx)
    assert cpu_list({0, 1, 2, 5, 7, 8}) == "0-2,5,7-8"


IRQBALANCE_USAGE = (  # what an irqbalance without -V prints (to stdout, exit 1) for --version
    "irqbalance [--oneshot | -o] [--debug | -d] [--foreground | -f] [--hintpolicy= | -h [exact|subset|ignore]]\n"
)


def irqbalance_host(defaults: str, version: str | None, *, package: str | None = None) -> RecordedSystem:
    """Isolated CPUs 4-7 and 36-39 of 0-63, no IRQ to move; `version` is what `irqbalance --version` prints."""
    system = RecordedSystem(
        files={
            "/sys/devices/system/cpu/isolated": "4-7,36-39\n",
            "/sys/devices/system/cpu/online": "0-63\n",
            "/etc/default/irqbalance": defaults,
        },
        dirs={"/proc/irq": ["0", "default_smp_affinity"]},
        tools={"irqbalance", "systemctl", "dpkg-query"},
    )
    # irqbalance.c: `-V` prints "irqbalance version X.Y.Z" to stdout and exits 1
    system.answer(["irqbalance", "--version"], version if version is not None else IRQBALANCE_USAGE, 1)
    if package is None:
        system.answer(["dpkg-query"], "", 1)  # stderr: dpkg-query: no packages found matching irqbalance
    else:
        system.answer(["dpkg-query", "-W", "--showformat=${Version}", "irqbalance"], package)
    return system


@pytest.mark.parametrize(
    ("version", "package", "written"),
    [
        ("irqbalance version 1.9.0\n", None, ["IRQBALANCE_BANNED_CPULIST=4-7,36-39"]),
        ("irqbalance version 1.8.0\n", None, ["IRQBALANCE_BANNED_CPULIST=4-7,36-39"]),
        ("irqbalance version 1.7.0\n", None, ["IRQBALANCE_BANNED_CPUS=000000f0,000000f0"]),
        (None, "1.9.2-1", ["IRQBALANCE_BANNED_CPULIST=4-7,36-39"]),  # no -V: Debian's package version
        (None, "1.5.0-3", ["IRQBALANCE_BANNED_CPUS=000000f0,000000f0"]),
    ],
    ids=["1.9-cpulist", "1.8-cpulist", "1.7-mask", "dpkg-1.9-cpulist", "dpkg-1.5-mask"],
)
def test_irqbalance_gets_the_variable_its_version_reads(
    tmp_path: Path, version: str | None, package: str | None, written: list[str]
) -> None:
    system = irqbalance_host("#IRQBALANCE_ONESHOT=\n", version, package=package)
    changed, ctx = run(linux(system, tmp_path), "repair_irq_affinity", {})
    assert system.files["/etc/default/irqbalance"] == "\n".join(["#IRQBALANCE_ONESHOT=", *written]) + "\n"
    assert changed["banned"] == "4-7,36-39"
    assert ["systemctl", "restart", "irqbalance"] in argvs(ctx)
    assert not any(r.argv == ["irqbalance version unknown"] for r in ctx.log.records)


def test_an_irqbalance_of_unknown_version_gets_both_variables_and_the_log_says_so(tmp_path: Path) -> None:
    system = irqbalance_host("IRQBALANCE_ARGS=\n", None)
    _, ctx = run(linux(system, tmp_path), "repair_irq_affinity", {})
    assert system.files["/etc/default/irqbalance"] == (
        "IRQBALANCE_ARGS=\nIRQBALANCE_BANNED_CPULIST=4-7,36-39\nIRQBALANCE_BANNED_CPUS=000000f0,000000f0\n"
    )
    assert argvs(ctx)[:2] == [
        ["irqbalance", "--version"],
        ["dpkg-query", "-W", "--showformat=${Version}", "irqbalance"],
    ]
    [note] = [r for r in ctx.log.records if r.argv == ["irqbalance version unknown"]]
    assert "writing both IRQBALANCE_BANNED_CPULIST" in note.output


@pytest.mark.parametrize(
    ("version", "stale", "written"),
    [
        ("1.9.0", "IRQBALANCE_BANNED_CPUS=0000ff00", "IRQBALANCE_BANNED_CPULIST=4-7,36-39"),
        ("1.7.0", "IRQBALANCE_BANNED_CPULIST=8-15", "IRQBALANCE_BANNED_CPUS=000000f0,000000f0"),
    ],
    ids=["stale-mask", "stale-cpulist"],
)
def test_a_stale_line_of_the_other_variable_is_removed(tmp_path: Path, version: str, stale: str, written: str) -> None:
    # 1.8 and later still take a set IRQBALANCE_BANNED_CPUS over the cpulist (cputree.c, setup_banned_cpus)
    system = irqbalance_host(
        f"#IRQBALANCE_BANNED_CPUS=\n{stale}\nIRQBALANCE_ARGS=\n", f"irqbalance version {version}\n"
    )
    run(linux(system, tmp_path), "repair_irq_affinity", {})
    assert system.files["/etc/default/irqbalance"] == f"#IRQBALANCE_BANNED_CPUS=\nIRQBALANCE_ARGS=\n{written}\n"


@pytest.mark.parametrize(
    ("cpus", "mask"),
    [
        (set(), "00000000"),
        ({0}, "00000001"),
        ({4, 5, 6, 7, 12, 13, 14, 15}, "0000f0f0"),
        ({31}, "80000000"),
        ({32}, "00000001,00000000"),
        ({31, 32}, "00000001,80000000"),
        ({64}, "00000001,00000000,00000000"),
        ({0, 65, 127}, "80000000,00000002,00000000,00000001"),
    ],
)
def test_cpu_mask_groups_32_cpus_per_hex_word_like_smp_affinity(cpus: set[int], mask: str) -> None:
    assert cpu_mask(cpus) == mask


def test_memory_tiers(tmp_path: Path) -> None:
    system = RecordedSystem(
        files={
            DEMOTION: "false\n",
            "/sys/devices/system/node/node0/cpulist": "0-7\n",
            "/sys/devices/system/node/node2/cpulist": "\n",
        },
        dirs={
            "/sys/kernel/mm/mempolicy/weighted_interleave": ["node0", "node2"],
            "/sys/devices/system/node": ["node0", "node2", "possible"],
        },
    )
    assert run(linux(system, tmp_path), "enable_demotion", {})[0] == {"demotion_enabled": True, "previous": "false"}
    # The weights come with the action (the class's configuration, filled in centrally); none: no guess.
    with pytest.raises(ActionFailed, match="no weights given"):
        run(linux(system, tmp_path), "set_interleave_weights", {})
    changed, _ = run(linux(system, tmp_path), "set_interleave_weights", {"weights": {"0": 3, "2": 1}})
    assert changed == {"weights": {"0": 3, "2": 1}}
    assert ("/sys/kernel/mm/mempolicy/weighted_interleave/node2", "1") in system.written


@pytest.mark.parametrize(("before", "after"), [("1", "3")])  # 0 is refused: tests/cyborg/test_tiers_driver.py
def test_set_numa_balancing_adds_the_tiering_bit_reads_it_back_and_keeps_it(
    tmp_path: Path, before: str, after: str
) -> None:
    system = RecordedSystem(files={NUMA_BALANCING: f"{before}\n", "/proc/sys/kernel/osrelease": "6.8.0-45-generic\n"})
    changed, _ = run(linux(system, tmp_path), "set_numa_balancing", {})
    assert changed == {"numa_balancing": int(after), "previous": int(before), "persisted": NUMA_BALANCING_CONF}
    assert (NUMA_BALANCING, after) in system.written
    assert (
        NUMA_BALANCING_CONF,
        f"# fleetfix: TPP promotion from CPU-less (CXL) nodes\nkernel.numa_balancing = {after}\n",
    ) in system.written


def test_set_numa_balancing_refuses_a_kernel_before_5_18(tmp_path: Path) -> None:
    system = RecordedSystem(files={NUMA_BALANCING: "1\n", "/proc/sys/kernel/osrelease": "5.15.0-91-generic\n"})
    with pytest.raises(ActionFailed, match=r"predates numa_balancing=2 \(Linux 5.18\)"):
        run(linux(system, tmp_path), "set_numa_balancing", {})
    assert system.written == []


def test_clear_sel_archives_first_and_checks_it_emptied(tmp_path: Path) -> None:
    system = RecordedSystem()
    elist = sample("ipmi-sel/ipmitool-sel-elist-intel-s2600-fan-redundancy-bmcfw-psu-intrusion.txt")
    system.answer(["ipmitool", "sel", "elist"], elist)
    system.answer(["ipmitool", "sel", "info"], sample("ipmi-sel/ipmitool-sel-info-545-entries.txt"))
    with pytest.raises(ActionFailed, match="still holds 545 entries"):
        run(linux(system, tmp_path), "clear_sel", {})
    assert system.ran[:2] == [["ipmitool", "sel", "elist"], ["ipmitool", "sel", "clear"]]
    [(archive, text)] = system.written
    assert archive.startswith(str(tmp_path / "state" / "sel-"))
    assert text == elist
    cleared = RecordedSystem()
    cleared.answer(["ipmitool", "sel", "info"], "SEL Information\nEntries          : 1\nPercent Used     : 0%\n")
    assert run(linux(cleared, tmp_path), "clear_sel", {})[0]["entries_after"] == 1


def firmware_image(tmp_path: Path, data: bytes = b"capsule") -> tuple[str, str]:
    """An image in the driver's firmware directory, and its SHA-256."""
    path = tmp_path / "images" / "bmc.bin"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(data)
    return str(path), hashlib.sha256(data).hexdigest()


def flashed_copy(tmp_path: Path, digest: str) -> str:
    """Where the driver copies an image before checking and flashing it: the state directory."""
    return str(tmp_path / "state" / "firmware" / f"{digest}.img")


def test_reflash_bmc_waits_for_the_bmc_and_retries_once(tmp_path: Path) -> None:
    image, digest = firmware_image(tmp_path)
    mc_old = sample("ipmi-mc/ipmitool-mc-info-intel-bmc-fw-1.17.txt")
    mc_new = mc_old.replace("Firmware Revision         : 1.17", "Firmware Revision         : 1.43")
    system = RecordedSystem()
    # before; the BMC drops off during the flash; it answers again; the retry works; it restarts; after
    for stdout, rc in [(mc_old, 0), ("", 1), (mc_old, 0), (mc_new, 0)]:
        system.answer(["ipmitool", "mc", "info"], stdout, rc)
    for rc in (1, 0):
        system.answer(["/opt/vendor/bmcflash"], "", rc)
    tools = {"bmc": ["/opt/vendor/bmcflash", "--image", "{image}", "--expect", "{version}"]}
    params = {"component": "bmc", "version": "1.43", "image": image, "sha256": digest}
    changed, ctx = run(linux(system, tmp_path, firmware_tools=tools), "reflash_firmware", params)
    flashes = [a for a in argvs(ctx) if a[0] == "/opt/vendor/bmcflash"]
    assert flashes == [["/opt/vendor/bmcflash", "--image", flashed_copy(tmp_path, digest), "--expect", "1.43"]] * 2
    assert changed["targets"] == [
        {"component": "bmc", "version": "1.43", "previous": "1.17", "flashed": True, "after": "1.43"}
    ]


def test_reflash_refuses_an_image_whose_checksum_is_not_the_pinned_one(tmp_path: Path) -> None:
    image, _ = firmware_image(tmp_path)
    system = RecordedSystem()
    system.answer(["ethtool", "-i", "eth0"], sample("firmware/ethtool-i-eth0-e1000e.txt"))
    targets = [
        {"component": "nic:eth0", "version": "0.6-1", "image": image, "sha256": "0" * 64},
        {"component": "bmc", "version": "1.43", "image": image, "sha256": "0" * 64},
    ]
    with pytest.raises(ActionFailed, match=r"pinned 0{64}; not attempted: bmc"):
        run(linux(system, tmp_path), "reflash_firmware", {"targets": targets})
    assert not any(a[0] == "fwupdmgr" for a in system.ran)  # nothing was flashed


def test_reflash_through_fwupd_skips_what_already_runs_the_version(tmp_path: Path) -> None:
    image, digest = firmware_image(tmp_path)
    system = RecordedSystem()
    system.answer(["ethtool", "-i", "eth0"], sample("firmware/ethtool-i-eth0-e1000e.txt"))  # firmware 0.5-4
    changed, ctx = run(
        linux(system, tmp_path),
        "reflash_firmware",
        {"component": "nic:eth0", "version": "0.5-4", "image": image, "sha256": digest},
    )
    assert changed["targets"][0]["flashed"] is False
    assert not any(a[0] == "fwupdmgr" for a in argvs(ctx))
    later = RecordedSystem()
    later.answer(["ethtool", "-i", "eth0"], sample("firmware/ethtool-i-eth0-e1000e.txt"))
    later.answer(["ethtool", "-i", "eth0"], sample("firmware/ethtool-i-eth0-e1000e.txt").replace("0.5-4", "0.6-1"))
    changed, ctx = run(
        linux(later, tmp_path),
        "reflash_firmware",
        {"component": "nic:eth0", "version": "0.6-1", "image": image, "sha256": digest},
    )
    assert [
        "fwupdmgr",
        "--assume-yes",
        "--no-reboot-check",
        "--no-device-prompt",
        "--allow-older",
        "--allow-reinstall",
        "install",
        flashed_copy(tmp_path, digest),
    ] in argvs(ctx)
    assert changed["targets"][0]["after"] == "0.6-1"


def test_hard_ppr_captures_addresses_schedules_repair_and_reboots(tmp_path: Path) -> None:
    ghes = sample("kernel-log/syslog-ghes-recoverable-memory-fru-text-already-poisoned.log")  # x86: names its DIMM
    assert physical_addresses(ghes) == ["0xe16677000"]
    system = RecordedSystem(files={OSRELEASE: "6.1.0\n"}, tools={"systemctl"})
    system.answer(["dmesg"], "")  # before the switch: no addresses
    system.answer(["dmesg"], ghes)  # firmware-first: the next error carries its address
    tools = {
        "firmware_first": ["/opt/oem/memmode", "--firmware-first"],
        "cmci": ["/opt/oem/memmode", "--cmci"],
        "schedule": ["/opt/oem/ppr", "--hard", "--address", "{address}", "--dimm", "{dimm}"],
    }
    changed, ctx = run(linux(system, tmp_path, ppr_tool=tools), "hard_ppr", {"dimm": "CPU 1 DIMM 5"})
    assert [a for a in argvs(ctx) if a[0] != "dmesg"] == [
        ["/opt/oem/memmode", "--firmware-first"],
        ["/opt/oem/ppr", "--hard", "--address", "0xe16677000", "--dimm", "CPU 1 DIMM 5"],
        ["systemctl", "reboot"],  # PPR runs during POST: a cold reboot, never kexec
    ]
    assert changed["addresses"] == ["0xe16677000"]
    with pytest.raises(ActionFailed, match="PPR_TOOL has no 'firmware_first'"):
        run(linux(system, tmp_path), "hard_ppr", {"dimm": "CPU0_DIMM_A1"})


def test_ipmitool_bmc_reads_the_password_from_a_file_and_powers_on_a_host_that_is_off(tmp_path: Path) -> None:
    system = RecordedSystem()
    system.answer(["ipmitool"], "Chassis Power is off\n")
    bmc = IpmitoolBmc("fleetfix", tmp_path / "bmc-password", system=system)
    base = ["ipmitool", "-I", "lanplus", "-H", "h0-ipmi.mgmt", "-U", "fleetfix", "-f", str(tmp_path / "bmc-password")]
    with pytest.raises(FoundOff, match="does not turn on a host"):  # the plain step: someone may have switched it off
        bmc.power_cycle("h0", "h0-ipmi.mgmt", ActionContext(system, timeout_s=30))
    assert system.ran == [[*base, "chassis", "power", "status"]]
    system.ran.clear()
    done = bmc.power_cycle("h0", "h0-ipmi.mgmt", ActionContext(system, timeout_s=30), if_off="power_on")
    assert system.ran == [[*base, "chassis", "power", "status"], [*base, "chassis", "power", "on"]]
    assert done["power"] == "on"
    with pytest.raises(ActionFailed, match="no BMC address"):
        bmc.power_cycle("h1", None, ActionContext(system, timeout_s=30))
