"""Alembic environment for pymemdb.

The installer (pymemdb.install) hands us either a live SQLAlchemy connection
(`config.attributes["connection"]`) or, for `pymemdb init --sql`, runs us in
offline mode so every revision is printed as plain SQL for psql.
"""

from __future__ import annotations

from alembic import context

VERSION_TABLE = "alembic_version"
VERSION_SCHEMA = "memori"


def run_offline() -> None:
    context.configure(
        url=context.config.get_main_option("sqlalchemy.url") or "postgresql://",
        literal_binds=True,
        version_table=VERSION_TABLE,
        version_table_schema=VERSION_SCHEMA,
        transaction_per_migration=False,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connection = context.config.attributes["connection"]
    context.configure(
        connection=connection,
        version_table=VERSION_TABLE,
        version_table_schema=VERSION_SCHEMA,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
