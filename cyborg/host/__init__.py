"""Cyborg on the host: the executor the agent runs for signed action envelopes, and its journal.

Kept free of the database, the web stack and every central package (an import-linter contract).
"""
