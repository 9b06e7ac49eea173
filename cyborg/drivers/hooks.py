"""Drain and undrain: take a host out of its workload scheduler before a disruptive action and put
it back after verification, through a hook configured per cluster (FLEETFIX_SCHEDULER_HOOKS).

A hook is an argv template ({hostname} {cluster} {remediation_id} {action} are filled in; never a
shell string) or a URL that is POSTed a JSON body with the same fields. A non-zero exit or a
non-2xx answer fails the step. A cluster with no hook (and no `*` hook) is a recorded no-op.
"""

from __future__ import annotations

from typing import Any

import httpx

from cyborg.commands import ActionContext, ActionFailed, excerpt

HOOK_TIMEOUT_S = 60.0


def hook_for(hooks: dict[str, dict[str, str | list[str]]], cluster: str, action: str) -> str | list[str] | None:
    for key in (cluster, "*"):
        found = hooks.get(key, {}).get(action)
        if found:
            return found
    return None


def run_hook(
    hook: str | list[str], ctx: ActionContext, *, hostname: str, cluster: str, remediation_id: int, action: str
) -> dict[str, Any]:
    values = {"hostname": hostname, "cluster": cluster, "remediation_id": str(remediation_id), "action": action}
    if isinstance(hook, list):
        argv = []
        for part in hook:
            for name, value in values.items():
                part = part.replace("{" + name + "}", value)
            argv.append(part)
        output = ctx.must(argv, timeout_s=HOOK_TIMEOUT_S)
        return {"hook": "command", "argv": argv, "output": excerpt(output, 500)}
    body = {**values, "remediation_id": remediation_id}
    if ctx.dry_run:
        ctx.note(f"POST {hook}", "not sent (dry run)", kind="dry_run")
        return {"hook": "webhook", "url": hook}
    try:
        response = httpx.post(hook, json=body, timeout=min(HOOK_TIMEOUT_S, max(1.0, ctx.remaining())))
    except httpx.HTTPError as error:
        ctx.note(f"POST {hook}", str(error), kind="run")
        raise ActionFailed(f"{action} hook {hook}: {error}") from None
    ctx.log.add_http(hook, response.status_code, response.text)
    if not response.is_success:
        raise ActionFailed(f"{action} hook {hook} answered {response.status_code}")
    return {"hook": "webhook", "url": hook, "status": response.status_code}
