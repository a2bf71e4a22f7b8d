"""Leases: which server works on which stream where several share one log.

A lease row (stream, owner, expiry in ms) is taken before a generation starts and renewed
while it runs; start-up recovery, and another server once the lease has expired, take only
streams whose lease is gone or expired. Plain SQL that SQLite and PostgreSQL both run.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "leases",
        sa.Column("stream_id", sa.Text, primary_key=True),
        sa.Column("owner", sa.Text, nullable=False),
        sa.Column("expires_at", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_leases_expires_at", "leases", ["expires_at"])
    op.create_index("ix_leases_owner", "leases", ["owner"])


def downgrade() -> None:
    op.drop_table("leases")
