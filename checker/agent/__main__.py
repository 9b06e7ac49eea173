"""`python -m checker.agent` is the `fleetfix-agent` command."""

from checker.agent.cli import main

main()
