"""Which GPU a signal's subject names, and the ticket's part for it (part_type `gpu`).

Shared by the nvidia-smi rules (remediator/derive/gpu.py: subjects like `gpu3 00000000:4E:00.0`) and the
kernel-log Xid rules (whose subjects carry the BDF the driver prints, `PCI:0000:4e:00`, no function).
A PCI address is compared by its numbers (domain, bus, device, and the function when both name one), so
nvidia-smi's 8-digit domain, the kernel's 4-digit one and either case all match. The part names the GPU
by its address in one form (`id`, `locator`: the ticket's part, so both sources' tickets dedup on it) and
by index, BDF, UUID, serial, product, VBIOS and board part number from the report's `gpu` section
(nvidia-smi); where that section is missing (nvidia-smi hung, or the GPU fell off the bus) it names what
the subject and the signal's detail give, and says the rest is unknown.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

BDF = re.compile(
    r"(?:(?P<domain>[0-9A-Fa-f]{4,8}):)?(?P<bus>[0-9A-Fa-f]{2}):(?P<device>[0-9A-Fa-f]{2})(?:\.(?P<function>[0-7]))?"
)
GPU_INDEX = re.compile(r"\bgpu ?(?P<index>\d{1,3})\b", re.IGNORECASE)
GPU_UUID = re.compile(r"GPU-[0-9a-fA-F-]{36}")
PciAddress = tuple[int, int, int, int | None]


def gpu_subject(index: int, bdf: str) -> str:
    """The subject of a GPU signal from nvidia-smi: the tool's index and the GPU's PCI address."""
    return f"gpu{index} {bdf}"


def pci_address(text: str) -> PciAddress | None:
    """(domain, bus, device, function or None) of the first PCI address in text."""
    m = BDF.search(text)
    if m is None:
        return None
    function = m.group("function")
    return (
        int(m.group("domain") or "0", 16),
        int(m.group("bus"), 16),
        int(m.group("device"), 16),
        int(function) if function is not None else None,
    )


def locator(text: str) -> str:
    """The GPU's PCI address in one form, `0000:19:00.0` (4-digit domain, lower case, function 0 when the text
    gives none), from any subject that names one (`gpu0 00000000:19:00.0`, `0000:19:00.0`, `PCI:0000:19:00`):
    the ticket's part for a GPU, so the nvidia-smi rules and the Xid rules dedup on the same ticket. Text
    naming no address is returned as it is."""
    address = pci_address(text.split("PCI:")[-1] if "PCI:" in text else text)
    if address is None:
        return text
    domain, bus, device, function = address
    return f"{domain:04x}:{bus:02x}:{device:02x}.{function or 0}"


def ticket_part(part_type: str, subject: str) -> str:
    """The ticket's part (its dedup key's last field) for a remediation's subject: a GPU's address in one form
    (locator), any other part its subject as it is."""
    return locator(subject) if part_type == "gpu" else subject


def same_device(a: PciAddress | None, b: PciAddress | None) -> bool:
    if a is None or b is None or a[:3] != b[:3]:
        return False
    return a[3] is None or b[3] is None or a[3] == b[3]


def find_gpu(subject: str, gpus: list[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The GPU of the report's `gpu` section the subject names: by UUID, else PCI address, else index."""
    uuid = GPU_UUID.search(subject)
    if uuid is not None:
        for gpu in gpus:
            if (gpu.get("uuid") or "").lower() == uuid.group(0).lower():
                return gpu
    address = pci_address(subject.split("PCI:")[-1] if "PCI:" in subject else subject)
    if address is not None:
        for gpu in gpus:
            if same_device(address, pci_address(str(gpu.get("bdf") or ""))):
                return gpu
        return None  # a named address that is not there: never another GPU by its index
    index = GPU_INDEX.search(subject)
    if index is not None:
        for gpu in gpus:
            if gpu.get("index") == int(index.group("index")):
                return gpu
    return None


def gpu_part(subject: str, observations: Mapping[str, Any], detail: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The ticket's part for a GPU: what nvidia-smi says of it, else what the subject and detail say."""
    section = observations.get("gpu") or {}
    gpus = [g for g in section.get("gpus") or [] if isinstance(g, Mapping)]
    gpu = find_gpu(subject, gpus)
    given = dict(detail or {})
    if gpu is None:
        address = BDF.search(subject)
        return {
            "id": locator(subject),
            "subject": subject,
            "index": given.get("index"),
            "bdf": given.get("bdf") or (address.group(0) if address else None),
            "uuid": given.get("uuid"),
            "serial": given.get("serial"),
            "vendor": "NVIDIA",
            "model": given.get("product"),
            "vbios": given.get("vbios"),
            "part_number": None,
            "note": "not in the report's nvidia-smi section: named from the signal only",
        }
    repair = gpu.get("memory_repair") or {}
    return {
        "id": locator(subject),
        "subject": subject,
        "index": gpu.get("index"),
        "bdf": gpu.get("bdf"),
        "uuid": gpu.get("uuid"),
        "serial": gpu.get("serial"),
        "vendor": "NVIDIA",
        "model": gpu.get("product"),
        "vbios": gpu.get("vbios"),
        "part_number": gpu.get("part_number"),
        "module_id": gpu.get("module_id"),
        "driver": section.get("driver_version"),
        "ecc": gpu.get("ecc"),
        "remapped_rows": {
            key: repair.get(key)
            for key in ("remapped_corrected", "remapped_uncorrected", "remap_pending", "remap_failure")
        },
        "retired_pages": {
            key: repair.get(key) for key in ("retired_single_bit", "retired_double_bit", "retirement_pending")
        },
        "temperature_c": gpu.get("temperature_c"),
        "slowdown_c": gpu.get("slowdown_c"),
    }
