"""Version comparison and the firmware baselines file."""

from __future__ import annotations

from pathlib import Path

import pytest

from checker.sim import HARDWARE_CLASSES
from remediator.baselines import (
    DEFAULT_BASELINES,
    BaselinesError,
    compare_versions,
    is_below,
    load_baselines,
    parse_baselines,
    version_key,
)


@pytest.mark.parametrize(
    ("older", "newer"),
    [
        ("2.9.10", "2.10.2"),  # dotted parts are integers, not text
        ("1.9", "1.17"),  # nor decimals: a BMC's 1.17 follows its 1.9
        ("P1.00", "P1.10"),
        ("0x000000de", "0x000000f0"),  # hex microcode revisions by value
        ("0xde", "0x0000f0"),  # leading zeros do not matter
        ("3.0", "3.0b"),  # a trailing letter is a later revision
        ("3.0a", "3.0b"),
        ("1.0a", "1.0.1"),  # a number outranks a word in the same place
        ("4.00.00.00", "4.40.40.40"),
        ("16.28.4512 (DEL0000000015)", "16.35.2000"),
        ("U30 v2.62 (01/12/2023)", "U30 v2.70 (03/01/2024)"),
        ("2.6.16.60-0.21-smp", "2.6.23.17-amdpatch"),
    ],
)
def test_version_order(older: str, newer: str) -> None:
    assert compare_versions(older, newer) == -1
    assert compare_versions(newer, older) == 1
    assert is_below(older, newer)
    assert not is_below(newer, older)


@pytest.mark.parametrize(("a", "b"), [("1.00", "1.0"), ("P1.00", "p1.0"), ("0x0A", "0xa"), ("8.70", "8.70")])
def test_equal_versions(a: str, b: str) -> None:
    assert compare_versions(a, b) == 0
    assert not is_below(a, b)


@pytest.mark.parametrize("text", [None, "", "N/A", "Not Specified", "unknown"])
def test_text_without_a_number_is_not_a_version(text: str | None) -> None:
    assert version_key(text) is None
    assert compare_versions(text, "1.0") is None
    assert not is_below(text, "1.0")


def test_the_shipped_file_covers_the_simulated_classes_at_their_current_releases() -> None:
    baselines = load_baselines()
    assert set(baselines.classes) == {hw.name for hw in HARDWARE_CLASSES}
    for hw in HARDWARE_CLASSES:
        wanted = baselines.classes[hw.name]
        assert compare_versions(hw.bios_version, wanted.bios) == 0
        assert compare_versions(hw.bmc_firmware, wanted.bmc) == 0
        assert not is_below(hw.nic_firmware, wanted.nic[hw.nic_driver])
        assert is_below(hw.old_bios_version, wanted.bios)
        assert is_below(hw.old_bmc_firmware, wanted.bmc)
        if wanted.microcode is not None:
            assert compare_versions(f"0x{hw.microcode:x}", wanted.microcode) == 0


def test_broken_files_are_refused_with_file_line_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "b.yaml"
    bad.write_text('version: 1\nclasses:\n  c1:\n    bmc: 1.60\n    bios: "1.0"\n')  # unquoted: the float 1.6
    with pytest.raises(BaselinesError, match=r"b\.yaml:4: classes\.c1\.bmc: Input should be a valid string"):
        load_baselines(bad)
    with pytest.raises(BaselinesError, match=r"classes\.c1\.bois: Extra inputs are not permitted"):
        parse_baselines('version: 1\nclasses:\n  c1: {bois: "1.0"}\n')
    with pytest.raises(BaselinesError, match=r"version"):
        parse_baselines("version: 2\nclasses: {}\n")
    with pytest.raises(BaselinesError, match="not valid YAML"):
        parse_baselines("version: [1\n")
    with pytest.raises(BaselinesError, match="cannot read"):
        load_baselines(tmp_path / "missing.yaml")
    assert DEFAULT_BASELINES.is_file()
