"""The reliability probe, kept as a bounded suite: a fuzzer over every endpoint and the fault
scenarios (crash, full disk, read-only or lost database, SIGTERM). `python -m tests.probe`
runs it at full size and prints its figures."""
