"""What `fleetfix rules backtest` prints and writes: a table per rule, a summary, JSON and CSV files.

The tables are rich's (the library core/progress.py already uses for the progress bar), written to
stdout at a fixed width when stdout is no terminal, so a pipe or a file gets whole lines rather than
rows wrapped at rich's default of 80 columns. The JSON document lists every rule of the rule set,
hits or not (a script asking "what would rule X have done" finds X either way); the CSV is one row per
hit, the shape a spreadsheet or `sort | uniq -c` wants.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import Any, TextIO

from remediator.backtest import BacktestResult, Hit
from remediator.rules import Rule, RuleSet

CSV_COLUMNS = ("rule_id", "hostname", "first_at", "last_at", "firings", "subject", "peak")
PIPE_WIDTH = 200  # columns of the tables when stdout is no terminal
# Below this many reports one process is quicker: starting a worker (a fresh interpreter importing the
# remediator) costs about a second, what one process replays in that time (docs/performance.md).
AUTO_WORKERS_FROM = 20_000


def _hit_doc(hit: Hit) -> dict[str, Any]:
    return {
        "hostname": hit.hostname,
        "first_at": hit.first_at.isoformat(),
        "last_at": hit.last_at.isoformat(),
        "firings": hit.firings,
        "subject": hit.subject,
        "peak": hit.peak,
    }


def result_doc(result: BacktestResult, ruleset: RuleSet, *, elapsed_s: float) -> dict[str, Any]:
    """The whole result as one JSON document (docs/rules.md, "Backtest" describes it)."""
    grouped = result.by_rule()
    return {
        "since": result.since.isoformat(),
        "hosts": result.hosts,
        "rows": result.rows,
        "reports": result.reports,
        "elapsed_s": round(elapsed_s, 3),
        "rules": [
            {
                "id": rule.id,
                "hosts": len(grouped.get(rule.id, [])),
                "hits": [_hit_doc(hit) for hit in grouped.get(rule.id, [])],
            }
            for rule in ruleset.rules
        ],
    }


def write_json(path: Path, result: BacktestResult, ruleset: RuleSet, *, elapsed_s: float) -> None:
    path.write_text(json.dumps(result_doc(result, ruleset, elapsed_s=elapsed_s), indent=2) + "\n", encoding="utf-8")


def write_csv(path: Path, result: BacktestResult) -> None:
    with path.open("w", encoding="utf-8", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(CSV_COLUMNS)
        for hit in result.hits:
            at = (hit.first_at.isoformat(), hit.last_at.isoformat())
            writer.writerow([hit.rule_id, hit.hostname, *at, hit.firings, hit.subject, repr(hit.peak)])


def shown_rules(ruleset: RuleSet, tried: set[str], result: BacktestResult) -> list[Rule]:
    """The rules whose table is printed: each rule of the packs under test, hit or not, and any other
    rule (the default pack's) that hit a host. The rest are counted in the summary."""
    hit = {h.rule_id for h in result.hits}
    return [rule for rule in ruleset.rules if rule.id in tried or rule.id in hit]


def print_report(
    result: BacktestResult, ruleset: RuleSet, tried: set[str], *, elapsed_s: float, stream: TextIO | None = None
) -> None:
    """A table per rule shown (shown_rules), then the summary."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    out = stream if stream is not None else sys.stdout
    console = Console(file=out, width=None if out.isatty() else PIPE_WIDTH, highlight=False, soft_wrap=False)
    grouped = result.by_rule()
    shown = shown_rules(ruleset, tried, result)
    for rule in shown:
        hits = grouped.get(rule.id, [])
        console.print(f"{rule.id}: {len(hits)} host(s)", markup=False)
        if not hits:
            continue
        table = Table(box=box.SIMPLE, show_edge=False, pad_edge=False)
        for name in ("host", "first", "last"):
            table.add_column(name, no_wrap=True)
        table.add_column("firings", justify="right", no_wrap=True)
        table.add_column("subject", no_wrap=True)
        table.add_column("peak", justify="right", no_wrap=True)
        for hit in hits:
            table.add_row(
                hit.hostname,
                hit.first_at.isoformat(timespec="seconds"),
                hit.last_at.isoformat(timespec="seconds"),
                str(hit.firings),
                hit.subject,
                f"{hit.peak:.3g}",
            )
        console.print(table)
    fired = {h.rule_id for h in result.hits}
    silent = len(ruleset.rules) - len({r.id for r in shown} | fired)
    rate = result.reports / elapsed_s * 60 if elapsed_s > 0 else 0.0
    console.print(
        f"replayed {result.reports} reports ({result.rows} stored rows) of {result.hosts} hosts since "
        f"{result.since.isoformat(timespec='seconds')} in {elapsed_s:.1f} s ({rate:,.0f} reports/min)",
        markup=False,
    )
    hosts_hit = len({h.hostname for h in result.hits})
    console.print(
        f"{len(fired)} of {len(ruleset.rules)} rules would have fired, on {hosts_hit} host(s); "
        f"{silent} other rules hit no host (not listed)",
        markup=False,
    )
