"""Alembic environment and run-once revisions (installed as pymemdb.migrations)."""
