"""What the review of the memory pages class changed in the shared policies: a page's soft offline is neither
work on the host for other rules' cooldowns nor a remediation for the flap guard (remediator.safety), a
per-page rule's returned fault is that page's (remediator.policies), and a ticket step's `part` template
(remediator.rules, remediator.repairs). Each test failed on the code before the review's fixes."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from remediator import host_evaluation, planning, policies, repairs, safety
from remediator.evaluate import Firing
from remediator.models import Host, Remediation, RemediationState, StepState
from remediator.rules import Condition, PackSafety, Rule, RuleSafety, Step, load_pack
from remediator.signals import SignalValue
from tests.builders.policies import EVIDENCE, host, rule
from tests.builders.reports import T0, edac_report

DIMM = "CPU_SrcID#0_Ha#0_Chan#2_DIMM#0"


def page_rule() -> Rule:
    return Rule(
        id="page-ce-soft-offline",
        description="d",
        when=Condition(signal="page_ce_count", value=10),
        plan=[Step(action="soft_offline_page")],
        escalation=[{"plan": [Step(action="ticket", params={"part_type": "dimm", "part": "{detail.dimm}"})]}],
        safety=RuleSafety(cooldown=0, settle=0),
    )


def offlined(session: Session, on: Host, page: str, *, ago: dt.timedelta = dt.timedelta(hours=1)) -> Remediation:
    evidence = {"signal": {"kind": "page_ce_count", "subject": page, "value": 10.0, "detail": {"dimm": DIMM}}}
    steps = [Step(action="soft_offline_page")]
    made = planning.create(session, on, page_rule(), steps, evidence, "page", 0, None, T0 - ago)
    assert made is not None
    made.state, made.finished_at = RemediationState.succeeded, T0 - ago
    made.steps[0].started_at = made.steps[0].finished_at = T0 - ago
    made.steps[0].state = StepState.succeeded
    session.flush()
    return made


def test_a_page_offline_is_not_work_on_the_host_for_another_rules_cooldown(session: Session) -> None:
    h0 = host(session)
    offlined(session, h0, "0x849923000")
    ppr = rule(["hard_ppr"], rule_id="dimm-ce-ppr", safety=RuleSafety(cooldown="1d", settle=0))
    assert safety.cooldown(session, h0, ppr, T0) is None


def test_page_offlines_are_not_counted_by_the_flap_guard(session: Session) -> None:
    h0 = host(session)
    limits = PackSafety(spacing=0, flap_max=3)
    for n in range(3):
        offlined(session, h0, f"0x{0x849923000 + n * 0x10000:x}", ago=dt.timedelta(hours=3 - n))
    assert safety.flapping(session, h0, limits, T0) == 0
    other = planning.create(session, h0, rule(), [Step(action="reboot")], EVIDENCE, "other", 0, None, T0)
    assert other is not None
    session.flush()
    assert safety.flapping(session, h0, limits, T0) == 1


def test_a_per_page_rule_returns_only_on_the_same_page(session: Session) -> None:
    h0 = host(session)
    first = offlined(session, h0, "0x849923000")
    assert policies.returned_fault(session, h0, page_rule(), T0, "0x849963000") is None
    assert policies.returned_fault(session, h0, page_rule(), T0, "0x849923000") is first
    host_wide = rule(rule_id="page-ce-soft-offline").model_copy(
        update={"when": Condition(signal="kernel_event_count", value=1)}
    )  # a rule on a host-wide signal: any subject is the fault returning, as before
    assert policies.returned_fault(session, h0, host_wide, T0, "anything") is first
    about_a_dimm = rule(["hard_ppr"], rule_id="page-ce-soft-offline")  # on dimm_ce_rate, fixed per DIMM
    assert policies.returned_fault(session, h0, about_a_dimm, T0, "anything") is None


def test_a_ticket_part_template_keys_the_ticket_by_the_signals_detail() -> None:
    signal = SignalValue("page_ce_count", "0x849923000", 10.0, {"dimm": DIMM})
    assert repairs.named_part(Firing(page_rule(), signal), "h0") == DIMM
    bare = SignalValue("page_ce_count", "0x849923000", 10.0, {})
    assert repairs.named_part(Firing(page_rule(), bare), "h0") is None  # the detail lacks it: the subject


@pytest.mark.parametrize(
    ("part", "error"),
    [
        ("5", "ticket param part must be non-empty text"),
        ("host", None),
        ('"{detail.dimm}"', None),
        ('"{hostname}:{subject}"', None),
        ("{detail.dimm}", "ticket param part must be non-empty text"),  # unquoted, YAML reads a mapping
        ('"{value}"', "ticket param part may name"),
        ("''", "ticket param part must be non-empty text"),
        ("[a]", "ticket param part must be non-empty text"),
    ],
)
def test_a_ticket_part_is_checked_on_load(tmp_path: Path, part: str, error: str | None) -> None:
    text = f"""
version: 1
rules:
  - id: r
    description: d
    when: {{signal: dimm_ue, op: ">=", value: 1}}
    plan:
      - action: ticket
        params: {{part_type: dimm, part: {part}}}
"""
    path = tmp_path / "pack.yaml"
    path.write_text(text)
    if error is None:
        load_pack(path)
        return
    with pytest.raises(Exception, match=error):
        load_pack(path)


def test_the_dimms_offlined_pages_are_asked_even_when_the_derivation_is_skipped(session: Session) -> None:
    """A report the deriver skips (older than the newest derived: memory unchanged) still carries the DIMM's count
    while pages are tracked, so a firing held once is asked again. Failed before: asked only on a changed memory."""
    h0 = host(session, "web-001")
    for n in range(3):
        made = offlined(session, h0, f"0x{0x849923000 + n * 0x10000:x}")
        made.steps[0].result = {
            "boot_id_before": "boot-1",
            "changed": {"address": made.subject, "offlined": True, "already_offlined": False},
        }
    session.flush()
    hour = int(T0.timestamp()) // 3600
    later = (T0 + dt.timedelta(hours=1)).isoformat()
    memory = {"derive": {"v": 1, "at": later, "pages": {"pages": {"0x849963000": {"hours": [[hour, 3]]}}}}}
    signals = host_evaluation.report_signals(h0, edac_report("web-001", at=T0), memory)
    (dimm,) = [s for s in signals if s.kind == "dimm_offlined_pages"]
    assert (dimm.subject, dimm.value) == (DIMM, 3.0)
