"""Slack Block Kit messages for grouped alerts: what happened, how many, a few examples with links.

Block Kit reference: https://api.slack.com/reference/block-kit/blocks (header text at most
150 characters, section text at most 3000); mrkdwn escaping of &, < and > per
https://api.slack.com/reference/surfaces/formatting#escaping.
"""

from __future__ import annotations

import datetime as dt
from typing import Any
from urllib.parse import quote

from ticketing.notify.models import AlertDelivery, AlertKind, Severity

EXAMPLES = 5
"""Alerts shown by name in a grouped message; the rest are counted."""

TITLES: dict[AlertKind, tuple[str, str]] = {
    AlertKind.ticket_opened: ("Repair ticket opened", "{n} repair tickets opened"),
    AlertKind.remediation_failed: ("Remediation failed", "{n} remediations failed"),
    AlertKind.remediation_escalated: ("Remediation handed to a technician", "{n} remediations handed to technicians"),
    AlertKind.rule_paused: ("Rule paused by its breaker", "{n} rules paused by their breakers"),
    AlertKind.approval_waiting: ("Remediation waiting for approval", "{n} remediations waiting for approval"),
    AlertKind.host_unreachable: ("Host unreachable", "{n} hosts unreachable"),
}
MARKS = {
    Severity.critical: ":red_circle:",
    Severity.warning: ":large_orange_circle:",
    Severity.info: ":large_blue_circle:",
}


def page_path(kind: AlertKind, example: dict[str, str]) -> str | None:
    """The UI page where a person sees (or acts on) what an alert names."""
    key = quote(example["object_id"], safe="")
    match example["object_type"]:
        case "host":
            return f"/hosts/{key}"
        case "ticket":
            return f"/tickets/{key}"
        case "rule":
            return f"/rules#rule-{key}"
        case "remediation" if kind == AlertKind.approval_waiting:
            return f"/approvals#approval-{key}"
        case "remediation" if example.get("hostname"):
            return f"/hosts/{quote(example['hostname'], safe='')}#remediation-{key}"
        case "remediation":
            return f"/remediations/{key}"
    return None


def escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def page_url(public_url: str, kind: AlertKind, example: dict[str, str]) -> str | None:
    path = page_path(kind, example)
    return public_url.rstrip("/") + path if path else None


def example_of(object_type: str, object_id: str, hostname: str, datacenter: str, summary: str) -> dict[str, str]:
    return {
        "object_type": object_type,
        "object_id": object_id,
        "hostname": hostname,
        "datacenter": datacenter,
        "summary": summary[:300],
    }


def title(kind: AlertKind, count: int, datacenters: dict[str, int]) -> str:
    single, plural = TITLES[kind]
    text = single if count == 1 else plural.format(n=count)
    named = [name for name in datacenters if name]
    if len(named) == 1:
        text += f" in {named[0]}"
    elif named:
        text += f" in {len(named)} datacenters"
    return text


def _label(example: dict[str, str]) -> str:
    if example["object_type"] == "host":
        return example["object_id"]
    name = f"{example['object_type']} {example['object_id']}"
    return f"{name} ({example['hostname']})" if example.get("hostname") else name


def _line(kind: AlertKind, example: dict[str, str], public_url: str) -> str:
    url = page_url(public_url, kind, example)
    label = escape(_label(example))
    text = f"<{url}|{label}>" if url else label
    if example.get("datacenter"):
        text += f" · {escape(example['datacenter'])}"
    if example.get("summary"):
        text += f" — {escape(example['summary'][:200])}"
    return f"• {text}"


def _window(first: dt.datetime, last: dt.datetime) -> str:
    start = first.astimezone(dt.UTC)
    if last - first < dt.timedelta(seconds=1):
        return start.strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"{start:%Y-%m-%d %H:%M:%S} to {last.astimezone(dt.UTC):%H:%M:%S} UTC"


def build(delivery: AlertDelivery, public_url: str) -> dict[str, Any]:
    """The message body (text fallback and blocks) for a delivery; the sender adds the channel."""
    examples: list[dict[str, str]] = delivery.digest.get("examples", [])
    datacenters: dict[str, int] = delivery.digest.get("datacenters", {})
    headline = title(delivery.kind, delivery.count, datacenters)
    lines = [_line(delivery.kind, example, public_url) for example in examples]
    if delivery.count > len(examples):
        lines.append(f"…and {delivery.count - len(examples)} more")
    if len([name for name in datacenters if name]) > 1:
        spread = ", ".join(f"{escape(name)}: {n}" for name, n in sorted(datacenters.items(), key=lambda i: -i[1]))
        lines.append(f"By datacenter: {spread[:500]}")
    context = f"{MARKS[delivery.severity]} {delivery.severity.value} · {_window(delivery.first_at, delivery.last_at)}"
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": headline[:150]}},
        {"type": "section", "text": {"type": "mrkdwn", "text": "\n".join(lines)[:3000]}},
        {"type": "context", "elements": [{"type": "mrkdwn", "text": context}]},
    ]
    if delivery.count == 1 and examples:
        url = page_url(public_url, delivery.kind, examples[0])
        if url:
            blocks.append(
                {
                    "type": "actions",
                    "elements": [
                        {"type": "button", "text": {"type": "plain_text", "text": "Open in fleetfix"}, "url": url}
                    ],
                }
            )
    return {"text": f"{headline} ({delivery.severity.value})", "blocks": blocks}
