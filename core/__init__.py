"""Shared foundation of fleetfix: settings, database base, Celery factory, clock.

Nothing here imports another fleetfix package; every stage may import this one.
"""
