"""The log in an SQLite file: the store, its connections, cache index, leases and upkeep."""
