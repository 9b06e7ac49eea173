"""`python -m api` is the `fleetfix` command."""

from api.cli import main

main()
