"""Commands and queries of the APIs over the event log (no HTTP here)."""
