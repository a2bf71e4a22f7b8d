"""The log in a PostgreSQL database several servers may share: the store, its connections,
cache index, leases, notifications and upkeep."""
