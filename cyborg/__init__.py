"""Cyborg: carries out the fixes the remediator plans, on the host itself, and reports what it ran.

`actions` is the allow-list (each action's parameters, time budget and whether it is safe to run
twice), `envelope` signs and verifies the action envelopes the central service sends on
`host.<hostname>`, `drivers` turn an action into commands (real argv builders, and a simulated
driver acting on the simulated fleet), `host` is the executor in the agent. Nothing here touches
the database: the remediator calls in from the central side. See docs/cyborg.md.
"""
