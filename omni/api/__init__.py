"""HTTP: Quart blueprints and SSE bytes. Everything else lives below."""
