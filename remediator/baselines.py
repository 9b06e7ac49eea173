"""Firmware baselines per hardware class, and the version comparison they need.

`firmware_baselines.yaml` says, for each hardware class, the oldest BIOS, BMC,
NIC firmware (by driver) and CPU microcode the fleet accepts. Vendors write
versions every way there is ("2.10.2", "P1.00", "3.0b", "16.35.2000
(MT_0000000080)", "0x000000de"), so versions are compared as sequences of
numbers and words, never as text or floats.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from remediator.capacity_baseline import CapacityBaseline

BASELINES_VERSION = 1
DEFAULT_BASELINES = Path(__file__).with_name("firmware_baselines.yaml")

# A token is a hex number (0x…), a decimal number, or a run of letters; everything else separates.
_TOKEN = re.compile(r"0x[0-9a-f]+|\d+|[a-z]+")

VersionToken = tuple[int, int | str]  # (1, number) or (0, word): a number outranks a word at the same place


def version_key(text: str | None) -> tuple[VersionToken, ...] | None:
    """The comparable form of a version string, or None when it holds no number ("N/A", "Not Specified").

    "2.10.2" -> numbers 2, 10, 2 (so 2.10.2 > 2.9.10 and 1.17 > 1.9: dotted parts are integers, not
    decimals); "0x000000de" -> the number 222; "P1.00" -> the word "p", then 1, 0; case is ignored.
    """
    if not text or not any(ch.isdigit() for ch in text):
        return None
    tokens: list[VersionToken] = []
    for token in _TOKEN.findall(text.lower()):
        if token.startswith("0x") and len(token) > 2:
            tokens.append((1, int(token, 16)))
        elif token.isdigit():
            tokens.append((1, int(token)))
        else:
            tokens.append((0, token))
    return tuple(tokens)


@functools.lru_cache(maxsize=65_536)  # a fleet has few distinct versions; every report compares them all
def compare_versions(a: str | None, b: str | None) -> int | None:
    """-1, 0 or 1 as a is older than, equal to or newer than b; None when either is not a version.

    Token by token: numbers by value, words alphabetically, a number is newer than a word in the
    same place (rpm's rule: "1.0.1" > "1.0a"); when one runs out first, the longer one is newer,
    so a trailing letter is a later revision ("3.0b" > "3.0") and "1.00" == "1.0".
    """
    ka, kb = version_key(a), version_key(b)
    if ka is None or kb is None:
        return None
    for (kind_a, value_a), (kind_b, value_b) in zip(ka, kb, strict=False):
        if kind_a != kind_b:
            return 1 if kind_a > kind_b else -1
        if value_a != value_b:
            if isinstance(value_a, int) and isinstance(value_b, int):
                return 1 if value_a > value_b else -1
            return 1 if str(value_a) > str(value_b) else -1
    return (len(ka) > len(kb)) - (len(ka) < len(kb))


def is_below(current: str | None, baseline: str | None) -> bool:
    """True only when both are versions and current is strictly older than baseline."""
    return compare_versions(current, baseline) == -1


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ErratumKernel(_Strict):
    """The kernel that works around a CPU erratum on one hardware class: the build to install, and how a
    host is recognised as running a fixed kernel (its `uname -r` is the release or one of `accept`)."""

    release: str = Field(min_length=1, max_length=64, description="uname -r of the build to install.")
    package: str | None = Field(None, max_length=128, description="Its pinned package (name=version).")
    accept: list[str] = Field(default_factory=list, description="Other releases that carry the fix.")
    withdrawn: dict[str, str] = Field(
        default_factory=dict, description="Releases that carry the fix but must go, with why (a side effect)."
    )


class InterleaveWeights(_Strict):
    """Weighted-interleave weights of one class, per node: every node with CPUs (DRAM) gets `dram`, every
    CPU-less (CXL) node `cxl`, so the share of pages sent to CXL depends on how many nodes of each a host
    has (2 DRAM + 1 CXL at 5/5/1: 1/11, ~9 %; 1 + 1 at 5/1: 1/6, ~17 %). The best N:M depends on the tiers'
    bandwidths, so it is measured per platform."""

    dram: int = Field(ge=1, le=255, description="Weight of each DRAM (CPU) node, 1..255 as the kernel takes it.")
    cxl: int = Field(ge=1, le=255, description="Weight of each CPU-less (CXL) node.")


class Tiering(_Strict):
    """How a class's memory tiers are meant to be set up (docs/rules.md, the cxl-* rules)."""

    interleave: InterleaveWeights | None = Field(None, description="Weighted-interleave weights; None: no policy.")
    source: str | None = Field(None, max_length=300, description="Where the weights come from (a measurement).")


BenchmarkName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._+\-]{0,63}$")]
ExpectedScore = Annotated[float, Field(gt=0, allow_inf_nan=False)]


class Performance(_Strict):
    """What a class's benchmark scores should be (the class-level check, remediator/benchmark_class.py)."""

    expected: dict[BenchmarkName, ExpectedScore] = Field(
        default_factory=dict,
        description="Benchmark name -> the score per core per GHz a healthy host of the class makes, measured on "
        "hosts known good (or the vendor's figure for the model); the class's median is judged against it.",
    )
    source: str | None = Field(None, max_length=300, description="Where the expected scores come from.")


class ClassBaseline(_Strict):
    """The oldest acceptable firmware of one hardware class, and the kernels its CPU errata need.
    Versions are strings: quote them in YAML."""

    bios: str | None = Field(None, description="Minimum BIOS version (dmidecode type 0 Version).")
    bmc: str | None = Field(None, description="Minimum BMC firmware revision (ipmitool mc info).")
    nic: dict[str, str] = Field(
        default_factory=dict, description="NIC driver name -> minimum firmware-version (ethtool -i)."
    )
    microcode: str | None = Field(None, description="Minimum CPU microcode revision, e.g. '0x2007006'.")
    kernels: dict[str, ErratumKernel] = Field(
        default_factory=dict, description="Erratum id (AMD-298) -> the patched kernel for this class."
    )
    tiering: Tiering | None = Field(None, description="Memory tiering policy (CXL): the interleave weights.")
    performance: Performance | None = Field(None, description="Expected benchmark scores of the class.")
    error_reporting: Literal["cmci", "firmware_first"] | None = Field(
        None,
        description="How the class reports corrected memory errors in production: cmci (the hybrid flow's "
        "production mode) or firmware_first. None: not judged (docs/error-reporting.md).",
    )
    capacity: CapacityBaseline | None = Field(
        None, description="What the class's hosts should have (memory, DIMMs, CPUs, disks, NICs); lost-capacity check."
    )


class FirmwareBaselines(_Strict):
    version: Literal[1]
    classes: dict[str, ClassBaseline] = Field(default_factory=dict)

    def for_class(self, hardware_class: str) -> ClassBaseline | None:
        return self.classes.get(hardware_class)


class BaselinesError(Exception):
    """The baselines file is broken; the message names the file, the line and the field."""


def _line_of(root: yaml.Node | None, loc: tuple[int | str, ...]) -> int:
    """The line of the YAML node at a pydantic error's location (mapping keys and list indexes)."""
    node, line = root, (root.start_mark.line + 1 if root is not None else 1)
    for part in loc:
        if isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            node = node.value[part] if 0 <= part < len(node.value) else None
        elif isinstance(node, yaml.MappingNode):
            node = next((v for k, v in node.value if getattr(k, "value", None) == part), None)
        else:
            break
        if node is None:
            break
        line = node.start_mark.line + 1
    return line


def parse_baselines(text: str, source: str = "<baselines>") -> FirmwareBaselines:
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark
        raise BaselinesError(f"{source}:{mark.line + 1 if mark else 1}: not valid YAML: {error.problem}") from error
    try:
        return FirmwareBaselines.model_validate(data)
    except ValidationError as error:
        problems = []
        for item in error.errors():
            loc = tuple(item["loc"])
            problems.append(f"{source}:{_line_of(root, loc)}: {'.'.join(map(str, loc))}: {item['msg']}")
        raise BaselinesError("\n".join(problems)) from error


def with_override(base: FirmwareBaselines, override: FirmwareBaselines) -> FirmwareBaselines:
    """The operator's file over the built-in one: each class it names replaces the built-in class whole."""
    return base.model_copy(update={"classes": {**base.classes, **override.classes}})


def load_baselines(path: Path = DEFAULT_BASELINES) -> FirmwareBaselines:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise BaselinesError(f"{path}: cannot read: {error.strerror}") from error
    return parse_baselines(text, str(path))
