"""`nvidia-smi -q -x` (the XML report, DTD versions 11 to 13) and the plain `nvidia-smi -q` text, read
into the report's GPU section (checker/sections/gpu.py).

Layouts differ by generation and driver: ECC counters are single/double-bit rows before Ampere and
SRAM/DRAM counters after (v13 splits SRAM uncorrectable into parity and SEC-DED); retired pages are
N/A on Ampere, remapped rows N/A before it and under MIG; v13 renames clocks_throttle_reasons to
clocks_event_reasons and reports temperature as a T.Limit margin; power moved from power_readings to
gpu_power_readings. Whatever the tool prints as N/A, "Not Supported" or "Unknown Error" is None:
unknown, never 0. The XML is the local tool's output, read with the standard library parser; a
document that declares entities is refused (nvidia-smi never writes one).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from checker.parsers.common import Parsed, clip, guarded, int64, problem
from checker.schemas import Gpu, GpuEcc, GpuMemoryRepair, GpuState
from checker.sections.gpu import MAX_GPUS

_UNKNOWN = frozenset({"", "n/a", "[n/a]", "not supported", "[not supported]", "unknown error", "none", "redacted"})
_NUMBER = re.compile(r"^\s*(-?\d+(?:\.\d+)?)")
# the reasons that mean the GPU is held back by its hardware or its cooling (the rest are policy or idleness)
REASON_PREFIXES = ("clocks_event_reason_", "clocks_throttle_reason_")


def _text(node: ET.Element | None, path: str) -> str | None:
    if node is None:
        return None
    found = node.find(path)
    if found is None or found.text is None:
        return None
    value = found.text.strip()
    return None if value.lower() in _UNKNOWN else value


def _count(node: ET.Element | None, path: str) -> int | None:
    value = _text(node, path)
    if value is None:
        return None
    m = _NUMBER.match(value)
    if m is None or "." in m.group(1):
        return None
    number = int64(int(m.group(1)))
    return number if number is not None and number >= 0 else None


def _number(node: ET.Element | None, path: str) -> float | None:
    value = _text(node, path)
    m = _NUMBER.match(value) if value is not None else None
    return float(m.group(1)) if m else None


def _yes_no(node: ET.Element | None, path: str) -> bool | None:
    value = _text(node, path)
    if value is None:
        return None
    word = value.split()[0].lower()
    return True if word == "yes" else False if word == "no" else None


def _sum(values: list[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return int64(sum(known)) if known else None


def _ecc(gpu: ET.Element) -> GpuEcc:
    mode = gpu.find("ecc_mode")
    ecc = GpuEcc(mode=_text(mode, "current_ecc"), pending_mode=_text(mode, "pending_ecc"))
    errors = gpu.find("ecc_errors")
    if errors is None:
        return ecc
    for scope in ("volatile", "aggregate"):
        node = errors.find(scope)
        if node is None:
            continue
        if node.find("single_bit") is not None or node.find("double_bit") is not None:
            ecc.layout = "legacy"
            corrected, uncorrected = _count(node, "single_bit/total"), _count(node, "double_bit/total")
        else:
            ecc.layout = "sram_dram"
            dram_unc = _count(node, "dram_uncorrectable")
            corrected = _sum([_count(node, "sram_correctable"), _count(node, "dram_correctable")])
            uncorrected = _sum(
                [
                    _count(node, "sram_uncorrectable"),
                    _count(node, "sram_uncorrectable_parity"),
                    _count(node, "sram_uncorrectable_secded"),
                    dram_unc,
                ]
            )
            if scope == "aggregate":
                ecc.aggregate_dram_uncorrected = dram_unc
        if scope == "volatile":
            ecc.volatile_corrected, ecc.volatile_uncorrected = corrected, uncorrected
        else:
            ecc.aggregate_corrected, ecc.aggregate_uncorrected = corrected, uncorrected
    return ecc


def _repair(gpu: ET.Element) -> GpuMemoryRepair:
    pages = gpu.find("retired_pages")
    rows = gpu.find("remapped_rows")
    blacklist, retirement = _yes_no(pages, "pending_blacklist"), _yes_no(pages, "pending_retirement")
    pending = None if blacklist is None and retirement is None else bool(blacklist or retirement)
    return GpuMemoryRepair(
        retired_single_bit=_count(pages, "multiple_single_bit_retirement/retired_count"),
        retired_double_bit=_count(pages, "double_bit_retirement/retired_count"),
        retirement_pending=pending,
        remapped_corrected=_count(rows, "remapped_row_corr"),
        remapped_uncorrected=_count(rows, "remapped_row_unc"),
        remap_pending=_yes_no(rows, "remapped_row_pending"),
        remap_failure=_yes_no(rows, "remapped_row_failure"),
        banks_without_spare=_count(rows, "row_remapper_histogram/row_remapper_histogram_none"),
        bank_histogram=_histogram(rows),
    )


HISTOGRAM_BUCKETS = ("max", "high", "partial", "low", "none")


def _histogram(rows: ET.Element | None) -> dict[str, int] | None:
    """The row remapper's bank availability histogram, bucket -> banks (None: not reported)."""
    found = {
        b: n
        for b in HISTOGRAM_BUCKETS
        if (n := _count(rows, f"row_remapper_histogram/row_remapper_histogram_{b}")) is not None
    }
    return found or None


def _reasons(gpu: ET.Element) -> list[str] | None:
    node = gpu.find("clocks_event_reasons")
    if node is None:
        node = gpu.find("clocks_throttle_reasons")
    if node is None:
        return None
    active: list[str] = []
    seen = False
    for child in node:
        state = (child.text or "").strip().lower()
        name = child.tag
        for prefix in REASON_PREFIXES:
            name = name.removeprefix(prefix)
        if state in ("active", "not active"):
            seen = True
        if state == "active":
            active.append(clip(name, 64))
    return active[:32] if seen else None


def _power(gpu: ET.Element) -> tuple[float | None, float | None]:
    for section in ("gpu_power_readings", "power_readings"):
        node = gpu.find(section)
        if node is None:
            continue
        draw = _number(node, "power_draw")
        if draw is None:
            draw = _number(node, "average_power_draw")
        if draw is None:
            draw = _number(node, "instant_power_draw")
        limit = _number(node, "current_power_limit")
        if limit is None:
            limit = _number(node, "power_limit")
        if limit is None:
            limit = _number(node, "enforced_power_limit")
        if draw is not None or limit is not None:
            return draw, limit
    return None, None


def _gpu(index: int, node: ET.Element) -> Gpu:
    bdf = _text(node, "pci/pci_bus_id") or (node.get("id") or "").strip() or f"index-{index}"
    temps = node.find("temperature")
    draw, limit = _power(node)
    reset = node.find("gpu_reset_status")
    return Gpu(
        index=index,
        bdf=clip(bdf, 32),
        uuid=clip(u, 64) if (u := _text(node, "uuid")) else None,
        serial=clip(s, 64) if (s := _text(node, "serial")) else None,
        product=clip(p, 128) if (p := _text(node, "product_name")) else None,
        part_number=clip(b, 64) if (b := _text(node, "board_part_number") or _text(node, "gpu_part_number")) else None,
        vbios=clip(v, 64) if (v := _text(node, "vbios_version")) else None,
        minor_number=_count(node, "minor_number"),
        module_id=_count(node, "gpu_module_id") if node.find("gpu_module_id") is not None else None,
        mig_mode=clip(m, 32) if (m := _text(node, "mig_mode/current_mig")) else None,
        ecc=_ecc(node),
        memory_repair=_repair(node),
        reset_required=_yes_no(reset, "reset_required"),
        drain_and_reset_recommended=_yes_no(reset, "drain_and_reset_recommended"),
        recovery_action=clip(r, 64) if (r := _text(node, "gpu_recovery_action")) else None,
        temperature_c=_number(temps, "gpu_temp"),
        slowdown_c=_number(temps, "gpu_temp_slow_threshold"),
        shutdown_c=_number(temps, "gpu_temp_max_threshold"),
        tlimit_c=_number(temps, "gpu_temp_tlimit"),
        slowdown_tlimit_c=_number(temps, "gpu_temp_slow_tlimit_threshold"),
        memory_temperature_c=_number(temps, "memory_temp"),
        memory_max_c=_number(temps, "gpu_temp_max_mem_threshold"),
        power_draw_w=draw,
        power_limit_w=limit,
        clock_event_reasons=_reasons(node),
    )


@guarded(lambda: None)
def parse_nvidia_smi_xml(text: str) -> Parsed[GpuState | None]:
    """The GPUs of one `nvidia-smi -q -x` run, in the tool's (index) order."""
    if "<!ENTITY" in text:
        return Parsed(None, [problem("refused: the document declares entities", text)])
    try:
        root = ET.fromstring(text.strip())  # noqa: S314 - the local tool's output; entity declarations refused above
    except ET.ParseError as error:
        return Parsed(None, [problem(f"not nvidia-smi XML ({error})", text)])
    if root.tag != "nvidia_smi_log":
        return Parsed(None, [problem(f"root element is <{clip(root.tag, 40)}>, not <nvidia_smi_log>", text)])
    problems: list[str] = []
    nodes = root.findall("gpu")
    if len(nodes) > MAX_GPUS:
        problems.append(f"{len(nodes)} GPUs; only the first {MAX_GPUS} were read")
    state = GpuState(
        driver_version=clip(d, 64) if (d := _text(root, "driver_version")) else None,
        cuda_version=clip(c, 32) if (c := _text(root, "cuda_version")) else None,
        attached_gpus=_count(root, "attached_gpus"),
        gpus=[_gpu(i, node) for i, node in enumerate(nodes[:MAX_GPUS])],
    )
    if state.attached_gpus is not None and state.attached_gpus != len(nodes):
        problems.append(f"attached_gpus says {state.attached_gpus}, the document lists {len(nodes)}")
    return Parsed(state, problems)


# -- the plain `nvidia-smi -q` text ------------------------------------------------------------

_LINE = re.compile(r"^(?P<indent> *)(?P<key>[^:]+?)\s*:\s*(?P<value>.*)$")
_GPU_HEADER = re.compile(r"^GPU (?P<bdf>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$")


def _tree(lines: list[str]) -> ET.Element:
    """The indented 'Key : value' text as the XML's element tree: sections nest by indentation, keys are
    mapped to the XML names the rest of this module reads (only those it reads)."""
    root = ET.Element("gpu")
    stack: list[tuple[int, ET.Element, str]] = [(-1, root, "")]
    for raw in lines:
        if not raw.strip():
            continue
        indent = len(raw) - len(raw.lstrip(" "))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        _, parent, path = stack[-1]
        m = _LINE.match(raw)
        key = (m.group("key") if m else raw).strip()
        child_path = f"{path}/{key}"
        tag = _TEXT_KEYS.get(child_path, "_" + re.sub(r"[^a-z0-9]+", "_", key.lower()))
        child = ET.SubElement(parent, tag)
        if m is not None:
            child.text = m.group("value").strip()
        else:
            stack.append((indent, child, child_path))
    return root


_TEXT_KEYS: dict[str, str] = {
    "/Product Name": "product_name",
    "/Serial Number": "serial",
    "/GPU UUID": "uuid",
    "/Minor Number": "minor_number",
    "/VBIOS Version": "vbios_version",
    "/Board Part Number": "board_part_number",
    "/Module ID": "gpu_module_id",
    "/MIG Mode": "mig_mode",
    "/MIG Mode/Current": "current_mig",
    "/GPU Recovery Action": "gpu_recovery_action",
    "/GPU Reset Status": "gpu_reset_status",
    "/GPU Reset Status/Reset Required": "reset_required",
    "/GPU Reset Status/Drain and Reset Recommended": "drain_and_reset_recommended",
    "/PCI": "pci",
    "/PCI/Bus Id": "pci_bus_id",
    "/ECC Mode": "ecc_mode",
    "/ECC Mode/Current": "current_ecc",
    "/ECC Mode/Pending": "pending_ecc",
    "/ECC Errors": "ecc_errors",
    "/ECC Errors/Volatile": "volatile",
    "/ECC Errors/Aggregate": "aggregate",
    "/Retired Pages": "retired_pages",
    "/Retired Pages/Pending Page Blacklist": "pending_blacklist",
    "/Retired Pages/Pending Page Retirement": "pending_retirement",
    "/Remapped Rows": "remapped_rows",
    "/Remapped Rows/Correctable Error": "remapped_row_corr",
    "/Remapped Rows/Uncorrectable Error": "remapped_row_unc",
    "/Remapped Rows/Pending": "remapped_row_pending",
    "/Remapped Rows/Remapping Failure Occurred": "remapped_row_failure",
    "/Remapped Rows/Bank Remap Availability Histogram": "row_remapper_histogram",
    "/Remapped Rows/Bank Remap Availability Histogram/None": "row_remapper_histogram_none",
    "/Remapped Rows/Bank Remap Availability Histogram/Max": "row_remapper_histogram_max",
    "/Remapped Rows/Bank Remap Availability Histogram/High": "row_remapper_histogram_high",
    "/Remapped Rows/Bank Remap Availability Histogram/Partial": "row_remapper_histogram_partial",
    "/Remapped Rows/Bank Remap Availability Histogram/Low": "row_remapper_histogram_low",
    "/Temperature": "temperature",
    "/Temperature/GPU Current Temp": "gpu_temp",
    "/Temperature/GPU T.Limit Temp": "gpu_temp_tlimit",
    "/Temperature/GPU Shutdown Temp": "gpu_temp_max_threshold",
    "/Temperature/GPU Slowdown Temp": "gpu_temp_slow_threshold",
    "/Temperature/Memory Current Temp": "memory_temp",
    "/Temperature/Memory Max Operating Temp": "gpu_temp_max_mem_threshold",
    "/GPU Power Readings": "gpu_power_readings",
    "/GPU Power Readings/Power Draw": "power_draw",
    "/GPU Power Readings/Current Power Limit": "current_power_limit",
    "/Power Readings": "power_readings",
    "/Power Readings/Power Draw": "power_draw",
    "/Power Readings/Power Limit": "power_limit",
}
for _scope in ("Volatile", "Aggregate"):
    for _key, _tag in (
        ("SRAM Correctable", "sram_correctable"),
        ("SRAM Uncorrectable", "sram_uncorrectable"),
        ("SRAM Uncorrectable Parity", "sram_uncorrectable_parity"),
        ("SRAM Uncorrectable SEC-DED", "sram_uncorrectable_secded"),
        ("DRAM Correctable", "dram_correctable"),
        ("DRAM Uncorrectable", "dram_uncorrectable"),
    ):
        _TEXT_KEYS[f"/ECC Errors/{_scope}/{_key}"] = _tag
_REASONS = {
    "Idle": "gpu_idle",
    "Applications Clocks Setting": "applications_clocks_setting",
    "SW Power Cap": "sw_power_cap",
    "HW Slowdown": "hw_slowdown",
    "HW Thermal Slowdown": "hw_thermal_slowdown",
    "HW Power Brake Slowdown": "hw_power_brake_slowdown",
    "Sync Boost": "sync_boost",
    "SW Thermal Slowdown": "sw_thermal_slowdown",
    "Display Clock Setting": "display_clocks_setting",
}
for _section, _tag in (
    ("Clocks Event Reasons", "clocks_event_reasons"),
    ("Clocks Throttle Reasons", "clocks_throttle_reasons"),
):
    _TEXT_KEYS[f"/{_section}"] = _tag
    for _key, _reason in _REASONS.items():
        _TEXT_KEYS[f"/{_section}/{_key}"] = "clocks_event_reason_" + _reason
        _TEXT_KEYS[f"/{_section}/HW Slowdown/{_key}"] = "clocks_event_reason_" + _reason


def _flatten_reasons(gpu: ET.Element) -> None:
    """The text nests HW Thermal/Power Brake Slowdown under HW Slowdown; the XML lists them side by side."""
    for section in gpu.iter():
        if section.tag not in ("clocks_event_reasons", "clocks_throttle_reasons"):
            continue
        for child in list(section):
            for nested in list(child):
                section.append(nested)
                child.remove(nested)


@guarded(lambda: None)
def parse_nvidia_smi_text(text: str) -> Parsed[GpuState | None]:
    """The GPUs of one plain `nvidia-smi -q` run (the same facts as the XML, for hosts whose collector
    captured the text)."""
    lines = text.splitlines()
    if not any(line.strip() == "==============NVSMI LOG==============" for line in lines[:5]):
        return Parsed(None, [problem("not nvidia-smi -q output (no NVSMI LOG banner)", text)])
    header: dict[str, str] = {}
    blocks: list[tuple[str, list[str]]] = []
    for line in lines:
        if (m := _GPU_HEADER.match(line)) is not None:
            blocks.append((m.group("bdf"), []))
        elif blocks:
            blocks[-1][1].append(line)
        elif (field := _LINE.match(line)) is not None:
            header[field.group("key").strip()] = field.group("value").strip()
    problems: list[str] = []
    if len(blocks) > MAX_GPUS:
        problems.append(f"{len(blocks)} GPUs; only the first {MAX_GPUS} were read")
    gpus: list[Gpu] = []
    for index, (bdf, body) in enumerate(blocks[:MAX_GPUS]):
        tree = _tree(body)
        _flatten_reasons(tree)
        tree.set("id", bdf)
        gpus.append(_gpu(index, tree))
    attached = header.get("Attached GPUs")
    state = GpuState(
        driver_version=clip(header["Driver Version"], 64) if header.get("Driver Version") else None,
        cuda_version=clip(header["CUDA Version"], 32) if header.get("CUDA Version") else None,
        attached_gpus=int(attached) if attached and attached.isdigit() and len(attached) < 6 else None,
        gpus=gpus,
    )
    if not gpus:
        problems.append("no 'GPU <bus id>' section")
    return Parsed(state, problems)
