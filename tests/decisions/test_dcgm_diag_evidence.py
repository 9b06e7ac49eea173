"""`dcgmi diag` (issue 16 leftovers, item 5): the site's own run, left in the agent's state directory, is
parsed per test (checker/parsers/dcgmi_diag.py) and shown on GPU tickets only (remediator/gpu_diag.py); no rule
reads it. The corpus's real H100 run (DCGM 3.3.8, 8 GPUs): GPU Memory 'Fail - All' because CUDA would not
initialise (the fabric manager was not running), PCIe skipped, the deployment checks passed."""

from __future__ import annotations

import datetime as dt
import os
import re
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from bench.samples import sample
from checker.parsers.dcgmi_diag import diag_kind, parse_dcgmi_diag
from remediator.gpu_diag import dcgm_diag_of
from remediator.rules import load_ruleset
from tests.decisions.cases_gpu import A10G, cycles, field, gpu_host
from tests.decisions.harness import register, remediations, run, to_ticket

H100_DIAG = "gpu/dcgmi-diag-r3-h100x8-gpu-memory-fail-cuinit-persistence-info.txt"
DIAG_FILE = "/var/lib/fleetfix-agent/dcgmi-diag.txt"  # checker/collectors/gpu.py: the state directory's


def table(*rows: tuple[str, str]) -> str:
    """A Hardware section of dcgmi's table, as the real one lays it out: the value cut at 45 characters, one
    space before and two after."""
    line = "+" + "-" * 27 + "+" + "-" * 48 + "+"
    body = [f"| {name:<25} | {value:<45}  |" for name, value in rows]
    section = "+-----  Hardware  ----------+" + "-" * 48 + "+"
    return "\n".join(
        [line, "| Diagnostic                | Result                                         |", section, *body, line]
    )


def test_the_real_h100_run_is_read_per_test() -> None:
    parsed = parse_dcgmi_diag(sample(H100_DIAG))
    assert parsed.problems == []
    diag = parsed.value
    assert diag is not None
    assert (diag.dcgm_version, diag.driver_version) == ("3.3.8", "560.35.03")
    by_name = {t.name: t for t in diag.tests}
    memory = by_name["GPU Memory"]
    assert (memory.group, memory.kind, memory.result, memory.gpus) == ("Hardware", "memory", "fail", None)
    assert memory.could_not_run  # cuInit: 'system not yet initialized', not the memory
    assert [w.gpu for w in memory.warnings] == list(range(8))
    assert "Restart DCGM" in memory.warnings[0].text  # cut mid-word at the column, joined without a space
    assert "Unable to initialize CUDA library: 'system not yet initialized'" in memory.warnings[0].text
    assert (by_name["PCIe"].kind, by_name["PCIe"].result) == ("pcie", "skip")
    assert (by_name["Page Retirement/Row Remap"].kind, by_name["Denylist"].kind) == ("memory", "deployment")
    assert all(t.result == "pass" for t in diag.tests if t.group == "Deployment")
    assert diag.info[0].startswith("Persistence mode for GPU 0 is disabled. Enable persistence mode")
    # the negative case: a memory test that ran and found errors on one GPU is the hardware's (our own text in
    # the tool's layout: the corpus has no such run)
    failed = parse_dcgmi_diag(table(("GPU Memory", "Fail - GPU: 3"), ("Warning", "GPU 3 DBE errors detected: 2")))
    assert failed.value is not None
    (found,) = failed.value.tests
    assert (found.result, found.gpus, found.could_not_run, found.warnings[0].gpu) == ("fail", [3], False, 3)
    assert diag_kind("Targeted Power", "Stress") == "power"
    assert diag_kind("NVLink", "Integration") == "nvlink"
    assert diag_kind("Targeted Stress", "Stress") == "compute"
    assert parse_dcgmi_diag("Error: unable to connect to the host engine\n").value is None


def test_a_gpu_ticket_carries_the_diag_and_no_rule_reads_it(session: Session, tmp_path: Path) -> None:
    host = gpu_host(tmp_path, "0000:00:1e.0")
    host.file(DIAG_FILE, sample(H100_DIAG))
    xml = field(sample(A10G), "remapped_row_failure", "Yes")
    reports = cycles(host, xml, range(0, 10, 5))
    assert reports[-1].observations.gpu is not None
    diag = reports[-1].observations.gpu.diag
    assert diag is not None
    assert diag.first_seen is not None
    assert reports[0].observations.gpu is not None
    assert reports[0].observations.gpu.diag is not None
    assert diag.first_seen == reports[0].observations.gpu.diag.first_seen  # the same output: its first sight kept
    register(session, host)
    run(session, host, reports)
    (remediation,) = [r for r in remediations(session, host.hostname) if r.rule_id == "gpu-row-remap-failure"]
    ticket = to_ticket(session, remediation)
    assert ticket is not None
    evidence = ticket.evidence["dcgm_diag"]
    assert evidence["gpu_index"] == 0
    (memory,) = evidence["failed"]
    assert (memory["name"], memory["kind"], memory["could_not_run"]) == ("GPU Memory", "memory", True)
    assert len(memory["warnings"]) == 1  # GPU 0's only
    assert memory["warnings"][0].startswith("GPU 0 Error using CUDA API cuInit")
    assert "Denylist" in evidence["passed"]
    assert "PCIe" in evidence["skipped"]
    # evidence only: no rule of the default pack reads a diag signal
    assert not [r.id for r in load_ruleset([]).rules if "diag" in r.when.signal]


def test_without_the_file_no_diag(tmp_path: Path) -> None:
    host = gpu_host(tmp_path, "0000:00:1e.0")
    (report,) = cycles(host, sample(A10G), range(0, 1))
    assert report.observations.gpu is not None
    assert report.observations.gpu.diag is None


def _diag_path(tmp: Path) -> Path:
    (found,) = tmp.rglob("dcgmi-diag.txt")
    return found


def test_runs_appended_to_the_file_are_read_as_the_last_one_written_when_the_file_was(tmp_path: Path) -> None:
    """Review r4, finding 6: with `dcgmi diag >> FILE` an old Fail and a later Pass parsed into one diag whose
    tests had both results; the run's age reset whenever the agent's state was lost (the file's mtime now)."""
    host = gpu_host(tmp_path, "0000:00:1e.0")
    old = table(("GPU Memory", "Fail - GPU: 0"), ("Warning", "GPU 0 DBE errors detected: 2"))
    later = table(("GPU Memory", "Pass - All"))
    host.file(
        DIAG_FILE, f"Successfully ran diagnostic for group.\n{old}\nSuccessfully ran diagnostic for group.\n{later}\n"
    )
    written = dt.datetime(2026, 8, 30, 6, 0, tzinfo=dt.UTC)
    os.utime(_diag_path(tmp_path), (written.timestamp(), written.timestamp()))
    (report,) = cycles(host, sample(A10G), range(0, 1))
    assert report.observations.gpu is not None
    diag = report.observations.gpu.diag
    assert diag is not None
    assert [(t.name, t.result) for t in diag.tests] == [("GPU Memory", "pass")]
    assert diag.written_at == written


def test_a_gpu_without_an_index_or_swapped_since_the_run_is_credited_with_no_other_board_s_failure(
    tmp_path: Path,
) -> None:
    """Review r4, finding 6: a GPU whose index was not known got every GPU's failures; after a GPU swap the
    run's result at its index was another board's. Review r7, finding 4: by index, a renumbering (a GPU fallen
    off, the driver reloaded) credited the fallen board's failure to the board now at its index; the run's
    boards are now its serials, and a GPU is credited by its board."""
    diag = {
        "tests": [
            {"name": "GPU Memory", "result": "fail", "result_text": "Fail - GPU: 3", "gpus": [3], "warnings": []},
            {"name": "PCIe", "result": "fail", "result_text": "Fail - All", "gpus": None, "warnings": []},
        ],
        "run_serials": {"3": "B3", "4": "B4"},
    }

    def failed(part: dict[str, object], of: dict[str, object]) -> list[str]:
        found = dcgm_diag_of(part, {"gpu": {"diag": of}})
        assert found is not None
        return [t["name"] for t in found["failed"]]

    assert failed({}, diag) == ["PCIe"]  # All GPUs' only
    assert failed({"index": 3, "serial": "B3"}, diag) == ["GPU Memory", "PCIe"]
    # renumbered: B3 fell off the bus, B4 is index 3 now: not B3's failure
    assert failed({"index": 3, "serial": "B4"}, diag) == ["PCIe"]
    swapped = dcgm_diag_of({"index": 3, "serial": "NEW"}, {"gpu": {"diag": diag}})
    assert swapped is not None
    assert (swapped["failed"], swapped["replaced_since_run"]) == ([], True)
    # the run's boards not known (read late, an older agent): All GPUs' only, whatever the index
    assert failed({"index": 3, "serial": "B3"}, {**diag, "run_serials": None}) == ["PCIe"]


def _diag_of(report: Any) -> Any:
    assert report.observations.gpu is not None
    assert report.observations.gpu.diag is not None
    return report.observations.gpu.diag


def test_the_collector_keeps_the_run_s_boards_by_serial_and_its_identity_with_the_file_s_time(tmp_path: Path) -> None:
    """Review r7, finding 4: the board serial at index 0 changed after the output was first read: replaced;
    a byte-identical re-run written after the swap kept the old baseline (the same digest) and flagged the new
    board; a baseline taken long after the file was written (a lost agent state) was of the new boards."""
    host = gpu_host(tmp_path, "0000:00:1e.0")
    host.file(DIAG_FILE, sample(H100_DIAG))
    xml = sample(A10G)
    serial = re.search(r"<serial>([^<]*)</serial>", xml)
    assert serial is not None
    (before,) = cycles(host, xml, range(0, 1))
    assert (_diag_of(before).replaced_gpus, _diag_of(before).run_serials) == ([], {0: serial.group(1)})
    new_board = field(xml, "serial", serial.group(1) + "9")
    (after,) = cycles(host, new_board, range(5, 6))
    assert (_diag_of(after).replaced_gpus, _diag_of(after).run_serials) == ([0], {0: serial.group(1)})
    # the same table written again after the swap (a new mtime): a new run, of the board there now
    rerun = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=5)
    os.utime(_diag_path(tmp_path), (rerun.timestamp(), rerun.timestamp()))
    (again,) = cycles(host, new_board, range(6, 7))
    assert (_diag_of(again).replaced_gpus, _diag_of(again).run_serials) == ([], {0: serial.group(1) + "9"})
    # a run written a day before the agent first read it: the boards then are not known
    old = dt.datetime.now(dt.UTC) - dt.timedelta(days=1)
    os.utime(_diag_path(tmp_path), (old.timestamp(), old.timestamp()))
    (late,) = cycles(host, new_board, range(7, 8))
    assert (_diag_of(late).replaced_gpus, _diag_of(late).run_serials) == ([], None)
