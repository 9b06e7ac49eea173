"""GHES records as sections (checker/parsers/ghes.py) on the corpus's real x86 and arm64 records."""

from __future__ import annotations

from pathlib import Path

from bench.samples import sample
from checker.parsers.ghes import ghes_sections, section_types

SUSE = "kernel-log/syslog-ghes-recoverable-memory-fru-text-already-poisoned.log"
PCIE = Path(__file__).parents[1] / "decisions" / "fixtures" / "ghes-pcie-corrected-root-port.log"


def test_the_x86_record_names_its_dimm_twice_and_carries_its_address() -> None:
    [section] = ghes_sections(sample(SUSE).splitlines())
    assert section.memory
    assert section.severity == "recoverable"
    assert section.physical_address == "0xe16677000"
    assert section.dimm_location == "CPU 1 DIMM 5"
    assert section.fru_text == "Card01, ChnA, DIMM0"
    assert section.numbers["row"] == 56265


def test_arm64_records_have_no_dimm_location_and_each_is_its_own_section() -> None:
    sections = ghes_sections(sample("kernel-log/ghes-apei-memory-ce-ghes-edac-hisilicon-arm64.log").splitlines())
    assert len({s.key for s in sections}) == len(sections) >= 3
    assert all(s.memory and s.names() == [] for s in sections)


def test_interleaved_records_sort_apart_by_their_number_and_section_types_are_listed() -> None:
    memory = [line for line in sample(SUSE).splitlines() if "[Hardware Error]" in line]
    pcie = PCIE.read_text(encoding="utf-8").splitlines()
    mixed = [line for pair in zip(pcie, memory, strict=False) for line in pair] + pcie[len(memory) :]
    sections = {s.record: s for s in ghes_sections(mixed)}
    assert sections[1].dimm_location == "CPU 1 DIMM 5"
    assert sections[2].section_type == "PCIe error"
    assert sections[2].physical_address is None
    assert sorted(section_types(mixed)) == ["memory error", "pcie error"]
