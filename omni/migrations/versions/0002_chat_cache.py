"""The chat replay cache index (a projection of the log).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from omni.migrations.pgsql import BIG

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "chat_cache",
        sa.Column("key", sa.Text, primary_key=True),
        sa.Column("completion_id", sa.Text, nullable=False),
        sa.Column("created_at", BIG, nullable=False),
    )
    op.create_index("ix_chat_cache_created_at", "chat_cache", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_chat_cache_created_at", table_name="chat_cache")
    op.drop_table("chat_cache")
