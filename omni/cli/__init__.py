"""The `omni` command: one module per command group (serve, db, models, inspect), the parser
and `main` in omni/cli/program.py."""

from omni.cli.program import main

__all__ = ["main"]
