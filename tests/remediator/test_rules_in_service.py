"""A ticket step's `in_service` (rule-pack format version 1 addition, docs/rules.md): a boolean, never
beside a drain, shown in the pack's table, and set on the default pack's tickets for owners only."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from remediator.rules import DEFAULT_PACK, RulePackError, load_pack
from remediator.rules_doc import plan_text

PACK = """\
version: 1
rules:
  - id: workload-test
    description: test rule
    when: {signal: isolated_cpu_tlb_rate, op: ">=", value: 1}
    plan:
      - action: ticket
        params: {in_service: true, part_type: workload}
"""

# The rules whose ticket goes to owners of software, configuration, a workload, a class: the host works on.
FOR_OWNERS = {
    "corrected-errors-ignored",
    "error-reporting-mode-mismatch",
    "ghes-edac-expects-cmci",
    "microcode-below-baseline",
    "errata-no-patched-kernel",
    "cputime-exceeds-elapsed",
    "isolated-core-tlb-shootdowns",
    "cxl-numa-balancing-tiering",
    "cxl-numa-balancing-off",
    "cxl-numa-balancing-unsupported",
    "cxl-interleave-default",
    "benchmark-class-below-expected",
}
PARTS = {
    "dimm", "disk", "psu", "fan", "nic", "cpu", "pcie", "pcie_device", "power", "power_feed", "airflow", "gpu",
    "nvswitch", "cxl_memory", "capacity",
}  # fmt: skip
# Part tickets that leave the host in service, each for a stated reason (issue 16's reviews): a part a
# technician replaces otherwise holds its host (docs/tickets.md).
PART_TICKETS_IN_SERVICE = {
    "sensor-critical-temperature": "airflow: the cause is usually outside the host (the rack's cooling)",
    "sel-temperature-high": "as sensor-critical-temperature, seen in the BMC's log",
    "thermal-throttling": "airflow: as above; past non-recoverable, sensor-critical-temperature-nr drains",
    "cpu-package-throttling": "airflow: as above",
    "nic-crc-errors": "a cable or optic, swapped while the host runs; the port's frames are retried",
    "nic-carrier-flapping-redundant": "the port's bond partner carries the traffic; swapped hot",
    "nic-link-flapping-redundant": "as nic-carrier-flapping-redundant, seen in the kernel log",
    "pcie-aer-uncorrected-in-service": "a configuration fault, a recovered error or a hot unplug",
    "cxl-poison-external": "the poison came from outside the device: nothing to replace",
    "cxl-aer-link": "a link or peer error: the device's memory is sound",
    "cxl-health-temperature": "heat: the device or its slot, else the airflow; its data is sound (a ticket naming it)",
    "cxl-health-temperature-critical": "as cxl-health-temperature, sooner",
    "cxl-device-error": "no memory in use was lost: a probe failure, a corrected error on a disabled memdev",
    "cxl-port-error": "a port's or its link's error, never a device's data (as cxl-aer-link)",
    "gpu-ecc-uncorrected": "the counter grew; the DBE and remap rules act on the GPU itself",
    "gpu-temperature-slowdown": "airflow or a fan: the GPU protects itself by slowing down",
    "gpu-hardware-slowdown": "power or cooling: the GPU protects itself by slowing down",
    "gpu-ecc-disabled": "a configuration fact of the class",
    "gpu-missing": "the host serves on its other GPUs; nothing it runs is at risk",
    "gpu-xid-reset-unnamed": "nvidia-smi does not list the GPU, so nothing can be reset; a person looks",
    "gpu-xid-contained-repeated": "contained errors: the driver stopped the application, the GPU serves on",
    "fan-degraded": "a fan still turning above its critical threshold: the others carry the load until the swap",
}


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "pack.yaml"
    path.write_text(text)
    return path


def test_in_service_loads_and_shows_in_the_plan(tmp_path: Path) -> None:
    [rule] = load_pack(write(tmp_path, PACK)).rules
    assert rule.plan[0].leaves_host_in_service
    assert plan_text(rule) == "ticket (in service)"
    [plain] = load_pack(write(tmp_path, PACK.replace("in_service: true, ", ""))).rules
    assert not plain.plan[0].leaves_host_in_service  # the default: today's behaviour, the host held
    assert plan_text(plain) == "ticket"


@pytest.mark.parametrize("value", ['"true"', "1", "yes please", "[true]"])
def test_a_value_that_is_not_a_boolean_is_refused_with_its_line(tmp_path: Path, value: str) -> None:
    path = write(tmp_path, PACK.replace("in_service: true", f"in_service: {value}"))
    with pytest.raises(RulePackError, match=r"pack\.yaml:\d+: rules\.0\.plan\.0: .*in_service must be true or false"):
        load_pack(path)


def test_a_drain_before_a_ticket_that_leaves_the_host_in_service_is_refused(tmp_path: Path) -> None:
    drained = PACK.replace("    plan:\n", "    plan:\n      - action: drain\n")
    with pytest.raises(RulePackError, match="drains the host cannot end in a ticket with in_service: true"):
        load_pack(write(tmp_path, drained))
    rung = "[{action: drain}, {action: ticket, params: {in_service: true}}]"
    in_a_rung = PACK + f"    escalation:\n      - plan: {rung}\n"
    with pytest.raises(RulePackError, match=r"rules\.0\.escalation\.0\.plan: .*drains the host"):
        load_pack(write(tmp_path, in_a_rung))


def test_fleetfix_rules_validate_refuses_it(tmp_path: Path) -> None:
    path = write(tmp_path, PACK.replace("in_service: true", 'in_service: "no"'))
    done = subprocess.run(
        [sys.executable, "-m", "api", "rules", "validate", str(path)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 1
    assert "in_service must be true or false" in done.stderr


def test_the_default_pack_leaves_hosts_in_service_only_for_owners() -> None:
    tickets = [
        (rule.id, step)
        for rule in load_pack(DEFAULT_PACK).rules
        for plan in (rule.plan, *(rung.plan for rung in rule.escalation))
        for step in plan
        if step.action == "ticket"
    ]
    in_service = {rule_id for rule_id, step in tickets if step.leaves_host_in_service}
    assert in_service >= FOR_OWNERS, FOR_OWNERS - in_service  # (others may join, never a part's)
    for rule_id, step in tickets:  # a part a technician replaces takes the host, but for the reasons listed
        if step.params.get("part_type") in PARTS and rule_id not in PART_TICKETS_IN_SERVICE:
            assert not step.leaves_host_in_service, rule_id
    stale = {rule_id for rule_id in PART_TICKETS_IN_SERVICE if not any(
        r == rule_id and step.leaves_host_in_service for r, step in tickets
    )}  # fmt: skip
    assert not stale, stale  # an exception no rule needs any more goes
