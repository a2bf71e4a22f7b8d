"""The event log: one append-only table. On PostgreSQL `position` is a BIGSERIAL and the
JSON helpers the later migrations' triggers use are made here (omni/migrations/pgsql.py).

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from omni.migrations.pgsql import BIG, FUNCTION_NAMES, FUNCTIONS, is_postgres

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "events",
        sa.Column("position", BIG, primary_key=True, autoincrement=True),
        sa.Column("stream_id", sa.Text, nullable=False),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("type", sa.Text, nullable=False),
        sa.Column("data", sa.Text, nullable=False),
        sa.Column("created_at", BIG, nullable=False),
        sa.UniqueConstraint("stream_id", "seq", name="uq_events_stream_seq"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_events_type", "events", ["type"])
    if is_postgres():
        for function in FUNCTIONS:
            op.execute(function)


def downgrade() -> None:
    if is_postgres():
        for name in FUNCTION_NAMES:
            op.execute(f"DROP FUNCTION IF EXISTS {name}")
    op.drop_index("ix_events_type", table_name="events")
    op.drop_table("events")
