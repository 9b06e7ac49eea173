"""CPU identity from /proc/cpuinfo and the isolated-cpu settings from /proc/cmdline.

cpuinfo is grouped by socket ('physical id', 0 when absent: VMs and old kernels omit it).
Errata are matched on family/model/stepping and microcode, so those are ints here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from checker.parsers.common import Parsed, clip, guarded, int64, parse_cpu_list, problem
from checker.schemas import CpuIdentity

# ARM 'CPU implementer' codes (arch/arm64/include/asm/cputype.h) for a readable vendor.
_ARM_IMPLEMENTERS = {
    0x41: "ARM",
    0x42: "Broadcom",
    0x43: "Cavium",
    0x46: "Fujitsu",
    0x48: "HiSilicon",
    0x4E: "NVIDIA",
    0x50: "APM",
    0x51: "Qualcomm",
    0x61: "Apple",
    0xC0: "Ampere",
}
MAX_SOCKETS = 16


def _number(text: str | None) -> int | None:
    """'0xb4' (hex) or '28' (decimal) -> int; None if neither."""
    if text is None:
        return None
    value = text.strip().split()[0] if text.strip() else ""
    try:
        return int64(int(value, 16) if value.lower().startswith("0x") else int(value))
    except ValueError:
        return None


def _blocks(text: str) -> list[dict[str, str]]:
    """cpuinfo's blank-line separated 'key : value' blocks. Lines without a colon (a wrapped
    flags line in a pasted sample) are ignored; a new 'processor' key also starts a block."""
    blocks: list[dict[str, str]] = []
    current: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if current:
                blocks.append(current)
                current = {}
            continue
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key = " ".join(key.split()).lower()
        if key == "processor" and "processor" in current:
            blocks.append(current)
            current = {}
        current.setdefault(key, value.strip())
    if current:
        blocks.append(current)
    return blocks


@guarded(list)
def parse_cpuinfo(text: str) -> Parsed[list[CpuIdentity]]:
    """/proc/cpuinfo (x86 and arm64) -> one CpuIdentity per socket, in socket order."""
    problems: list[str] = []
    sockets: dict[int, CpuIdentity] = {}
    for block in _blocks(text):
        if "processor" not in block and "vendor_id" not in block and "cpu implementer" not in block:
            continue  # arm64 trailer ('Hardware', 'Serial') or noise
        cpu = _identity(block)
        if cpu is None:
            problems.append(problem("cpuinfo block without vendor, family and model", str(block)))
            continue
        known = sockets.get(cpu.socket)
        if known is None:
            if len(sockets) >= MAX_SOCKETS:
                problems.append(f"more than {MAX_SOCKETS} sockets; socket {cpu.socket} dropped")
                continue
            sockets[cpu.socket] = cpu
        else:
            known.logical_cpus += 1
            if known.microcode != cpu.microcode:
                # Mixed microcode inside one socket means a partial late load: keep the lowest.
                problems.append(
                    f"socket {cpu.socket}: microcode differs between cpus ({known.microcode} vs {cpu.microcode})"
                )
                if cpu.microcode is not None and (known.microcode is None or cpu.microcode < known.microcode):
                    known.microcode = cpu.microcode
    return Parsed([sockets[s] for s in sorted(sockets)], problems)


def _identity(block: dict[str, str]) -> CpuIdentity | None:
    socket = _number(block.get("physical id"))
    if "vendor_id" in block:
        vendor = block["vendor_id"]
        family = _number(block.get("cpu family"))
        model = _number(block.get("model"))
        stepping = _number(block.get("stepping"))
        name = block.get("model name", "")
    elif "cpu implementer" in block:
        implementer = _number(block.get("cpu implementer"))
        vendor = _ARM_IMPLEMENTERS.get(implementer or -1, block["cpu implementer"])
        family = _number(block.get("cpu architecture"))
        model = _number(block.get("cpu part"))
        stepping = _number(block.get("cpu revision"))
        name = block.get("model name", "")
    else:
        return None
    if not vendor or family is None or model is None or family < 0 or model < 0:
        return None
    microcode = _number(block.get("microcode"))
    return CpuIdentity(
        socket=socket if socket is not None and socket >= 0 else 0,
        vendor=clip(vendor, 32),
        family=family,
        model=model,
        stepping=stepping if stepping is not None and stepping >= 0 else None,
        microcode=microcode if microcode is not None and microcode >= 0 else None,
        model_name=clip(name, 128),
        logical_cpus=1,
    )


@dataclass
class KernelCmdline:
    """What the checker needs from /proc/cmdline."""

    cmdline: str
    isolated_cpus: list[int] = field(default_factory=list)
    isolcpus_flags: list[str] = field(default_factory=list)  # nohz, domain, managed_irq
    nohz_full_cpus: list[int] = field(default_factory=list)
    parameters: dict[str, str] = field(default_factory=dict)  # last value of each key=value


_ISOLCPUS_FLAGS = {"nohz", "domain", "managed_irq"}


@guarded(lambda: KernelCmdline(cmdline=""))
def parse_cmdline(text: str) -> Parsed[KernelCmdline]:
    """/proc/cmdline -> isolcpus (with its flags) and nohz_full cpu lists, and all key=value parameters."""
    cmdline = " ".join(text.split())
    result = KernelCmdline(cmdline=clip(cmdline, 4096))
    problems: list[str] = []
    for token in cmdline.split(" "):
        key, sep, value = token.partition("=")
        if not sep:
            continue
        result.parameters[key] = value
        if key == "isolcpus":
            items = value.split(",")
            flags = []
            while items and items[0] in _ISOLCPUS_FLAGS:
                flags.append(items.pop(0))
            cpus = parse_cpu_list(",".join(items))
            result.isolcpus_flags = flags
            result.isolated_cpus = cpus.value
            problems.extend(f"isolcpus: {p}" for p in cpus.problems)
        elif key == "nohz_full":
            cpus = parse_cpu_list(value)
            result.nohz_full_cpus = cpus.value
            problems.extend(f"nohz_full: {p}" for p in cpus.problems)
    return Parsed(result, problems)
