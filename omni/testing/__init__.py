"""Tiny random-weight models built on the spot, for tests and benchmarks (no downloads)."""
