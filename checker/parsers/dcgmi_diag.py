"""`dcgmi diag` (DCGM's active diagnostics) as its table prints it -> DcgmDiag: each test's result, what it
exercises (`kind`), the GPUs it names and its warnings.

The table has a name column and a value column; a value longer than the column is cut at a fixed width,
mid-word, onto rows with an empty name ('Enabl' / 'e persistence'), so a row's pieces are joined at that
width, never with a space. Section rows ('-----  Hardware  ----') name the group of the tests below them.
`Warning` rows belong to the test above them; `Info` rows are the run's (persistence mode and the like).
Metadata rows give the DCGM and driver versions.

DCGM's own reading of a result (docs.nvidia.com/datacenter/dcgm/latest/reference/diagnostics/plugins/):
Fail means the plugin found the named defect, or it could not complete because of a setup or execution
error. A failure whose warnings say CUDA would not initialise (cuInit, 'system not yet initialized': on an
NVSwitch system, the fabric manager not running; the corpus's H100 sample) is `could_not_run`: a setup
fault, not the GPU's memory. `kind` by test name (the plugins' names: GPU Memory, Memtest, Memory
Bandwidth, Page Retirement/Row Remap -> memory; PCIe -> pcie; NVLink, NVBandwidth -> nvlink; Targeted
Power, Pulse Test -> power; Diagnostic, Targeted Stress, SM Stress, EUD -> compute; the rest of the
Deployment section -> deployment). Pure.
"""

from __future__ import annotations

import re

from checker.parsers.common import Parsed, clip, guarded, problem
from checker.sections.gpu import MAX_DIAG_TESTS, MAX_DIAG_WARNINGS, DcgmDiag, DcgmTest, DcgmWarning, DiagKind

_SECTION = re.compile(r"^[|+]-+\s+(?P<group>[A-Za-z][A-Za-z /]*?)\s+-+\+")
_GPU_NAMED = re.compile(r"^GPU\s+(?P<gpu>\d{1,3})\b")
_GPUS = re.compile(r"GPUs?\s*:\s*(?P<list>\d{1,3}(?:\s*,\s*\d{1,3})*)", re.IGNORECASE)
_COULD_NOT_RUN = re.compile(
    r"cuInit|Unable to initiali[sz]e CUDA|system not yet initiali[sz]ed|could not (?:run|start)", re.IGNORECASE
)
_RESULTS = {"pass": "pass", "fail": "fail", "warn": "warn", "warning": "warn", "skip": "skip"}
_METADATA = {"dcgm version": "dcgm_version", "driver version detected": "driver_version"}
_KINDS: tuple[tuple[tuple[str, ...], DiagKind], ...] = (
    (("memory", "memtest", "page retirement", "row remap"), "memory"),
    (("pcie",), "pcie"),
    (("nvlink", "nvbandwidth"), "nvlink"),
    (("power", "pulse"), "power"),
    (("diagnostic", "stress", "eud"), "compute"),
)
MAX_TEXT = 1000


def diag_kind(name: str, group: str | None) -> DiagKind:
    """What a test exercises, by its name (module docstring)."""
    low = name.lower()
    for needles, kind in _KINDS:
        if any(needle in low for needle in needles):
            return kind
    return "deployment" if (group or "").lower() == "deployment" else "other"


def _cells(line: str) -> tuple[str, str] | None:
    """(name, the value cell as printed, padding kept) of a table row; None for a border or another line."""
    if not line.startswith("|") or not line.rstrip().endswith("|"):
        return None
    inner = line.rstrip()[1:-1]
    if "|" not in inner:
        return None
    name, value = inner.split("|", 1)
    return name.strip(), value


def _piece(value: str) -> str:
    """The value cell's text at the table's wrap width: one pad on the left, two on the right."""
    return value[1:-2] if len(value) > 3 else value.strip()


def _joined(pieces: list[str]) -> str:
    return clip(" ".join("".join(pieces).split()), MAX_TEXT)


def _result(text: str) -> tuple[str, list[int] | None]:
    head = text.split("-", 1)[0].strip().lower()
    gpus = _GPUS.search(text)
    listed = [int(n) for n in re.findall(r"\d+", gpus.group("list"))] if gpus else None
    return _RESULTS.get(head, "other"), listed


_HEADER = re.compile(r"^\|\s*Diagnostic\s*\|\s*Result\s*\|")


def last_table(text: str) -> str:
    """The last run's table of a file runs were appended to (`dcgmi diag >> FILE`): from the border above its
    last header row; the whole text without a header. An old Fail and a later Pass parsed together gave each
    test both results (review r4, finding 6)."""
    lines = text.splitlines()
    headers = [i for i, line in enumerate(lines) if _HEADER.match(line)]
    if not headers:
        return text
    start = headers[-1]
    if start > 0 and lines[start - 1].startswith("+"):
        start -= 1
    if start > 0 and lines[start - 1].startswith("Successfully ran diagnostic"):
        start -= 1
    return "\n".join(lines[start:]) + "\n"


@guarded(lambda: None)
def parse_dcgmi_diag(text: str) -> Parsed[DcgmDiag | None]:
    """The table of `dcgmi diag -r N` (module docstring); None when the text holds no test row."""
    diag = DcgmDiag()
    problems: list[str] = []
    group: str | None = None
    rows: list[tuple[str, str | None, list[str]]] = []  # (name, group, value pieces)
    for raw in text.splitlines():
        line = raw.rstrip("\n")
        if not line.strip() or line.startswith("Successfully ran diagnostic"):
            continue
        if (section := _SECTION.match(line)) is not None:
            group = section.group("group").strip()
            continue
        if line.startswith("+") and set(line.strip()) <= set("+-="):
            continue  # a border
        cells = _cells(line)
        if cells is None:
            problems.append(problem("not a row of the dcgmi diag table", line))
            continue
        name, value = cells
        if name == "Diagnostic" and value.strip() == "Result":
            continue  # the header
        if not name and rows:
            rows[-1][2].append(_piece(value))
        elif name:
            rows.append((name, group, [_piece(value)]))
    for name, in_group, pieces in rows:
        value = _joined(pieces)
        if (in_group or "").lower() == "metadata":
            if (field := _METADATA.get(name.lower())) is not None:
                setattr(diag, field, clip(value, 32 if field == "dcgm_version" else 64))
            continue
        if name == "Info":
            if len(diag.info) < 16:
                diag.info.append(value)
            continue
        if name == "Warning":
            if not diag.tests:
                problems.append(problem("a Warning row before any test", value))
            elif len(diag.tests[-1].warnings) < MAX_DIAG_WARNINGS:
                named = _GPU_NAMED.match(value)
                diag.tests[-1].warnings.append(DcgmWarning(gpu=int(named.group("gpu")) if named else None, text=value))
            continue
        if len(diag.tests) >= MAX_DIAG_TESTS:
            problems.append(problem(f"more than {MAX_DIAG_TESTS} tests; the rest not read", name))
            break
        result, gpus = _result(value)
        diag.tests.append(
            DcgmTest(
                name=clip(name, 64),
                group=clip(in_group, 32) if in_group else None,
                kind=diag_kind(name, in_group),
                result=result,
                result_text=clip(value, 64),
                gpus=gpus,
            )
        )
    for test in diag.tests:
        test.could_not_run = test.result == "fail" and any(_COULD_NOT_RUN.search(w.text) for w in test.warnings)
    if not diag.tests:
        return Parsed(None, problems or [problem("no test row in the dcgmi diag output", text)])
    return Parsed(diag, problems)
