"""Stores: the ``Store`` protocol every backend implements (``base``), the in-memory store
and the durable SQLite store (its schema, its group-committing writer thread, its
checkpoints). A store knows records, not actors: it builds on the core only.
"""
