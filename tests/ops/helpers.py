"""Reading log calls out of the source: the event name a call passes, for the checks that every log event
is named and that each stage emits only its own."""

from __future__ import annotations

import ast


def event_of(call: ast.Call) -> str | None:
    """The event name a logging call passes, with f-string parts standing in as `x`; None if not literal."""
    if not call.args:
        return None
    first = call.args[0]
    if isinstance(first, ast.Constant) and isinstance(first.value, str):
        return first.value
    if isinstance(first, ast.JoinedStr):
        return "".join(part.value if isinstance(part, ast.Constant) else "x" for part in first.values)
    return None
