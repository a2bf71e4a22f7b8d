"""Omni: an OpenAI-compatible MLX server whose Responses API is an event log in SQLite."""

__version__ = "0.1.0"
