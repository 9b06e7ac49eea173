"""The decision table of the default pack: for every rule, a scenario read from real tool output
through snapshots and the real ingest path, with the decision it must take and the wrong ones it
must not (docs/rules.md, "The default pack")."""
