"""Firmware-first error records (GHES, `{n}[Hardware Error]: …` in the kernel log) as sections with
their section type and, for memory errors, the address and where the firmware says the DIMM is.

The kernel prints one record per firmware report (drivers/acpi/apei/ghes.c, cper.c): a header
("Hardware error from APEI Generic Hardware Error Source: N", "event severity: …"), then one section
per error ("Error K, type: …", "section_type: memory error | PCIe error | …", and for memory
errors `physical_address:`, `node: card: module: rank: …`, `DIMM location:` from the SMBIOS handle,
or the firmware's own `fru_text:`). Every line carries the record's number {n}, so the lines of two
records that interleave still sort apart. Pure: text in, records out.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

MEMORY_SECTION = "memory error"
_LINE = re.compile(r"\{(?P<n>\d{1,20})\}\[Hardware Error\]:\s*(?P<text>.*?)\s*$")
_HEADER = "Hardware error from APEI"
_ERROR = re.compile(r"^Error (?P<k>\d{1,9}), type:")
_NUMBERS = re.compile(r"\b(node|card|module|rank|bank|device|row|column|socket|channel|slot): (\d{1,12})\b")


@dataclass
class GhesSection:
    """One error section of one GHES record."""

    record: int  # the kernel's {n}: unique within a boot
    index: int  # Error K within the record
    severity: str | None = None
    section_type: str | None = None
    physical_address: str | None = None
    dimm_location: str | None = None
    fru_text: str | None = None
    numbers: dict[str, int] = field(default_factory=dict)  # node, card, module, rank, bank, row, …

    @property
    def key(self) -> tuple[int, int]:
        return self.record, self.index

    @property
    def memory(self) -> bool:
        return (self.section_type or "").lower() == MEMORY_SECTION

    def names(self) -> list[str]:
        """What the firmware calls the DIMM (DIMM location, then fru_text), as printed."""
        return [n for n in (self.dimm_location, self.fru_text) if n]

    def summary(self) -> str:
        where = " / ".join(self.names()) or "no DIMM location"
        nums = " ".join(f"{k} {v}" for k, v in self.numbers.items() if k in ("node", "card", "module", "rank"))
        return (
            f"{{{self.record}}} {self.section_type or 'unknown section'} {self.physical_address or 'no address'}"
            f" at {where}" + (f" ({nums})" if nums else "")
        )


def ghes_sections(lines: Iterable[str]) -> list[GhesSection]:
    """The sections of every GHES record in the lines (kernel log or dmesg text), in log order."""
    sections: dict[tuple[int, int], GhesSection] = {}
    current: dict[int, int] = {}  # record -> its section being read
    severity: dict[int, str] = {}
    for raw in lines:
        m = _LINE.search(raw)
        if m is None:
            continue
        n, text = int(m.group("n")), m.group("text")
        if text.startswith(_HEADER):
            current[n] = 0
            continue
        if (e := _ERROR.match(text)) is not None:
            current[n] = int(e.group("k"))
        if text.startswith("event severity:"):
            severity[n] = text.split(":", 1)[1].strip()
            continue
        key = (n, current.get(n, 0))
        section = sections.get(key)
        if section is None:
            if e is None and not text.startswith(("section_type:", "fru_text:", "fru_id:")):
                continue  # header lines ("It has been corrected by h/w …")
            section = sections[key] = GhesSection(record=n, index=key[1], severity=severity.get(n))
        if e is not None:
            continue
        _read(section, text)
    return list(sections.values())


def _read(section: GhesSection, text: str) -> None:
    name, _, value = text.partition(":")
    value = value.strip()
    if name == "section_type":
        section.section_type = value
    elif name == "physical_address":
        with contextlib.suppress(ValueError):  # a garbled address is left out, not guessed
            section.physical_address = f"0x{int(value, 16):x}"
    elif name == "DIMM location":
        section.dimm_location = value
    elif name == "fru_text":
        section.fru_text = value
    else:
        section.numbers.update((k, int(v)) for k, v in _NUMBERS.findall(text))


def section_types(lines: Iterable[str]) -> list[str]:
    """The distinct section types of the records in the lines ('unknown section' where none was printed)."""
    seen: dict[str, None] = {}
    for section in ghes_sections(lines):
        seen.setdefault((section.section_type or "unknown section").lower(), None)
    return list(seen)
