"""The default pack as the Markdown table of docs/rules.md: what each rule fires on, what it plans,
and why — its source and what would make it wrong. `fleetfix rules doc` prints it; a test keeps the
document equal to it, so the documentation cannot drift from the pack.
"""

from __future__ import annotations

from remediator.rules import Condition, Rule, RulePack, Step


def _number(value: float) -> str:
    return f"{value:g}"


def condition_text(when: Condition) -> str:
    text = f"`{when.signal} {when.op} {_number(when.value)}`"
    extras = []
    if when.below is not None:
        extras.append(f"below {_number(when.below)}")
    if when.subject_pattern:
        extras.append(f"subject `{when.subject_pattern}`")
    for key, wanted in when.detail_matches.items():
        extras.append(f"{key} in {'/'.join(wanted)}")
    if when.window_s:
        extras.append(f"{when.aggregate} over {_duration(when.window_s)}")
    if when.for_s:
        extras.append(f"for {_duration(when.for_s)}")
    return text + (f" ({'; '.join(extras)})" if extras else "")


def _duration(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)} {unit}"
    return f"{_number(seconds)} s"


def plan_text(rule: Rule) -> str:
    rungs = [rule.plan, *(rung.plan for rung in rule.escalation)]
    return " → ".join(" + ".join(_step_text(step) for step in plan) for plan in rungs)


def _step_text(step: Step) -> str:
    if step.action == "power_cycle" and step.params.get("if_off", "refuse") != "refuse":
        return f"power_cycle (if_off: {step.params['if_off']})"  # what it does to a host found off (review r2 13)
    return "ticket (in service)" if step.leaves_host_in_service else step.action


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def table(pack: RulePack) -> str:
    """The Markdown table of a pack's rules, in pack order."""
    lines = [
        "| rule | fires on | plan, then escalation | priority | source | wrong if |",
        "|---|---|---|---|---|---|",
    ]
    for rule in pack.rules:
        lines.append(
            f"| `{rule.id}` | {_cell(condition_text(rule.when))} | {plan_text(rule)} | {rule.priority} "
            f"| {_cell(rule.source) or '—'} | {_cell(rule.wrong_if) or '—'} |"
        )
    return "\n".join(lines) + "\n"
