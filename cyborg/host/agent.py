"""Building the executor of a `fleetfix agent` process from its config (FLEETFIX_AGENT_*)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from cyborg.commands import LiveSystem
from cyborg.drivers.base import Driver
from cyborg.envelope import load_verifier
from cyborg.host.executor import CeleryReporter, HostExecutor
from cyborg.host.journal import JOURNAL_FILE, Journal

if TYPE_CHECKING:
    from checker.agent.worker import CheckLoop

log = logging.getLogger(__name__)


def executor_for_agent(loop: CheckLoop) -> HostExecutor:
    config = loop.config
    verifier = load_verifier(config.action_public_key) if config.action_public_key else None
    if verifier is None:
        log.warning("cyborg.agent.no_key", extra={"fields": {"why": "FLEETFIX_AGENT_ACTION_PUBLIC_KEY unset"}})
    driver: Driver
    if config.driver == "simulated":
        from cyborg.drivers.simulated import SimulatedDriver

        if loop.simulated is None:
            raise RuntimeError("driver=simulated but the agent has no virtual host")
        driver = SimulatedDriver(
            loop.simulated, lock=loop.sim_lock, time_scale=config.simulate_time_scale, state_dir=loop.state_dir
        )
    else:
        from cyborg.drivers.linux import LinuxDriver

        driver = LinuxDriver(
            LiveSystem(),
            warm_reboot=config.warm_reboot,
            firmware_tools=config.firmware_tools,
            ppr_tool=config.ppr_tool,
            work_dir=loop.state_dir,
            firmware_dir=config.firmware_dir,
        )
    journal = Journal(loop.state_dir / JOURNAL_FILE if loop.state_dir else None)
    if loop.state_dir is None:
        # The executor refuses real actions (`no_journal`): without the journal on disk it could run one twice.
        log.error("cyborg.agent.journal_in_memory", extra={"fields": {"why": loop.state_problem}})
    token = config.http_token
    if not token:
        log.warning("cyborg.agent.unsigned", extra={"fields": {"why": "no FLEETFIX_AGENT_TOKEN: results go unsigned"}})
    return HostExecutor(
        loop.hostname,
        verifier=verifier,
        driver=driver,
        journal=journal,
        reporter=CeleryReporter(loop.app, hostname=loop.hostname, token=token),
        allowed=config.allowed_actions,
        system=LiveSystem() if config.driver == "linux" else None,
    )
