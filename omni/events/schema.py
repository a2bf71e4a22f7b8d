"""The one table of the log, as SQLAlchemy Core (the migrations create it)."""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Index, Integer, MetaData, Table, Text, UniqueConstraint

metadata = MetaData()

events = Table(
    "events",
    metadata,
    Column("position", Integer, primary_key=True, autoincrement=True),
    Column("stream_id", Text, nullable=False),
    Column("seq", Integer, nullable=False),
    # Recovery and listings scan by type ("which streams were accepted / ended").
    Column("type", Text, nullable=False, index=True),
    Column("data", Text, nullable=False),
    Column("created_at", Integer, nullable=False),
    UniqueConstraint("stream_id", "seq", name="uq_events_stream_seq"),
    sqlite_autoincrement=True,
)

# The chat replay cache: a projection of the log that the database itself keeps (migration
# 0004's triggers on `events`), one row per replayable completion; the store only bounds it
# by entries and age.
chat_cache = Table(
    "chat_cache",
    metadata,
    Column("key", Text, nullable=False),
    Column("completion_id", Text, primary_key=True),
    Column("created_at", Integer, nullable=False),
)
Index("ix_chat_cache_key", chat_cache.c.key, chat_cache.c.created_at)
Index("ix_chat_cache_created_at", chat_cache.c.created_at)

# Which responses hold an item (an input or an output item): a projection of the log that
# SQLite keeps itself, by triggers on `events` (migration 0003), so that no write path
# can forget it; `item_reference` inputs are resolved through it.
items = Table(
    "items",
    metadata,
    Column("item_id", Text, primary_key=True),
    Column("position", Integer, primary_key=True),  # of the event that holds the item
    Column("response_id", Text, nullable=False),
    sqlite_with_rowid=False,
)
Index("ix_items_position", items.c.position)

# Who works on which stream where several servers share the log (migration 0007): taken
# before a generation starts, renewed while it runs, deleted when its work is done.
leases = Table(
    "leases",
    metadata,
    Column("stream_id", Text, primary_key=True),
    Column("owner", Text, nullable=False, index=True),
    Column("expires_at", BigInteger, nullable=False, index=True),
)
