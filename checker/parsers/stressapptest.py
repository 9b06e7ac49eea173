"""stressapptest's printed result (github.com/stressapptest/stressapptest, Debian package stressapptest).

The tool ends with `Status: PASS - …` or `Status: FAIL - …`; a memory miscompare prints `Report
Error: miscompare : DIMM … ` and `Hardware Error: miscompare on CPU … (…:DIMM …)` lines, and the
totals `Stats: Found N hardware incidents` and `Stats: Completed: … with N hardware incidents, M
errors`; a run that could not test (no memory to allocate, bad options) prints `Process Error:` lines
and `Status: FAIL - test encountered procedural errors`. Pure: text in, the verdict out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from checker.parsers.common import Parsed

_STATUS = re.compile(r"^Status: (PASS|FAIL)\b(?: - (.*))?$", re.MULTILINE)
_INCIDENTS = re.compile(r"^Stats: Found (\d+) hardware incidents", re.MULTILINE)
_COMPLETED = re.compile(r"with (\d+) hardware incidents, (\d+) errors")
MAX_LINES = 8


@dataclass(frozen=True)
class StressResult:
    status: str | None  # PASS, FAIL, or None when the run printed no status (killed, cut short)
    reason: str = ""
    hardware_incidents: int = 0
    errors: int = 0
    procedural: bool = False  # it could not test (allocation, options): says nothing about the memory
    hardware_lines: list[str] = field(default_factory=list)
    process_lines: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.status == "PASS" and self.hardware_incidents == 0 and self.errors == 0


def parse_stressapptest(text: str) -> Parsed[StressResult]:
    statuses = _STATUS.findall(text)
    status, reason = statuses[-1] if statuses else (None, "")
    incidents = [int(n) for n in _INCIDENTS.findall(text)]
    completed = _COMPLETED.findall(text)
    errors = int(completed[-1][1]) if completed else 0
    if completed:
        incidents.append(int(completed[-1][0]))
    lines = text.splitlines()
    hardware = [line.strip() for line in lines if line.startswith(("Hardware Error:", "Report Error:"))]
    process = [line.strip() for line in lines if line.startswith("Process Error:")]
    problems = [] if status else ["no 'Status: PASS' or 'Status: FAIL' line: the run did not finish"]
    return Parsed(
        StressResult(
            status=status,
            reason=reason.strip(),
            hardware_incidents=max(incidents, default=0),
            errors=errors,
            procedural="procedural" in reason or (bool(process) and not hardware),
            hardware_lines=hardware[:MAX_LINES],
            process_lines=process[:MAX_LINES],
        ),
        problems,
    )
