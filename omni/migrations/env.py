"""Alembic environment: migrations run on a plain (sync) SQLite connection."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from omni.events.schema import metadata

config = context.config
url = config.get_main_option("sqlalchemy.url", "sqlite:///omni.db")  # as alembic.ini


def run_migrations_online() -> None:
    engine = create_engine(url)
    with engine.connect() as connection:
        context.configure(connection=connection, target_metadata=metadata)
        with context.begin_transaction():
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
