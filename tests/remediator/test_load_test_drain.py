"""The centre tells a load test whether the host is drained: through the runner, the envelope's `drained`
is true only when the cluster's drain hook ran before it (remediator.draining, cyborg.central.issuing), and
the host answers the gap when it is false."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from core.settings import Settings
from remediator import host_results, runner
from remediator.models import StepState
from tests.builders.remediations import plan, result, sent_envelopes
from tests.builders.reports import T0


def test_a_drain_hook_that_ran_is_what_the_envelope_confirms(
    session: Session, cyborg_installed: dict[str, Any], settings: Settings
) -> None:
    settings.scheduler_hooks = {"*": {"drain": ["/bin/echo", "drained", "{hostname}"]}}
    rs, remediation = plan(session, ["verify_memory_under_load"], escalation=[["ticket"]])
    runner.advance(session, remediation.id, ruleset=rs, now=T0)
    assert remediation.evidence["drain"]["outcome"] == "succeeded"
    [envelope] = sent_envelopes(session)
    assert envelope["params"]["drained"] is True


def test_no_drain_hook_is_no_drain_and_the_step_fails_as_a_gap(
    session: Session, cyborg_installed: dict[str, Any], settings: Settings
) -> None:
    settings.scheduler_hooks = {}
    rs, remediation = plan(session, ["verify_memory_under_load"], escalation=[["ticket"]])
    runner.advance(session, remediation.id, ruleset=rs, now=T0)
    assert "skipped" in remediation.evidence["drain"]  # recorded as a no-op: nothing drained the host
    [envelope] = sent_envelopes(session)
    assert envelope["params"]["drained"] is False
    gap = "host not drained: load test not run (the host's memory not verified: no scheduler drain confirmed …)"
    report = result(envelope, "failed", error=f"verification gap: {gap}", changed={"verdict": "gap", "gap": gap})
    assert host_results.record_host_result(session, report, rs, T0) == "failed"
    assert remediation.steps[0].state == StepState.failed
    assert remediation.evidence["gaps"] == [{"step": 0, "action": "verify_memory_under_load", "gap": gap}]
