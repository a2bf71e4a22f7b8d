"""Alembic environment: migrations run on a plain (sync) connection, SQLite's or PostgreSQL's
(psycopg); on PostgreSQL one upgrade at a time (an advisory lock held through it)."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from omni.db_postgres import MIGRATION_LOCK
from omni.events.schema import metadata

config = context.config
url = config.get_main_option("sqlalchemy.url", "sqlite:///omni.db")  # as alembic.ini


def run_migrations_online() -> None:
    engine = create_engine(url)
    with engine.connect() as connection:
        context.configure(connection=connection, target_metadata=metadata)
        with context.begin_transaction():
            if connection.dialect.name == "postgresql":  # released at the commit
                connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK})")
            context.run_migrations()
    engine.dispose()


def run_migrations_offline() -> None:
    context.configure(url=url, target_metadata=metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
