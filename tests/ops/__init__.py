"""Deployment and operations: compose topology, health, metrics, logs, brokers."""
