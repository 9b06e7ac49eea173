"""Slack Block Kit messages for grouped alerts: what happened, how many, a few examples with links.

A message holds every alert of one channel in a window. Of one kind, it reads as that kind
("20 repair tickets opened in ams1"); of several, the header counts them ("41 alerts in ams1"),
the notification text names each kind, and each kind gets its own part, the most urgent first.

Block Kit reference: https://api.slack.com/reference/block-kit/blocks (header text at most
150 characters, section text at most 3000); mrkdwn escaping of &, < and > per
https://api.slack.com/reference/surfaces/formatting#escaping.
"""

from __future__ import annotations

import datetime as dt
from typing import Any
from urllib.parse import quote

from core.vocabulary import AlertKind, AlertSeverity
from ticketing.notify.models import AlertDelivery

EXAMPLES = 5
"""Alerts of each kind shown by name in a grouped message; the rest are counted."""

TITLES: dict[AlertKind, tuple[str, str]] = {
    AlertKind.ticket_opened: ("Repair ticket opened", "{n} repair tickets opened"),
    AlertKind.remediation_failed: ("Remediation failed", "{n} remediations failed"),
    AlertKind.remediation_escalated: ("Remediation handed to a technician", "{n} remediations handed to technicians"),
    AlertKind.rule_paused: ("Rule paused by its breaker", "{n} rules paused by their breakers"),
    AlertKind.approval_waiting: ("Remediation waiting for approval", "{n} remediations waiting for approval"),
    AlertKind.host_unreachable: ("Host unreachable", "{n} hosts unreachable"),
}
MARKS = {
    AlertSeverity.critical: ":red_circle:",
    AlertSeverity.warning: ":large_orange_circle:",
    AlertSeverity.info: ":large_blue_circle:",
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


def example_of(
    object_type: str, object_id: str, hostname: str, datacenter: str, summary: str, kind: AlertKind
) -> dict[str, str]:
    return {
        "kind": kind.value,
        "object_type": object_type,
        "object_id": object_id,
        "hostname": hostname,
        "datacenter": datacenter,
        "summary": summary[:300],
    }


def _where(datacenters: dict[str, int]) -> str:
    named = [name for name in datacenters if name]
    if len(named) == 1:
        return f" in {named[0]}"
    if named:
        return f" in {len(named)} datacenters"
    return ""


def title(kind: AlertKind, count: int, datacenters: dict[str, int]) -> str:
    single, plural = TITLES[kind]
    return (single if count == 1 else plural.format(n=count)) + _where(datacenters)


def kinds_of(delivery: AlertDelivery) -> list[tuple[AlertKind, int]]:
    """The kinds in a message with their counts, its lead (most urgent) kind first."""
    counts: dict[str, int] = delivery.digest.get("kinds") or {delivery.kind.value: delivery.count}
    order = list(AlertKind)
    found = [(AlertKind(name), n) for name, n in counts.items() if n]
    return sorted(found, key=lambda item: (item[0] != delivery.kind, order.index(item[0])))


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


def _lines(kind: AlertKind, count: int, examples: list[dict[str, str]], public_url: str) -> list[str]:
    lines = [_line(kind, example, public_url) for example in examples]
    if count > len(examples):
        lines.append(f"…and {count - len(examples)} more")
    return lines


def build(delivery: AlertDelivery, public_url: str) -> dict[str, Any]:
    """The message body (text fallback and blocks) for a delivery; the sender adds the channel."""
    examples: list[dict[str, str]] = delivery.digest.get("examples", [])
    datacenters: dict[str, int] = delivery.digest.get("datacenters", {})
    kinds = kinds_of(delivery)
    parts: list[tuple[str, list[str]]] = []
    for kind, count in kinds:
        own = [example for example in examples if example.get("kind", delivery.kind.value) == kind.value]
        parts.append((title(kind, count, {}), _lines(kind, count, own, public_url)))
    if len(kinds) == 1:
        headline = fallback = title(delivery.kind, delivery.count, datacenters)
        sections = [parts[0][1]]
    else:
        # the header counts them (Slack cuts headers at 150 characters); the notification's text names each kind
        headline = f"{delivery.count} alerts{_where(datacenters)}"
        fallback = f"{headline}: " + ", ".join(part_title[0].lower() + part_title[1:] for part_title, _ in parts)
        sections = [[f"*{escape(part_title)}*", *lines] for part_title, lines in parts]
    if len([name for name in datacenters if name]) > 1:
        spread = ", ".join(f"{escape(name)}: {n}" for name, n in sorted(datacenters.items(), key=lambda i: -i[1]))
        sections[-1].append(f"By datacenter: {spread[:500]}")
    context = f"{MARKS[delivery.severity]} {delivery.severity.value} · {_window(delivery.first_at, delivery.last_at)}"
    blocks: list[dict[str, Any]] = [{"type": "header", "text": {"type": "plain_text", "text": headline[:150]}}]
    blocks += [{"type": "section", "text": {"type": "mrkdwn", "text": "\n".join(lines)[:3000]}} for lines in sections]
    blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": context}]})
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
    return {"text": f"{fallback} ({delivery.severity.value})", "blocks": blocks}
