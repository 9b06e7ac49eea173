"""Not a benchmark: the real tool samples, and snapshot directories built from them.

Shared by the benches (checker_cycle, isolated_workload) and the tests, which import it from here, so
neither imports the other's helpers.

The samples are read in place from $FLEETFIX_TEST_SAMPLES (never copied into the repository), with
our own fixtures (tests/checker/fixtures) where the corpus has none. A snapshot is laid out the
way `fleetfix snapshot` lays it out: files under DIR/root/…, command outputs under DIR/commands/
listed in DIR/commands.json, kernel log records in DIR/root/dev/kmsg. What the corpus has no sample
of (a `smartctl --scan-open -j` answer, a rasdaemon database, NUMA sysfs files) is written here in
the tools' formats.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import sqlite3
from pathlib import Path

from checker.collectors.base import SnapshotHost
from checker.collectors.context import CollectorState
from checker.cycle import run_cycle
from checker.parsers.kernel_log import parse_log_lines
from checker.schemas import Report

# -- the samples ---------------------------------------------------------------------------------

SAMPLES_ENV = "FLEETFIX_TEST_SAMPLES"


class MissingSample(AssertionError):
    """The samples folder or one sample is not there: a test that needs it fails (it is never skipped)."""


def samples_dir() -> Path:
    """The sample folder; a missing setting is a MissingSample."""
    value = os.environ.get(SAMPLES_ENV)
    if not value:
        raise MissingSample(f"set {SAMPLES_ENV} to the folder of real tool samples (e.g. ../shared/fixtures)")
    path = Path(value)
    if not path.is_dir():
        raise MissingSample(f"{SAMPLES_ENV}={value} is not a folder; set it to the real tool samples")
    return path


def sample(relative: str) -> str:
    """A sample's text; a missing file is a MissingSample."""
    path = samples_dir() / relative
    if not path.is_file():
        raise MissingSample(f"sample {relative} not found under ${SAMPLES_ENV} ({path})")
    return path.read_text(encoding="utf-8")


def sample_names(folder: str) -> list[str]:
    """Relative names of the samples in one category folder, for parametrisation (needs the env var)."""
    value = os.environ.get(SAMPLES_ENV)
    if not value or not (Path(value) / folder).is_dir():
        return [f"{folder}/<set {SAMPLES_ENV}>"]
    return sorted(f"{folder}/{p.name}" for p in (Path(value) / folder).iterdir() if p.is_file())


def read_ttar(text: str, strip_prefix: str = "") -> dict[str, str]:
    """Files of a Prometheus ttar archive: 'Path: p', 'Lines: n', n lines of content, 'Mode: m'
    (or 'Directory:'/'SymlinkTo:' records), separated by '# ttar - - -' lines.

    A content whose last line ends in 'EOF' had no trailing newline. Paths are returned with
    `strip_prefix` removed, so they can be made relative to the tree the parser expects.
    """
    files: dict[str, str] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("Path: "):
            path = line[len("Path: ") :]
            i += 1
            if i < len(lines) and lines[i].startswith("Lines: "):
                count = int(lines[i][len("Lines: ") :])
                body = lines[i + 1 : i + 1 + count]
                i += 1 + count
                content = "\n".join(body) + "\n"
                if body and body[-1].endswith("EOF"):
                    content = "\n".join([*body[:-1], body[-1][: -len("EOF")]])
                if path.startswith(strip_prefix):
                    path = path[len(strip_prefix) :]
                files[path] = content
                continue
        i += 1
    return files


def listing_to_files(text: str, root: str) -> dict[str, str]:
    """A terminal listing of 'path' (or '$ cat path') lines each followed by the file's content,
    as {path relative to root: content}."""
    files: dict[str, str] = {}
    current: str | None = None
    for line in text.splitlines():
        m = re.match(r"^(?:\$ cat )?(" + re.escape(root) + r"\S+)$", line.strip())
        if m is not None:
            current = m.group(1)[len(root) :]
            files[current] = ""
        elif current is not None and not line.startswith("#"):
            files[current] += line + "\n"
    return files


OURS = Path(__file__).resolve().parent.parent / "tests" / "checker" / "fixtures"


def ours(name: str) -> str:
    """One of our own fixtures (tests/checker/fixtures, written in the real formats where the corpus
    has no sample), without its leading '#' lines that say so."""
    lines = (OURS / name).read_text(encoding="utf-8").splitlines(keepends=True)
    while lines and lines[0].startswith("#"):
        lines.pop(0)
    return "".join(lines)


# -- snapshots built from them -------------------------------------------------------------------

REFERENCE = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
BOOT_ID = "6c1a4a9e-1f0b-4d43-9a52-0c1f3f1e2d3a"
BTIME = 1_700_000_000
EDAC_ROOT = "/sys/devices/system/edac/mc/"
RAS_DB = "/var/lib/rasdaemon/ras-mc_event.db"

# rasdaemon's tables as ras-record.c creates them (the data note in the samples' MANIFEST.md).
RAS_SCHEMA = """
CREATE TABLE IF NOT EXISTS mc_event (id INTEGER PRIMARY KEY, timestamp TEXT, err_count INTEGER, err_type TEXT,
  err_msg TEXT, label TEXT, mc INTEGER, top_layer INTEGER, middle_layer INTEGER, lower_layer INTEGER,
  address INTEGER, grain INTEGER, syndrome INTEGER, driver_detail TEXT);
CREATE TABLE IF NOT EXISTS aer_event (id INTEGER PRIMARY KEY, timestamp TEXT, dev_name TEXT, err_type TEXT,
  err_msg TEXT);
CREATE TABLE IF NOT EXISTS mce_record (id INTEGER PRIMARY KEY, timestamp TEXT, mcgcap INTEGER, mcgstatus INTEGER,
  status INTEGER, addr INTEGER, misc INTEGER, ip INTEGER, tsc INTEGER, walltime INTEGER, ppin INTEGER, cpu INTEGER,
  cpuid INTEGER, apicid INTEGER, socketid INTEGER, cs INTEGER, bank INTEGER, cpuvendor INTEGER, microcode INTEGER,
  bank_name TEXT, error_msg TEXT, mcgstatus_msg TEXT, mcistatus_msg TEXT, mcastatus_msg TEXT, user_action TEXT,
  mc_location TEXT);
CREATE TABLE IF NOT EXISTS memory_failure_event (id INTEGER PRIMARY KEY, timestamp TEXT, pfn TEXT, page_type TEXT,
  action_result TEXT);
"""


def signed64(value: int) -> int:
    """How rasdaemon's sqlite3_bind_int64 stores an unsigned 64-bit register."""
    return value - (1 << 64) if value >= 1 << 63 else value


class SnapshotBuilder:
    def __init__(self, directory: Path, hostname: str = "snap-host") -> None:
        self.directory = directory
        self.commands: list[dict[str, object]] = []
        self._outputs = 0
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "meta.json").write_text(
            json.dumps({"format_version": 1, "hostname": hostname, "captured_at": REFERENCE.isoformat()})
        )
        self._save()

    def path(self, path: str) -> Path:
        return self.directory / "root" / path.lstrip("/")

    def file(self, path: str, text: str) -> SnapshotBuilder:
        target = self.path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        return self

    def files(self, under: str, files: dict[str, str]) -> SnapshotBuilder:
        for relative, text in files.items():
            self.file(f"{under.rstrip('/')}/{relative}", text)
        return self

    def directory_only(self, path: str) -> SnapshotBuilder:
        self.path(path).mkdir(parents=True, exist_ok=True)
        return self

    def command(self, argv: list[str], stdout: str, rc: int = 0, **extra: object) -> SnapshotBuilder:
        entry: dict[str, object] = {"argv": argv, "rc": rc, **extra}
        if stdout:
            self._outputs += 1
            name = f"commands/{self._outputs:03d}.out"
            (self.directory / "commands").mkdir(exist_ok=True)
            (self.directory / name).write_text(stdout)
            entry["stdout"] = name
        self.commands = [c for c in self.commands if c["argv"] != argv] + [entry]
        self._save()
        return self

    def _save(self) -> None:
        (self.directory / "commands.json").write_text(json.dumps(self.commands, indent=1))

    def boot(self, boot_id: str = BOOT_ID, btime: int = BTIME) -> SnapshotBuilder:
        self.file("/proc/sys/kernel/random/boot_id", boot_id + "\n")
        return self.file("/proc/stat", f"cpu  1 2 3 4\nbtime {btime}\nprocesses 10\n")

    def kmsg(self, records: str) -> SnapshotBuilder:
        return self.file("/dev/kmsg", records)

    def rasdaemon(self) -> sqlite3.Connection:
        """An empty rasdaemon database in the snapshot; the caller inserts rows and closes it."""
        target = self.path(RAS_DB)
        target.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(target)
        conn.executescript(RAS_SCHEMA)
        return conn

    def host(self) -> SnapshotHost:
        return SnapshotHost(self.directory)

    def cycle(self, state: CollectorState | None = None, **options: object) -> Report:
        return run_cycle(self.host(), hostname="snap-host", state=state, **options)  # type: ignore[arg-type]


def kmsg_records(text: str, *, first_seq: int = 0, prio: int = 6) -> str:
    """A kernel-log sample as /dev/kmsg returns it ('prio,seq,usec,flags;message' a line), keeping
    the gaps between lines (printk time, or wall-clock time when the sample has only that)."""
    records = []
    usec = 1_000_000
    base: dt.datetime | None = None
    kernel_lines = [line for line in parse_log_lines(text, reference=REFERENCE).value if line.tag in (None, "kernel")]
    for n, line in enumerate(kernel_lines):
        if line.monotonic_s is not None:
            usec = max(usec, int(line.monotonic_s * 1_000_000))
        elif line.timestamp is not None:
            base = base or line.timestamp
            usec = max(usec, 1_000_000 + int((line.timestamp - base).total_seconds() * 1_000_000))
        else:
            usec += 1
        records.append(f"{prio},{first_seq + n},{usec},-;{line.message}")
    return "".join(r + "\n" for r in records)


def journal_records(text: str, *, boot_id: str = BOOT_ID, first: int = 1) -> str:
    """A kernel-log sample as `journalctl -k -o json` prints it: one JSON object per line."""
    out = []
    for n, line in enumerate(parse_log_lines(text, reference=REFERENCE).value, first):
        if line.tag not in (None, "kernel"):
            continue
        realtime = int((line.timestamp or REFERENCE).timestamp() * 1_000_000)
        entry = {
            "__CURSOR": f"s=0f1e;i={n:x};b={boot_id.replace('-', '')};m={n:x};t={realtime:x};x=1",
            "__REALTIME_TIMESTAMP": str(realtime),
            "_BOOT_ID": boot_id.replace("-", ""),
            "_TRANSPORT": "kernel",
            "PRIORITY": "3",
            "SYSLOG_IDENTIFIER": "kernel",
            "MESSAGE": line.message,
        }
        if line.monotonic_s is not None:
            entry["_SOURCE_MONOTONIC_TIMESTAMP"] = str(int(line.monotonic_s * 1_000_000))
        out.append(json.dumps(entry))
    return "".join(o + "\n" for o in out)


def scan_open_json(devices: list[tuple[str, str, str]]) -> str:
    """`smartctl --scan-open -j` for (name, type, protocol) devices, as smartctl 7.x prints it."""
    return json.dumps(
        {
            "json_format_version": [1, 0],
            "smartctl": {"version": [7, 3], "argv": ["smartctl", "--scan-open", "-j"], "exit_status": 0},
            "devices": [
                {"name": name, "info_name": f"{name} [{kind.upper()}]", "type": kind, "protocol": protocol}
                for name, kind, protocol in devices
            ],
        },
        indent=2,
    )


NUMA_CXL = {
    "node0/cpulist": "0-3\n",
    "node0/meminfo": "Node 0 MemTotal:       65536000 kB\nNode 0 MemFree:        1000000 kB\n",
    "node1/cpulist": "\n",
    "node1/meminfo": "Node 1 MemTotal:      131072000 kB\nNode 1 MemFree:       131000000 kB\n",
}


# The three MCE events of rasdaemon/ras-mc-ctl-errors-amd-zen2-umc-dram-ecc-repeated.txt as mce_record rows.
ZEN2_MCE_ROWS = [
    (83, "2026-08-24 03:41:13 +0200", 0x9C2041000000011B, 0xD01A001401000000, 0x6A8BA139),
    (84, "2026-08-24 04:40:12 +0200", 0x9C2040000000011B, 0xD01A001601000000, 0x6A8BAF0C),
    (85, "2026-08-24 04:42:44 +0200", 0x9C2040000000011B, 0xD01A001701000000, 0x6A8BAFA4),
]


ZEN2_MCE_ADDR = 0x27AAD20C0


def insert_zen2_mce_records(conn: sqlite3.Connection) -> None:
    conn.executemany(
        "INSERT INTO mce_record (id, timestamp, mcgcap, mcgstatus, status, addr, misc, walltime, cpu, cpuid, bank,"
        " cpuvendor, microcode, bank_name, error_msg, mcgstatus_msg, mcistatus_msg, mcastatus_msg, user_action,"
        " mc_location) VALUES (?, ?, 284, 0, ?, ?, ?, ?, 2, 8851216, 17, 2, 141626420,"
        " 'Unified Memory Controller (bank=17)', 'DRAM ECC error.', '', 'CECC', 'DRAM ECC error.', '',"
        " 'memory_channel=0,csrow=2')",
        [
            (i, ts, signed64(status), ZEN2_MCE_ADDR, signed64(misc), walltime)
            for i, ts, status, misc, walltime in ZEN2_MCE_ROWS
        ],
    )


def rich_snapshot(directory: Path) -> SnapshotBuilder:
    """A host with something in every collector, from the real samples: a DIMM with 4 CEs in
    EDAC, rasdaemon records, an sb_edac CE in the kernel log, correctable-ECC SEL entries, a disk
    with 304 reallocated sectors, rasdaemon's MCE records, an Intel CPU with microcode 0xb4, and
    a process with threads on its isolated cores."""
    b = SnapshotBuilder(directory).boot()
    b.file("/etc/machine-id", "0123456789abcdef0123456789abcdef\n")
    b.files(EDAC_ROOT, listing_to_files(sample("edac-sysfs/i10nm-mc7-dimm0-ce4.txt"), EDAC_ROOT))
    b.file("/sys/module/edac_core/parameters/edac_mc_poll_msec", "1000\n")
    conn = b.rasdaemon()
    conn.executemany(
        "INSERT INTO mc_event (id, timestamp, err_count, err_type, err_msg, label, mc, top_layer, middle_layer,"
        " lower_layer, address, grain, syndrome) VALUES (?, ?, ?, 'Corrected', 'memory read error', ?, 1, 0, 0, 0,"
        " ?, 32, 0)",
        [
            (1, "2022-06-20 10:00:00 +0200", 5000, "CPU_SrcID#1_Ha#0_Chan#0_DIMM#0", 0xEE30A0000),
            (2, "2022-06-21 10:00:00 +0200", 500, "CPU_SrcID#1_Ha#0_Chan#0_DIMM#0", 0xEE30A0040),
            (3, "2022-06-22 10:00:00 +0200", 39, "CPU_SrcID#1_Ha#0_Chan#0_DIMM#0", 0xEE30A0080),
        ],
    )
    insert_zen2_mce_records(conn)
    conn.commit()
    conn.close()
    b.kmsg(kmsg_records(sample("kernel-log/dmesg-T-sb-edac-sandybridge-ce-read.log"), first_seq=100))
    b.command(["ipmitool", "sel", "info"], sample("ipmi-sel/ipmitool-sel-info-545-entries.txt"))
    b.command(
        ["ipmitool", "sel", "elist"],
        sample("ipmi-sel/ipmitool-sel-list-correctable-ecc-cpu0-dimm8-chassis-intrusion.txt"),
    )
    b.command(["ipmitool", "sdr", "elist"], sample("ipmi-sdr/ipmitool-sdr-list-intel-s2600-healthy.txt"))
    b.command(["ipmitool", "mc", "info"], sample("ipmi-mc/ipmitool-mc-info-intel-bmc-fw-1.17.txt"))
    b.command(
        ["smartctl", "--scan-open", "-j"], scan_open_json([("/dev/sda", "sat", "ATA"), ("/dev/nvme0", "nvme", "NVMe")])
    )
    b.command(
        ["smartctl", "-a", "-j", "-d", "sat", "/dev/sda"],
        sample("smartctl-json/sata-hdd-seagate-st3500418as-304-reallocated.json"),
        rc=0,
    )
    b.command(
        ["smartctl", "-a", "-j", "-d", "nvme", "/dev/nvme0"],
        sample("smartctl-json/nvme-samsung970evo-media-errors.json"),
    )
    b.file("/proc/cpuinfo", sample("cpuinfo/intel-i7-8650u-8thread-microcode-0xb4.txt"))
    b.file("/proc/sys/kernel/osrelease", "5.15.0-91-generic\n")
    b.file("/proc/cmdline", "BOOT_IMAGE=/vmlinuz root=/dev/sda1 isolcpus=managed_irq,domain,2-3 nohz_full=2-3\n")
    dmidecode = sample("dmi/dmidecode-full-supermicro-ami-3.0b.txt")
    b.command(["dmidecode", "-t", "memory"], dmidecode)
    b.command(["dmidecode", "-t", "bios", "-t", "system"], dmidecode)
    b.file("/sys/class/net/eth0/device/uevent", "DRIVER=e1000e\nPCI_SLOT_NAME=0000:00:1f.6\n")
    b.directory_only("/sys/class/net/lo")
    b.command(["ethtool", "-i", "eth0"], sample("firmware/ethtool-i-eth0-e1000e.txt"))
    b.file("/sys/class/nvme/nvme0/firmware_rev", "2B2QEXE7\n")
    b.file("/proc/interrupts", sample("proc-interrupts/laptop-i7-4cpu-ir-ioapic-mcp2400.txt"))
    b.files(
        "/proc/irq", {"0/smp_affinity_list": "0-3\n", "8/smp_affinity_list": "0-1\n", "16/smp_affinity_list": "2\n"}
    )
    b.files("/sys/devices/system/node", NUMA_CXL)
    b.file("/sys/kernel/mm/numa/demotion_enabled", "false\n")
    b.file("/proc/sys/kernel/numa_balancing", "1\n")
    b.files("/sys/kernel/mm/mempolicy/weighted_interleave", {"node0": "1\n", "node1": "1\n"})
    # Processes on the isolated cores 2-3 (our /proc fixture; the corpus has no /proc/PID trees).
    workload = listing_to_files(ours("proc-isolated-workload.txt"), "/")
    b.files("/", {path: text for path, text in workload.items() if path != "proc/cmdline"})
    # The cputime watch judges the same processes against the uptime: a day up, 4 CPUs; nothing to flag.
    b.file("/proc/uptime", "86400.00 170000.00\n")
    b.file("/sys/devices/system/cpu/possible", "0-3\n")
    # MemTotal, cpu/present and /sys/block for the capacity collector (our fixture): a disk, an NVMe drive, a loop
    # device and a device-mapper volume.
    b.files("/", read_ttar(ours("sysfs-capacity.ttar")))
    # MSR_SMI_COUNT, machinecheck0, HEST and GHES sources (our sysfs fixture): one package of 4 CPUs online.
    from bench.smi_samples import install_smi_tree  # here: that module builds on this one

    install_smi_tree(b, online="0-3")
    # The stall probe's windows, where `fleetfix check` looks with no state directory (our fixture).
    b.file("/var/lib/fleetfix-agent/stalls.jsonl", ours("stall-probe-windows.jsonl"))
    # The filesystems and time_sync collectors: our texts in the real formats (tests/checker/test_os_state.py).
    b.file("/proc/self/mountinfo", "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw,errors=remount-ro\n")
    b.file("/sys/dev/block/8:1/uevent", "MAJOR=8\nMINOR=1\nDEVNAME=sda1\nDEVTYPE=partition\n")
    b.command(
        ["chronyc", "-c", "-n", "tracking"],
        "A9FEA97B,169.254.169.123,4,1764220680.1,-0.000012,0.000003,0.000021,-12.345,-0.001,0.012,0.0005,0.0002,"
        "64.4,Normal\n",
    )
    # The pcie collector: the corpus's real sysfs PCIe extract (two root ports, an NVMe and an HBA).
    b.files("/sys/devices", read_ttar(sample("pcie/sysfs-pci-current-max-link-speed-width-aer-counters-extract.ttar"),
                                      "fixtures/sys/devices/"))  # fmt: skip
    # The gpu collector: an NVIDIA 3D controller on the bus and nvidia-smi's answer, the corpus's A10G (v11).
    b.file("/sys/bus/pci/devices/0000:00:1e.0/vendor", "0x10de\n")
    b.file("/sys/bus/pci/devices/0000:00:1e.0/class", "0x030200\n")
    b.command(["nvidia-smi", "-q", "-x"], sample("gpu/nvidia-smi-q-x-a10g-remapped-rows-histogram-v11.xml"))
    # The thermal_throttle collector: cpu0's counters from the corpus's real terminal session (`cat` of each file).
    session = sample("kernel-log/dmesg-xeon-power-limit-notification-and-thermal-throttle-sysfs.txt")
    for m in re.finditer(r"^# cat (\S+/thermal_throttle/\S+)\n(\d+)$", session, flags=re.M):
        b.file(m.group(1), m.group(2) + "\n")
    # The cxl collector: a CXL memory expander and rasdaemon's cxl_* tables (our fixture: no real sample is public).
    b.file("/sys/bus/cxl/devices/mem0/serial", "0x5a17c0de\n")
    b.file("/sys/bus/cxl/devices/mem0/firmware_version", "FW 2.1.4\n")
    with sqlite3.connect(b.path(RAS_DB)) as conn:
        conn.executescript(ours("cxl/rasdaemon-cxl-schema.sql"))
    conn.close()
    return b


def ttar_files(name: str, prefix: str) -> dict[str, str]:
    return read_ttar(sample(name), prefix)
