"""Pydantic models at the HTTP edge; no I/O."""
