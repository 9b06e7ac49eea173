"""`python -m api` is the `fleetfix` command.

Guarded: worker processes started with `spawn` (`rules backtest --workers`) import the main module
again, and must not run the command a second time.
"""

from api.cli import main

if __name__ == "__main__":
    main()
