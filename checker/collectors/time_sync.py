"""Clock synchronisation: chrony's tracking, else systemd's timedatectl.

`chronyc -c -n tracking` asks chronyd over its local socket (-n: no DNS look-up of the source's
name, which could hang on a host whose network is what broke its clock); `timedatectl show` asks
systemd-timedated over D-Bus. Each runs through the command runner with a short timeout: a wedged
daemon costs this collector at most that, never the cycle.
"""

from __future__ import annotations

from checker.collectors.context import Context, Unavailable, command_failure
from checker.parsers.time_sync import parse_chronyc_tracking, parse_timedatectl_show

CHRONYC = ["chronyc", "-c", "-n", "tracking"]
TIMEDATECTL = ["timedatectl", "show"]
TIMEOUT_S = 3.0


def collect(ctx: Context) -> None:
    chrony = ctx.run(CHRONYC, TIMEOUT_S)
    if not chrony.missing and chrony.returncode == 0 and chrony.stdout.strip():
        ctx.observations.time_sync = ctx.take(parse_chronyc_tracking(chrony.stdout), "chronyc", chrony.stdout)
        ctx.source = "chrony"
        return
    timedatectl = ctx.run(TIMEDATECTL, TIMEOUT_S)
    if not timedatectl.missing and timedatectl.returncode == 0 and timedatectl.stdout.strip():
        parsed = parse_timedatectl_show(timedatectl.stdout)
        ctx.observations.time_sync = ctx.take(parsed, "timedatectl", timedatectl.stdout)
        ctx.source = "timedatectl"
        if not chrony.missing:
            ctx.problem(f"chrony: {command_failure(chrony)}")
        return
    if chrony.missing and timedatectl.missing:
        raise Unavailable("neither chronyc nor timedatectl is installed: no time-sync daemon to ask")
    raise Unavailable("; ".join(command_failure(r) for r in (chrony, timedatectl) if not r.missing))
