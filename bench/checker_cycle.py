"""Figures of the host side, each beside this machine's own ceiling measured in the same run.

1. One full check cycle over a rich snapshot built from the real samples (no tool runs: the
   snapshot answers every command), CPU and wall time; ceiling: just reading the snapshot's files.
2. The resident memory of a real `fleetfix-agent run` process on Redis (redis://127.0.0.1:6379/14 by
   default), configured as in production (the action public key, a host token), after its first
   report, again after it verified one action envelope (meant for another host: refused), and again
   after it ran one of its own (a dry run of set_interleave_weights: nothing on the host changes);
   ceiling: a bare Celery worker on the same broker (started as `celery worker` does, and as the
   agent does, without Celery's command line); floor: a bare Python interpreter, and one that
   imported Celery.
3. Kernel-log classification throughput over a 100,000-line log (CPU time, best of five); ceilings: a
   bare `if "EDAC" in line` loop over the same lines, and one `re` scan of the needles over the same text
   (issue 17: classification at least 0.5x that scan).
4. The smi and error_reporting collectors' CPU time per cycle on the rich snapshot (one MSR pread per
   package, a dozen sysfs files); ceiling: the same preads and file reads done bare.
5. The gpu collector's CPU time on an 8-GPU host (sysfs vendor look and the nvidia-smi XML parse).
6. The network collector's CPU time on a four-port host (sysfs counters, `ethtool -S` and lldpctl parsed).
7. The pcie collector's CPU time on a host of PCIe functions (the sysfs walk, then the steady cycle).
8. The capacity collector's CPU time on a 24-disk, 64-CPU storage host (sysfs and /proc reads, cpuinfo parsed).

Usage: FLEETFIX_TEST_SAMPLES=../shared/fixtures .venv/bin/python bench/checker_cycle.py [--redis URL]
       [--part cycle|memory|classify|smi|gpu|network|pcie|capacity ...] (default: all eight)
It prints figures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import re
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("FLEETFIX_TEST_SAMPLES", str(REPO.parent / "shared" / "fixtures"))

from bench.samples import rich_snapshot, sample, sample_names  # noqa: E402
from checker.collectors.base import SnapshotHost  # noqa: E402
from checker.collectors.context import CollectorState  # noqa: E402
from checker.cycle import run_cycle  # noqa: E402
from checker.parsers.kernel_events import NEEDLES, parse_kernel_log  # noqa: E402

LINES = 100_000


def median_ms(values: list[float]) -> float:
    return statistics.median(values) * 1000


def timed_cycles(host: SnapshotHost, runs: int, state: CollectorState | None) -> tuple[list[float], list[float]]:
    cpu, wall = [], []
    for _ in range(runs):
        c, w = time.process_time(), time.perf_counter()
        run_cycle(host, hostname="bench", state=state or CollectorState(), memo_s=3600 if state else 0)
        cpu.append(time.process_time() - c)
        wall.append(time.perf_counter() - w)
    return cpu, wall


def bench_cycle(work: Path, runs: int) -> None:
    snap = rich_snapshot(work / "rich")
    host = SnapshotHost(snap.directory)
    for _ in range(3):  # warm: imports, regex compilation, pydantic schemas
        report = run_cycle(host, hostname="bench", state=CollectorState())
    cpu, wall = timed_cycles(host, runs, None)
    agent_state = CollectorState()  # the agent's: cursors move and inventory answers are reused
    run_cycle(host, hostname="bench", state=agent_state, memo_s=3600)
    agent_state.commit()
    steady_cpu, steady_wall = timed_cycles(host, runs, agent_state)
    files = [p for p in snap.directory.rglob("*") if p.is_file()]
    read_cpu = []
    for _ in range(runs):
        c = time.process_time()
        for path in files:
            with open(path, "rb") as handle:
                handle.read()
        read_cpu.append(time.process_time() - c)
    statuses = {run.status.value for run in report.collectors.values()}
    size = len(report.model_dump_json())
    ceiling = statistics.median(read_cpu)
    print(f"check cycle over the rich snapshot ({len(report.collectors)} collectors, all {'/'.join(statuses)}):")
    print(f"  full cycle (nothing known yet)   cpu {median_ms(cpu):6.2f} ms  wall {median_ms(wall):6.2f} ms"
          f"  (median of {runs}; target <= 15 ms cpu)")  # fmt: skip
    print(
        f"  agent steady state (cursors)     cpu {median_ms(steady_cpu):6.2f} ms  wall {median_ms(steady_wall):6.2f} ms"
    )
    full_x, steady_x = statistics.median(cpu) / ceiling, statistics.median(steady_cpu) / ceiling
    print(
        f"  ceiling: reading the snapshot's {len(files)} files once: {ceiling * 1000:.2f} ms cpu"
        f" (full cycle = {full_x:.0f}x, steady = {steady_x:.0f}x)"
    )
    for name, run in report.collectors.items():
        print(f"    {name:<13} {run.duration_ms:6.2f} ms")
    print(f"  report: {size} bytes of JSON")


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


def idle_rss(code: str) -> int:
    proc = subprocess.Popen([sys.executable, "-c", f"{code}; import time; print('ready', flush=True); time.sleep(60)"],
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert proc.stdout is not None
        proc.stdout.readline()
        return rss_kb(proc.pid)
    finally:
        proc.terminate()
        proc.wait(10)


def wait_for_log(log_path: Path, proc: subprocess.Popen[bytes], text: str, timeout: float = 60) -> None:
    """Until `text` (a regular expression) is in the process's output, and a second more."""
    deadline = time.monotonic() + timeout
    while not re.search(text, log_path.read_text(errors="replace")):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"no {text!r} from {proc.args!r}:\n{log_path.read_text(errors='replace')[-2000:]}")
        time.sleep(0.2)
    time.sleep(1.0)  # let it settle


@contextlib.contextmanager
def started(log_path: Path, argv: list[str], env: dict[str, str], ready: str) -> Iterator[subprocess.Popen[bytes]]:
    """A process, once `ready` is in its output; stopped (by its own pid) on exit."""
    with log_path.open("w") as log:
        proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for_log(log_path, proc, ready)
        yield proc
    finally:
        proc.terminate()
        proc.wait(20)


def worker_rss(log_path: Path, argv: list[str], env: dict[str, str], ready: str) -> int:
    with started(log_path, argv, env, ready) as proc:
        return rss_kb(proc.pid)


BARE_WORKER = (
    "import sys; from celery import Celery; app = Celery('bare', broker=sys.argv[1]); "
    "app.worker_main(['worker', '-Q', 'bench-bare', '-n', 'bare@bench', '-P', 'solo', '--without-gossip', "
    "'--without-mingle', '-l', 'INFO'])"
)
BARE_WORKER_NO_CLI = (
    "import sys; from celery import Celery; app = Celery('bare', broker=sys.argv[1]); "
    "app.Worker(hostname='bare@bench', queues=['bench-bare'], pool='solo', without_gossip=True, "
    "without_mingle=True, loglevel=20).start()"
)


def send_envelope(
    redis_url: str, private_key: Path, hostname: str, *, meant_for: str, action: str, params: dict[str, object]
) -> uuid.UUID:
    """A signed dry-run envelope on `hostname`'s queue: one `meant_for` another host is verified, then
    refused (wrong_host); one meant for it runs, changing nothing (dry run)."""
    from core.queue import create_celery, host_signature
    from cyborg.envelope import Envelope, load_signer

    now = dt.datetime.now(dt.UTC)
    envelope = Envelope(
        id=uuid.uuid4(), hostname=meant_for, remediation_id=1, step=0, attempt=1, action=action,
        params=params, timeout_s=60, dry_run=True, issued_at=now, expires_at=now + dt.timedelta(minutes=5),
    )  # fmt: skip
    app = create_celery(redis_url, name="bench-sender", make_current=False)
    message = load_signer(private_key).sign(envelope).model_dump()
    host_signature(app, hostname, "cyborg.run_action", args=[message]).apply_async()
    return envelope.id


def bench_agent_rss(work: Path, redis_url: str) -> None:
    import redis

    from core.queue import INGEST_STREAM, REMEDIATE_QUEUE
    from cyborg.envelope import generate_keypair

    generate_keypair(work / "action.pem", work / "action.pub")
    (work / "agent.token").write_text(f"ff_host_{secrets.token_hex(16)}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETFIX_") or k == "FLEETFIX_TEST_SAMPLES"}
    env.update(
        FLEETFIX_BROKER_URL=redis_url,
        FLEETFIX_REPORT_INTERVAL_S="3600",
        FLEETFIX_AGENT_ACTION_PUBLIC_KEY=str(work / "action.pub"),
        FLEETFIX_AGENT_TOKEN_FILE=str(work / "agent.token"),
    )
    argv = [sys.executable, "-m", "checker.agent", "run", "--hostname", "bench-agent"]  # `fleetfix-agent run`
    argv += ["--state-dir", str(work / "state")]
    log_path = work / "agent.log"
    key = work / "action.pem"
    try:
        with started(log_path, argv, env, "checker.report.sent") as proc:
            agent = rss_kb(proc.pid)
            send_envelope(redis_url, key, "bench-agent", meant_for="another-host", action="clear_sel", params={})
            wait_for_log(log_path, proc, "cyborg.envelope.refused")
            after_envelope = rss_kb(proc.pid)
            weights = {"weights": {"0": 5}}  # node 0's interleave weight; written by no dry run
            ran = send_envelope(
                redis_url, key, "bench-agent", meant_for="bench-agent", action="set_interleave_weights", params=weights
            )
            # Its outcome here (a kernel before 6.9 fails its precondition) does not matter: the whole path ran.
            wait_for_log(log_path, proc, rf"cyborg\.action\.(?!started)\w+ .*envelope={ran}")
            after_action = rss_kb(proc.pid)
    finally:
        # What it sent (its report, the refusal, the dry run's start and result) has no consumer here.
        redis.Redis.from_url(redis_url).delete(INGEST_STREAM, "ingest", REMEDIATE_QUEUE)
    bare_worker = worker_rss(work / "bare.log", [sys.executable, "-c", BARE_WORKER, redis_url], env, "ready.")
    bare_no_cli = worker_rss(work / "bare2.log", [sys.executable, "-c", BARE_WORKER_NO_CLI, redis_url], env, "ready.")
    bare = idle_rss("pass")
    celery = idle_rss("import celery, kombu, redis, pydantic")
    outcome = re.search(rf"cyborg\.action\.(?!started)(\w+) .*envelope={ran}", log_path.read_text(errors="replace"))
    print(f"agent resident memory (`fleetfix-agent run` on {redis_url}, action key and host token set):")
    print(f"  (the dry run {outcome.group(1) if outcome else '?'} here)")
    for label, value in (
        ("fleetfix-agent, after its first report", agent),
        ("fleetfix-agent, after verifying one action envelope", after_envelope),
        ("fleetfix-agent, after running one of its own (dry run)", after_action),
    ):
        print(f"  {label:<64} {value / 1024:6.1f} MiB  ({value / bare_worker:.2f}x the ceiling, "
              f"{value / bare_no_cli:.2f}x the worker without its CLI)")  # fmt: skip
    for label, value in (
        ("ceiling: a bare Celery worker, solo pool, no tasks, same broker", bare_worker),
        ("the same bare worker started without Celery's command line", bare_no_cli),
        ("python that imported celery, kombu, redis, pydantic", celery),
        ("bare python interpreter", bare),
    ):
        print(f"  {label:<64} {value / 1024:6.1f} MiB")


def sample_bodies() -> list[str]:
    """The messages of every kernel-log sample, without their timestamp or syslog prefix."""
    source = [line for name in sample_names("kernel-log") for line in sample(name).splitlines() if line.strip()]
    return [re.sub(r"^(\[[^\]]*\]|\S+ +\d+ [\d:]+ \S+ kernel:|[\d\-T:.+]+ \S+ kernel:)\s*", "", s) for s in source]


def noise_bodies() -> list[str]:
    """Ordinary kernel lines: this machine's own /dev/kmsg (boot, devices, network), read now."""
    from checker.collectors.base import LiveHost
    from checker.parsers.kernel_log import parse_kmsg

    host = LiveHost()
    try:
        text = host.read_kmsg() or ""
    finally:
        host.close()
    return [line.message for line in parse_kmsg(text).value if line.message.strip()]


def dmesg_text(bodies: list[str]) -> str:
    return "".join(f"[{n / 1000:12.6f}] {bodies[n % len(bodies)]}\n" for n in range(LINES))


def classify_rate(name: str, text: str) -> None:
    """The best of five runs of each, in CPU time: other work on a shared machine moves the wall clock of
    one more than another's, and the ratios with it."""
    lines = text.splitlines()
    runs, loop, scan = [], [], []
    for _ in range(5):
        t = time.process_time()
        state = parse_kernel_log(text, "dmesg").value
        runs.append(time.process_time() - t)
        t = time.process_time()
        hits = 0
        for line in lines:
            if "EDAC" in line:
                hits += 1
        loop.append(time.process_time() - t)
        t = time.process_time()
        found = len(NEEDLES.findall(text))  # the bare scan: every rule's needle in one alternation, as before
        scan.append(time.process_time() - t)
    best = min(runs)
    print(f"  {name}: {len(state.events) + state.truncated:,} events in {state.lines_read:,} lines")
    print(f"    classify (parse + classify)        {LINES / best:12,.0f} lines/s")
    print(f"    ceiling: bare 'EDAC' in line loop  {LINES / min(loop):12,.0f} lines/s  (classify = "
          f"{min(loop) / best:.3f}x; {hits:,} hits)")  # fmt: skip
    print(f"    ceiling: one re scan of the needles {LINES / min(scan):11,.0f} lines/s  (classify = "
          f"{min(scan) / best:.3f}x; {found:,} matches)")  # fmt: skip


def bench_classification() -> None:
    hardware = sample_bodies()
    noise = noise_bodies() or ["usb 1-1: new high-speed USB device number 2 using xhci_hcd"]
    mixed = [hardware[n // 100 % len(hardware)] if n % 100 == 0 else noise[n % len(noise)] for n in range(LINES)]
    print(f"kernel-log classification throughput, {LINES:,} dmesg lines:")
    classify_rate(f"1% sample lines in this machine's own {len(noise)} kmsg lines", dmesg_text(mixed))
    classify_rate("only the kernel-log samples' lines, cycled (a host in an error storm)", dmesg_text(hardware))


def bench_smi(work: Path, runs: int) -> None:
    from checker.collectors import error_reporting, smi
    from checker.collectors.context import Context
    from checker.schemas import Observations

    snap = rich_snapshot(work / "smi")
    host = SnapshotHost(snap.directory)
    collectors = {"smi": smi.collect, "error_reporting": error_reporting.collect}
    cpu = []
    for _ in range(runs + 3):
        c = time.process_time()
        observations = Observations()
        for collect in collectors.values():
            collect(Context(host, observations, CollectorState(), 15.0))
        cpu.append(time.process_time() - c)
    cpu = cpu[3:]
    assert observations.smi is not None
    assert observations.error_reporting is not None
    system = snap.directory / "root" / "sys" / "devices" / "system"
    files = [p for d in ("cpu", "machinecheck") for p in (system / d).rglob("*") if p.is_file()]
    msrs = sorted((snap.directory / "root" / "dev" / "cpu").rglob("msr"))
    bare = []
    for _ in range(runs):
        c = time.process_time()
        for path in msrs[: len(observations.smi.packages)]:
            fd = os.open(path, os.O_RDONLY)
            os.pread(fd, 8, 0x34)
            os.close(fd)
        for path in files:
            with open(path, "rb") as handle:
                handle.read()
        bare.append(time.process_time() - c)
    print(f"smi + error_reporting collectors over the rich snapshot ({len(observations.smi.packages)} package(s)):")
    print(f"  per cycle  cpu {median_ms(cpu):6.3f} ms  (median of {runs})")
    print(f"  ceiling: {len(observations.smi.packages)} bare pread(s), {len(files)} cpu/machinecheck file reads: "
          f"{median_ms(bare):6.3f} ms cpu")  # fmt: skip


def bench_gpu(work: Path, runs: int) -> None:
    """The gpu collector on an 8-GPU host (the simulated A100 class's `nvidia-smi -q -x`, as the tool prints
    it): the sysfs look for NVIDIA devices and the XML parse. nvidia-smi's own run is not in it (the
    snapshot answers for it): on a real host it is one process spawn and the driver's query, measured
    there with `time nvidia-smi -q -x`."""
    from bench.samples import SnapshotBuilder
    from checker.collectors import gpu
    from checker.collectors.context import Context
    from checker.schemas import Observations
    from checker.sim.gpu import nvidia_smi_xml
    from checker.sim.standalone import standalone_host

    snap = SnapshotBuilder(work / "gpu")
    for spec in standalone_host("bench-gpu", hardware_class="gpu-a100-8x").hardware.gpus:
        bdf = spec.bdf.lower()[-12:]
        snap.file(f"/sys/bus/pci/devices/{bdf}/vendor", "0x10de\n")
        snap.file(f"/sys/bus/pci/devices/{bdf}/class", "0x030200\n")
    for n in range(24):  # the rest of a GPU server's PCI functions: bridges, NICs, NVMe
        snap.file(f"/sys/bus/pci/devices/0000:{n + 0x10:02x}:00.0/vendor", "0x8086\n")
    snap.command(gpu.NVIDIA_SMI, nvidia_smi_xml(standalone_host("bench-gpu", hardware_class="gpu-a100-8x")))
    host = SnapshotHost(snap.directory)
    cpu = []
    for _ in range(runs + 3):
        c = time.process_time()
        observations = Observations()
        gpu.collect(Context(host, observations, CollectorState(), 25.0))
        cpu.append(time.process_time() - c)
    assert observations.gpu is not None
    print(f"gpu collector, 8 GPUs, 32 PCI functions (nvidia-smi answered by the snapshot): "
          f"cpu {median_ms(cpu[3:]):6.3f} ms  (median of {runs})")  # fmt: skip


def bench_network(work: Path, runs: int) -> None:
    """The network collector on a host with four physical ports (two two-port mlx5 NICs, our sysfs fixture's
    layout) and lo, a bond and docker0: its sysfs reads, the `ethtool -S` parse of mlx5's counters and the
    lldpctl JSON. The tools' own runs are not in it (the snapshot answers for them): on a real host each is
    a process spawn, `ethtool -S` one per port per cycle and `lldpctl` once per inventory refresh."""
    from bench.samples import OURS, SnapshotBuilder, listing_to_files, ours
    from checker.collectors import network
    from checker.collectors.context import Context
    from checker.schemas import Observations

    listing = ours("network/sysfs-net-mlx5-two-ports.txt")
    second = listing.replace("ens1f0np0", "ens2f0np0").replace("ens1f1np1", "ens2f1np1").replace("3b:00", "5e:00")
    snap = SnapshotBuilder(work / "network")
    for text in (listing, second):
        snap.files("/sys/class/net/", listing_to_files(text, "/sys/class/net/"))
    stats = ours("network/ethtool-S-mlx5-connectx6dx.txt")
    for port in ("ens1f0np0", "ens1f1np1", "ens2f0np0", "ens2f1np1"):
        snap.command(network.ethtool_stats_argv(port), stats)
    snap.command(network.LLDPCTL, (OURS / "network" / "lldpctl-json-two-ports.json").read_text(encoding="utf-8"))
    host = SnapshotHost(snap.directory)
    cpu = []
    for _ in range(runs + 3):
        c = time.process_time()
        observations = Observations()
        network.collect(Context(host, observations, CollectorState(), 15.0))
        cpu.append(time.process_time() - c)
    assert observations.network is not None
    assert len(observations.network.ports) == 4
    files = [p for p in (snap.directory / "root" / "sys" / "class" / "net").rglob("*") if p.is_file()]
    bare = []
    for _ in range(runs):
        c = time.process_time()
        for path in files:
            with open(path, "rb") as handle:
                handle.read()
        bare.append(time.process_time() - c)
    print(f"network collector, 4 physical ports + 3 virtual (ethtool -S and lldpctl answered by the snapshot): "
          f"cpu {median_ms(cpu[3:]):6.3f} ms  (median of {runs})")  # fmt: skip
    print(f"  ceiling: {len(files)} bare sysfs file reads: {median_ms(bare):6.3f} ms cpu")


def bench_pcie(work: Path, runs: int) -> None:
    """The pcie collector on the simulated 8-GPU class's PCIe tree (NIC, NVMe, a switch port per GPU) with 40
    more healthy functions below their root ports (64 in all), each function's files as the kernel writes
    them: the walk, uevent, the four link files and the three aer_dev_* counters of each. Most of the cost
    is opening files; the ceiling line is those reads alone."""
    from bench.samples import SnapshotBuilder
    from checker.collectors import pcie
    from checker.collectors.context import Context
    from checker.schemas import Observations
    from checker.sim.pcie import Function, sysfs_files, topology
    from checker.sim.standalone import standalone_host

    functions = topology(standalone_host("bench-pcie", hardware_class="gpu-a100-8x"))
    for n in range(20):  # more root ports, each with a healthy x4 device
        port = f"0000:{0xC0 + n:02x}:00.0"
        functions.append(Function(port, None, "060400", "8086", "347a", "pcieport", 16.0, 16))
        functions.append(Function(f"0000:{0xC0 + n:02x}:01.0", port, "010802", "144d", "a80a", "nvme", 16.0, 4))
    paths: dict[str, str] = {}
    snap = SnapshotBuilder(work / "pcie")
    for function in functions:
        above = paths.get(function.parent) if function.parent else f"/sys/devices/pci{function.bdf[:7]}"
        paths[function.bdf] = f"{above}/{function.bdf}"
        speed, width = function.speed, min(function.width, 16)
        snap.files(paths[function.bdf], sysfs_files(function, speed, width, 0))
    host = SnapshotHost(snap.directory)
    walks, steady = [], []
    agent = CollectorState()  # an agent's: the walk and the static files are kept between its cycles
    for _ in range(runs + 3):
        c = time.process_time()
        observations = Observations()
        pcie.collect(Context(host, observations, CollectorState(), 15.0))
        walks.append(time.process_time() - c)
        c = time.process_time()
        pcie.collect(Context(host, Observations(), agent, 15.0))
        steady.append(time.process_time() - c)
    assert observations.pcie is not None
    assert observations.pcie.functions == len(functions)
    files = [p for p in (snap.directory / "root" / "sys" / "devices").rglob("*") if p.is_file()]
    bare = []
    for _ in range(runs):
        c = time.process_time()
        for path in files:
            with open(path, "rb") as handle:
                handle.read()
        bare.append(time.process_time() - c)
    print(f"pcie collector, {len(functions)} PCIe functions (8 GPUs, NIC, NVMe): walk (first cycle, every "
          f"{pcie.REWALK_S:.0f} s) cpu {median_ms(walks[3:]):6.3f} ms, steady cycle cpu "
          f"{median_ms(steady[3:]):6.3f} ms  (median of {runs})")  # fmt: skip
    print(f"  ceiling: {len(files)} bare sysfs file reads: {median_ms(bare):6.3f} ms cpu")


def bench_capacity(work: Path, runs: int) -> None:
    """The capacity collector on a storage host: 24 whole disks, a loop and a dm device, 4 physical NICs and 3
    virtual interfaces, 64 CPUs in /proc/cpuinfo (our fixture's files, repeated). The ceiling line is the same
    file reads done bare."""
    from bench.samples import SnapshotBuilder, ours, read_ttar, sample
    from checker.collectors import capacity
    from checker.collectors.context import Context
    from checker.schemas import Observations

    snap = SnapshotBuilder(work / "capacity")
    base = read_ttar(ours("sysfs-capacity.ttar"))
    snap.files("/", {k: v for k, v in base.items() if not k.startswith("sys/block/")})
    sda = {k.removeprefix("sys/block/sda/"): v for k, v in base.items() if k.startswith("sys/block/sda/")}
    for n in range(24):
        snap.files(f"/sys/block/sd{chr(97 + n)}/", {k: v.replace("4a21", f"{n:04x}") for k, v in sda.items()})
    snap.files("/", {k: v for k, v in base.items() if k.startswith(("sys/block/loop0/", "sys/block/dm-0/"))})
    for n in range(4):
        snap.file(f"/sys/class/net/ens{n}/device/uevent", "DRIVER=mlx5_core\n")
    for name in ("lo", "bond0", "docker0"):
        snap.file(f"/sys/class/net/{name}/mtu", "1500\n")
    snap.file("/sys/devices/system/cpu/present", "0-63\n")
    snap.file("/sys/devices/system/cpu/online", "0-63\n")
    cpuinfo = sample("cpuinfo/intel-i7-8650u-8thread-microcode-0xb4.txt").strip() + "\n\n"
    snap.file("/proc/cpuinfo", cpuinfo * 8)
    host = SnapshotHost(snap.directory)
    cpu, steady = [], []
    agent = CollectorState()  # an agent's: the disks' model, serial and size kept between its cycles
    for _ in range(runs + 3):
        c = time.process_time()
        observations = Observations()
        capacity.collect(Context(host, observations, CollectorState(), 15.0))
        cpu.append(time.process_time() - c)
        c = time.process_time()
        capacity.collect(Context(host, Observations(), agent, 15.0))
        agent.commit()
        steady.append(time.process_time() - c)
    assert observations.capacity is not None
    assert len(observations.capacity.disks or []) == 24
    files = [p for p in (snap.directory / "root").rglob("*") if p.is_file()]
    bare = []
    for _ in range(runs):
        c = time.process_time()
        for path in files:
            with open(path, "rb") as handle:
                handle.read()
        bare.append(time.process_time() - c)
    print("capacity collector, 24 disks + 2 virtual block devices, 4 NICs + 3 virtual, 64 CPUs: first cycle "
          f"cpu {median_ms(cpu[3:]):6.3f} ms, steady cycle cpu {median_ms(steady[3:]):6.3f} ms"
          f"  (median of {runs})")  # fmt: skip
    print(f"  ceiling: {len(files)} bare file reads: {median_ms(bare):6.3f} ms cpu")


PARTS = ("cycle", "memory", "classify", "smi", "gpu", "network", "pcie", "capacity")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/14", help="Broker for the agent RSS figure.")
    parser.add_argument("--runs", type=int, default=200, help="Cycles to time.")
    parser.add_argument(
        "--part",
        action="append",
        choices=PARTS,
        help="Only this part (repeatable): the check cycle, the agent's memory, kernel-log classification.",
    )
    args = parser.parse_args()
    parts = args.part or list(PARTS)
    python = (
        os.path.relpath(sys.executable, Path.cwd()) if sys.executable.startswith(str(Path.cwd())) else sys.executable
    )
    print(f"# command: FLEETFIX_TEST_SAMPLES={os.environ['FLEETFIX_TEST_SAMPLES']} {python} "
          f"{' '.join([os.path.relpath(sys.argv[0]), *sys.argv[1:]])}")  # fmt: skip
    load = " ".join(f"{value:.2f}" for value in os.getloadavg())
    print(f"# machine: {os.cpu_count()} cpus, python {sys.version.split()[0]}, {os.uname().release}, load {load}")
    work = Path(tempfile.mkdtemp(prefix="fleetfix-bench-"))
    try:
        if "cycle" in parts:
            bench_cycle(work, args.runs)
        if "memory" in parts:
            bench_agent_rss(work, args.redis)
        if "classify" in parts:
            bench_classification()
        if "smi" in parts:
            bench_smi(work, args.runs)
        if "gpu" in parts:
            bench_gpu(work, args.runs)
        if "network" in parts:
            bench_network(work, args.runs)
        if "pcie" in parts:
            bench_pcie(work, args.runs)
        if "capacity" in parts:
            bench_capacity(work, args.runs)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
