"""What a rollout looks like to a person: its waves, the hosts each started and where they are, the
comparison of its health signals. The API and the pages show the same (api/routes/rollouts.py,
api/web/rollouts.py)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from remediator.models import Host, Remediation, RemediationState, Rollout
from remediator.rollouts import hosts_in_class, members
from remediator.rules import wave_limit

HOST_STATES = ("started", "verifying", "baking", "succeeded", "failed")


def host_state(remediation: Remediation, bake_s: float, now: dt.datetime) -> str:
    """started (planned, waiting or running its steps), verifying, baking (succeeded, within the bake),
    succeeded, or failed (failed or escalated)."""
    state = remediation.state
    if state == RemediationState.verifying:
        return "verifying"
    if state == RemediationState.succeeded:
        baked = remediation.finished_at is None or now >= remediation.finished_at + dt.timedelta(seconds=bake_s)
        return "succeeded" if baked else "baking"
    if state in (RemediationState.failed, RemediationState.escalated):
        return "failed"
    return "started"


def summary(rollout: Rollout, started: int, in_class: int) -> dict[str, Any]:
    return {
        "id": rollout.id,
        "rule_id": rollout.rule_id,
        "hardware_class": rollout.hardware_class,
        "change": rollout.change,
        "part_type": rollout.part_type,
        "state": rollout.state.value,
        "waves": list(rollout.waves),
        "current_wave": rollout.current_wave,
        "bake_s": rollout.bake_s,
        "hosts_started": started,
        "hosts_in_class": in_class,
        "halt_reason": rollout.halt_reason,
        "halted_at": rollout.halted_at,
        "halted_by": rollout.halted_by,
        "resumed_at": rollout.resumed_at,
        "ticket_id": rollout.ticket_id,
        "created_at": rollout.created_at,
        "updated_at": rollout.updated_at,
        "version": rollout.version,
    }


def listing(session: Session, state: str | None = None) -> list[dict[str, Any]]:
    """Every rollout, newest first, with how many hosts it started and its class's size."""
    query = select(Rollout).order_by(Rollout.id.desc())
    if state:
        query = query.where(Rollout.state == state)
    found = list(session.scalars(query))
    started = dict(
        session.execute(
            select(Remediation.rollout_id, func.count(func.distinct(Remediation.host_id)))
            .where(Remediation.rollout_id.in_([r.id for r in found]), Remediation.state != RemediationState.cancelled)
            .group_by(Remediation.rollout_id)
        ).all()
    )
    sizes = dict(
        session.execute(select(Host.hardware_class, func.count()).group_by(Host.hardware_class)).all()  # one query
    )
    return [summary(r, int(started.get(r.id, 0)), int(sizes.get(r.hardware_class, 0))) for r in found]


def detail(session: Session, rollout: Rollout, now: dt.datetime) -> dict[str, Any]:
    """The rollout with its waves (hosts per wave and their states) and its last comparison."""
    started = members(session, rollout)
    in_class = hosts_in_class(session, rollout.hardware_class)
    names = dict(session.execute(select(Host.id, Host.hostname).where(Host.id.in_([m.host_id for m in started]))).all())
    waves: list[dict[str, Any]] = []
    position = 0
    for index, wave in enumerate(rollout.waves):
        limit = min(wave_limit(wave, in_class), in_class) if in_class else 0
        taken = started[position : max(position, limit)]
        position += len(taken)
        hosts = [
            {
                "hostname": names.get(m.host_id, str(m.host_id)),
                "remediation_id": m.id,
                "state": host_state(m, rollout.bake_s, now),
                "started_at": m.created_at,
                "finished_at": m.finished_at,
            }
            for m in taken
        ]
        counts = {s: sum(1 for h in hosts if h["state"] == s) for s in HOST_STATES}
        waves.append({"index": index, "size": wave, "hosts_covered": limit, "hosts": hosts, "counts": counts})
    return {
        **summary(rollout, len(started), in_class),
        "waves_detail": waves,
        "comparison": list(rollout.comparison or []),
        "compared_at": rollout.compared_at,
    }
