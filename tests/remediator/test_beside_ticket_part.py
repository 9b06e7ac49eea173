"""A ticket opened beside a running remediation is keyed by the same part as the runner's and
route_detection's (the second review of issue 16: a GPU's beside ticket was keyed by the raw subject,
and a template whose detail the signal lacked by its literal text)."""

from __future__ import annotations

from remediator.decisions import template_values
from remediator.gpu_parts import ticket_part
from remediator.preemption import _ticket_key_part


def values(subject: str, detail: dict[str, object]) -> dict[str, object]:
    return template_values("gpu-1", "rule", subject, 1.0, detail)


def test_a_gpu_beside_ticket_is_keyed_by_the_gpus_one_address_form() -> None:
    subject = "gpu0 00000000:19:00.0"
    part = _ticket_key_part(None, "gpu", subject, values(subject, {}))
    assert part == ticket_part("gpu", subject) == "0000:19:00.0"


def test_a_template_the_signal_cannot_fill_falls_back_to_the_subject_not_its_text() -> None:
    part = _ticket_key_part("{detail.dimm}", "dimm", "0x849923000", values("0x849923000", {}))
    assert part == "0x849923000"
    filled = _ticket_key_part("{detail.dimm}", "dimm", "0x849923000", values("0x849923000", {"dimm": "A1"}))
    assert filled == "A1"


def test_a_literal_part_is_kept() -> None:
    assert _ticket_key_part("host", "airflow", "package 0", values("package 0", {})) == "host"
