"""JSON routes under /api/v1."""
